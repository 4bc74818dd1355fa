"""``init_torch_distributed``: form the real process group for this rank.

Under torchrun the rendezvous comes from ``MASTER_ADDR``/``MASTER_PORT``
(``env://``); a single process without them gets a private TCP rendezvous on a
free loopback port, so ``initorch run`` works on a laptop.  A refused
connection to the rendezvous is the one transient failure (rank 0 may simply
not be listening yet) and is retried; everything else fails fast.

With the ``mooncake-ep`` overlay (``mooncake.elastic_ep``) the backend is
Mooncake's (``mooncake.pg_backend``), handed the shared engine by
``set_mooncake_pg_engine`` and given ``MooncakeBackendOptions``, as SGLang
0.5.23 does (``distributed/parallel_state.py init_distributed_environment``).
"""

from __future__ import annotations

import datetime
import os
from typing import TYPE_CHECKING, Any

from initorch import StepContext, StepError, setting, step
from initorch.model.step import MAX_TIMEOUT_S
from initorch.steps.network import free_port, host_port

if TYPE_CHECKING:
    from initorch.steps.mooncake_pg import MooncakeProcessGroupBackend

COLLECTIVE_BACKEND = setting(
    "device.collective_backend", str, required=True, pattern=r"[a-z][a-z0-9_-]*",
    description="the device's torch.distributed backend (gloo, nccl, hccl, mccl, xccl, ...)")
MASTER_ADDR = setting(
    "distributed.master_addr", str, default="127.0.0.1", pattern=r"\S+",
    description="rendezvous host outside torchrun (a world of one)")
MASTER_PORT = setting(
    "distributed.master_port", int, default=0, minimum=0, maximum=65535,
    description="rendezvous port outside torchrun; 0 picks a free one")
# datetime.timedelta overflows long before 1e999 (which YAML reads as infinity).
TIMEOUT_S = setting(
    "distributed.timeout_s", float, default=120, exclusive_minimum=0, maximum=MAX_TIMEOUT_S,
    description="process-group timeout in seconds (rendezvous and collectives)")
ELASTIC_EP = setting(
    "mooncake.elastic_ep", bool, default=False,
    description="Mooncake as the torch.distributed backend (elastic EP; the mooncake-ep "
                "overlay sets it)")


def init_method(ctx: StepContext) -> str:
    """``env://`` under torchrun, else a TCP rendezvous for a world of one."""
    if "MASTER_ADDR" in os.environ and "MASTER_PORT" in os.environ:
        return "env://"
    if ctx.rank.world_size != 1:
        raise StepError(
            f"WORLD_SIZE={ctx.rank.world_size} but MASTER_ADDR/MASTER_PORT are not set",
            hint="start the ranks with torchrun, or export MASTER_ADDR and MASTER_PORT",
        )
    host = str(ctx.setting("distributed.master_addr"))
    port = int(ctx.setting("distributed.master_port")) or free_port(host)
    return f"tcp://{host_port(host, port)}"


def backend_and_options(ctx: StepContext) -> tuple[str, Any]:
    """The device's collective backend, or Mooncake's with its options (elastic EP)."""
    if not ctx.setting("mooncake.elastic_ep"):
        return str(ctx.setting("device.collective_backend")), None
    mooncake: MooncakeProcessGroupBackend = ctx.output("set_mooncake_pg_engine")
    return mooncake.name, mooncake.options(ctx.rank.world_size, ctx.device.type)


@step(
    "init_torch_distributed",
    description="Create the torch.distributed process group with the profile's backend",
    requires=["import_backend"],
    device_bound=True,
    retries=2,
    retry_on=(ConnectionRefusedError,),
    settings=(COLLECTIVE_BACKEND, MASTER_ADDR, MASTER_PORT, TIMEOUT_S, ELASTIC_EP),
)
def init_torch_distributed(ctx: StepContext) -> Any:
    import torch.distributed as dist

    backend, options = backend_and_options(ctx)
    if dist.is_initialized():
        raise StepError("a default process group already exists in this process",
                        hint="let initorch create it, or remove init_torch_distributed from "
                             "the profile")
    method = init_method(ctx)
    timeout = datetime.timedelta(seconds=float(ctx.setting("distributed.timeout_s")))
    ctx.log.info("process_group_starting", backend=backend, init_method=method,
                 world_size=ctx.rank.world_size)
    try:
        dist.init_process_group(backend=backend, init_method=method, rank=ctx.rank.rank,
                                world_size=ctx.rank.world_size, timeout=timeout,
                                pg_options=options)
    except RuntimeError as exc:
        if "connection refused" in str(exc).lower():
            raise ConnectionRefusedError(f"rendezvous {method}: {exc}") from exc
        raise
    return dist.group.WORLD


@init_torch_distributed.teardown
def destroy_process_group(ctx: StepContext, group: Any) -> None:
    import torch.distributed as dist

    if dist.is_initialized():
        dist.destroy_process_group()


STEPS = (init_torch_distributed,)
