"""A plugin for the multi-rank tests (``--plugin tests.job_plugin``), loaded from the
repository root like a launcher's own module.

* ``linger``: one rank (``test.linger_rank``) sleeps ``test.linger_s`` seconds after the
  rendezvous and before the process group, so that a test can kill it mid-start-up.
* ``verify_engine_transfer``: every rank registers a buffer with its own Mooncake
  transfer engine, the ranks swap session ids and addresses over the process group,
  and each reads the next rank's buffer engine to engine (``transfer_sync_read``),
  byte-checked: the check that the engines' advertised hostnames reach across hosts.
"""

from __future__ import annotations

import time
from typing import Any

from initorch import Registry, StepContext, StepError, setting, step

LINGER_S = setting("test.linger_s", float, default=0, minimum=0,
                   description="how long the lingering rank sleeps")
LINGER_RANK = setting("test.linger_rank", int, default=0, minimum=0,
                      description="the rank that lingers")
ENGINE_BYTES = 1 << 16


@step("linger", description="One rank sleeps between the rendezvous and the process group",
      requires=["rendezvous"], before=["init_torch_distributed"],
      wanted_by=["init_torch_distributed"], settings=(LINGER_S, LINGER_RANK))
def linger(ctx: StepContext) -> None:
    if ctx.rank.rank == ctx.setting("test.linger_rank"):
        ctx.log.info("lingering", seconds=ctx.setting("test.linger_s"))
        time.sleep(float(ctx.setting("test.linger_s")))


@step("verify_engine_transfer",
      description="Read the next rank's registered buffer engine to engine, byte-checked",
      requires=["init_shared_mooncake_transfer_engine", "init_torch_distributed"],
      wanted_by=["verify_transfer"], device_bound=True, barrier=True)
def verify_engine_transfer(ctx: StepContext) -> dict[str, Any]:
    import torch
    import torch.distributed as dist

    shared = ctx.output("init_shared_mooncake_transfer_engine")
    rank, world = ctx.rank.rank, ctx.rank.world_size
    mine = torch.full((ENGINE_BYTES,), rank + 1, dtype=torch.uint8)
    landing = torch.zeros(ENGINE_BYTES, dtype=torch.uint8)
    for buffer in (mine, landing):
        shared.call("register_memory", buffer.data_ptr(), ENGINE_BYTES)
    try:
        peers: list[Any] = [None] * world
        dist.all_gather_object(peers, (shared.session_id, mine.data_ptr()))
        peer = (rank + 1) % world
        session, address = peers[peer]
        shared.call("transfer_sync_read", session, landing.data_ptr(), address, ENGINE_BYTES)
        if not bool((landing == peer + 1).all()):
            raise StepError(f"rank {rank}: the buffer read from rank {peer} ({session}) "
                            "arrived corrupted")
        dist.barrier()  # the peer reading our buffer is done before it goes
    finally:
        for buffer in (mine, landing):
            shared.engine.unregister_memory(buffer.data_ptr())
    ctx.log.info("engine_transfer_verified", session_id=shared.session_id, peer=peer,
                 peer_session_id=session, nbytes=ENGINE_BYTES)
    return {"peer": peer, "peer_session_id": session}


def register(registry: Registry) -> None:
    for definition in (linger, verify_engine_transfer):
        registry.steps.add(definition)
