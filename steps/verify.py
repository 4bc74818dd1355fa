"""``verify_transfer``: prove the registered pools move real bytes between ranks.

Each rank writes a pattern unique to itself into the next rank's pool (rank 0
of a world of one writes into itself) through the transfer engine, then checks
the bytes it received from the previous rank.  Addresses are exchanged over
the process group, so this also proves the group and the engines agree on who
is who.
"""

from __future__ import annotations

from typing import Any

from initorch import StepContext, StepError, setting, step
from initorch.steps.host_pool import HICACHE_ENABLED, Registration
from initorch.steps.transfer_engine import MOONCAKE_ENABLED

SLOT_BYTES = 64 * 1024
VERIFY_TRANSFER = setting(
    "checks.verify_transfer", bool, default=False,
    description="move real bytes between ranks through the registered pools")


def pattern(sender: int, nbytes: int) -> Any:
    """Bytes only ``sender`` writes: distinguishes every rank's slot."""
    import torch

    index = torch.arange(nbytes, dtype=torch.int64)
    return ((index * 31 + sender * 97 + 7) % 251).to(torch.uint8)


@step(
    "verify_transfer",
    description="Write a pattern into the next rank's registered pool and check what arrives",
    requires=["register_mem_pool_host", "init_torch_distributed"],
    device_bound=True,
    when="checks.verify_transfer and hicache.enabled and mooncake.enabled",
    settings=(VERIFY_TRANSFER, HICACHE_ENABLED, MOONCAKE_ENABLED),
)
def verify_transfer(ctx: StepContext) -> dict[str, Any]:
    import torch.distributed as dist

    registration: Registration = ctx.output("register_mem_pool_host")
    pool, engine = registration.pool, registration.engine
    rank, world = dist.get_rank(), dist.get_world_size()
    if pool.nbytes < (world + 1) * SLOT_BYTES:
        needed_mb = max(1, (world + 1) * SLOT_BYTES >> 20)
        raise StepError(f"host pool of {pool.nbytes} bytes is too small to verify {world} ranks",
                        hint=f"give hicache.host_pool_mb at least {needed_mb}")
    # Slot `world` of every pool is the local staging area; slot r receives rank r's bytes.
    staging = world * SLOT_BYTES
    pool.buffer[staging:staging + SLOT_BYTES].copy_(pattern(rank, SLOT_BYTES))
    peers: list[Any] = [None] * world
    dist.all_gather_object(peers, (engine.session_id, pool.ptr))
    target_session, target_ptr = peers[(rank + 1) % world]
    dist.barrier()
    engine.call("transfer_sync_write", target_session, pool.ptr + staging,
                target_ptr + rank * SLOT_BYTES, SLOT_BYTES)
    dist.barrier()
    sender = (rank - 1) % world
    received = pool.buffer[sender * SLOT_BYTES:(sender + 1) * SLOT_BYTES]
    if not bool((received == pattern(sender, SLOT_BYTES)).all()):
        raise StepError(f"rank {rank}: bytes from rank {sender} arrived corrupted",
                        hint="check that every rank registered its pool with the same protocol")
    ctx.log.info("transfer_verified", sent_to=(rank + 1) % world, received_from=sender,
                 nbytes=SLOT_BYTES)
    return {"bytes": SLOT_BYTES, "sent_to": (rank + 1) % world, "received_from": sender}


STEPS = (verify_transfer,)
