"""A plugin for the multi-rank tests (``--plugin tests.job_plugin``), loaded from the
repository root like a launcher's own module.

* ``linger``: one rank (``test.linger_rank``) sleeps ``test.linger_s`` seconds after the
  rendezvous and before the process group, so that a test can kill it mid-start-up.
* ``die_in_process_group`` and ``die_before_store``: one rank (``test.die_rank``) kills
  itself with SIGKILL where ``test.die_at`` says: as it enters ``init_process_group``
  (after the barrier, so that its peers are inside torch's own wait for it), or once
  the managed master is up and before its store client exists (so that the master's
  owner waits for a client that never closes), ``test.die_after_s`` later.
* ``verify_engine_transfer``: every rank registers a buffer with its own Mooncake
  transfer engine, the ranks swap session ids and addresses over the process group,
  and each reads the next rank's buffer engine to engine (``transfer_sync_read``),
  byte-checked: the check that the engines' advertised hostnames reach across hosts.
"""

from __future__ import annotations

import os
import signal
import time
from typing import Any

from initorch import Registry
from initorch.errors import StepError
from initorch.plugin import StepContext, setting, step

LINGER_S = setting("test.linger_s", float, default=0, minimum=0,
                   description="how long the lingering rank sleeps")
LINGER_RANK = setting("test.linger_rank", int, default=0, minimum=0,
                      description="the rank that lingers")
DIE_RANK = setting("test.die_rank", int, default=-1, minimum=-1,
                   description="the rank that dies (-1: none)")
DIE_AT = setting("test.die_at", str, default="process_group",
                 choices=("process_group", "store"), description="where that rank dies")
DIE_AFTER_S = setting("test.die_after_s", float, default=0, minimum=0,
                      description="how long that rank waits before it dies (die_at: store)")
ENGINE_BYTES = 1 << 16


@step("linger", description="One rank sleeps between the rendezvous and the process group",
      requires=["rendezvous"], before=["init_torch_distributed"],
      wanted_by=["init_torch_distributed"], settings=(LINGER_S, LINGER_RANK))
def linger(ctx: StepContext) -> None:
    if ctx.rank.rank == ctx.setting("test.linger_rank"):
        ctx.log.info("lingering", seconds=ctx.setting("test.linger_s"))
        time.sleep(float(ctx.setting("test.linger_s")))


def dies_here(ctx: StepContext, where: str) -> bool:
    return bool(ctx.rank.rank == ctx.setting("test.die_rank")
                and ctx.setting("test.die_at") == where)


def die(ctx: StepContext) -> None:
    ctx.log.info("dying", pid=os.getpid())
    os.kill(os.getpid(), signal.SIGKILL)


@step("die_in_process_group",
      description="One rank dies by SIGKILL as it enters init_process_group",
      requires=["import_backend"], before=["init_torch_distributed"],
      wanted_by=["init_torch_distributed"], settings=(DIE_RANK, DIE_AT))
def die_in_process_group(ctx: StepContext) -> None:
    if not dies_here(ctx, "process_group"):
        return
    import torch.distributed as dist

    # init_torch_distributed looks it up when it calls it, after its barrier.
    dist.init_process_group = lambda *args, **kwargs: die(ctx)


@step("die_before_store", description="One rank dies by SIGKILL before its store client",
      after=["mooncake_master"], before=["init_mooncake_store"],
      wanted_by=["init_mooncake_store"], settings=(DIE_RANK, DIE_AT, DIE_AFTER_S))
def die_before_store(ctx: StepContext) -> None:
    if dies_here(ctx, "store"):
        time.sleep(float(ctx.setting("test.die_after_s")))
        die(ctx)


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
    for definition in (linger, die_in_process_group, die_before_store,
                       verify_engine_transfer):
        registry.steps.add(definition)
