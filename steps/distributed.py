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
from typing import Any

from initorch import StepContext, StepError, step
from initorch.steps.mooncake_pg import MooncakeProcessGroupBackend
from initorch.steps.network import free_port, host_port


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
