"""``init_torch_distributed``: form the real process group for this rank.

The job's store comes from the ``rendezvous`` step (torch.distributed's own
rendezvous: torchrun's agent store, or rank 0's TCPStore), and the process
group forms over that same store, so the ranks meet once and have agreed on the
plan before.  The step is a barrier: no rank creates the group before every
rank has finished what it depends on, and a rank that failed or died meanwhile
is named at once instead of after the group's timeout.

With the ``mooncake-ep`` overlay (``mooncake.elastic_ep``) the backend is
Mooncake's (``mooncake.pg_backend``), handed the shared engine by
``set_mooncake_pg_engine`` and given ``MooncakeBackendOptions``, as SGLang
0.5.23 does (``distributed/parallel_state.py init_distributed_environment``).
"""

from __future__ import annotations

import datetime
from typing import TYPE_CHECKING, Any

from initorch.plugin import StepContext, StepError, setting, step
from initorch.steps.rendezvous import TIMEOUT_S, TorchJobStore

if TYPE_CHECKING:
    from initorch.steps.mooncake_pg import MooncakeProcessGroupBackend

COLLECTIVE_BACKEND = setting(
    "device.collective_backend", str, required=True, pattern=r"[a-z][a-z0-9_-]*",
    description="the device's torch.distributed backend (gloo, nccl, hccl, mccl, xccl, ...)")
ELASTIC_EP = setting(
    "mooncake.elastic_ep", bool, default=False,
    description="Mooncake as the torch.distributed backend (elastic EP; the mooncake-ep "
                "overlay sets it)")


def backend_and_options(ctx: StepContext) -> tuple[str, Any]:
    """The device's collective backend, or Mooncake's with its options (elastic EP)."""
    if not ctx.setting("mooncake.elastic_ep"):
        return str(ctx.setting("device.collective_backend")), None
    mooncake: MooncakeProcessGroupBackend = ctx.output("set_mooncake_pg_engine")
    return mooncake.name, mooncake.options(ctx.rank.world_size, ctx.device.type)


@step(
    "init_torch_distributed",
    description="Create the torch.distributed process group with the profile's backend",
    requires=["import_backend", "rendezvous"],
    reads=["rendezvous"],
    device_bound=True,
    barrier=True,
    settings=(COLLECTIVE_BACKEND, TIMEOUT_S, ELASTIC_EP),
)
def init_torch_distributed(ctx: StepContext) -> Any:
    import torch.distributed as dist

    backend, options = backend_and_options(ctx)
    if dist.is_initialized():
        raise StepError("a default process group already exists in this process",
                        hint="let initorch create it, or remove init_torch_distributed from "
                             "the profile")
    job: TorchJobStore = ctx.output("rendezvous")
    timeout = datetime.timedelta(seconds=float(ctx.setting("distributed.timeout_s")))
    ctx.log.info("process_group_starting", backend=backend, store=job.address,
                 world_size=ctx.rank.world_size)
    dist.init_process_group(backend=backend, store=job.store, rank=ctx.rank.rank,
                            world_size=ctx.rank.world_size, timeout=timeout,
                            pg_options=options)
    return dist.group.WORLD


@init_torch_distributed.teardown
def destroy_process_group(ctx: StepContext, group: Any) -> None:
    import torch.distributed as dist

    if dist.is_initialized():
        dist.destroy_process_group()


STEPS = (init_torch_distributed,)
