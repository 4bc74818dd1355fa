"""``init_torch_distributed``: form the real process group for this rank.

Under torchrun the rendezvous comes from ``MASTER_ADDR``/``MASTER_PORT``
(``env://``); a single process without them gets a private TCP rendezvous on a
free loopback port, so ``initorch run`` works on a laptop.  A refused
connection to the rendezvous is the one transient failure (rank 0 may simply
not be listening yet) and is retried; everything else fails fast.
"""

from __future__ import annotations

import datetime
import importlib
import os
import socket
from typing import Any

from initorch import StepContext, StepError, setting, step
from initorch.model.step import MAX_TIMEOUT_S

# Backends provided by a package that must be imported first to register them.
BACKEND_PROVIDERS = {"mooncake": "mooncake.pg"}

COLLECTIVE_BACKEND = setting(
    "device.collective_backend", str, required=True, pattern=r"[a-z][a-z0-9_-]*",
    description="torch.distributed backend (gloo, nccl, hccl, mccl, xccl, mooncake, ...)")
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


def free_port(host: str) -> int:
    """A TCP port that is free on ``host`` right now (the OS picks it)."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as probe:
        probe.bind((host, 0))
        port: int = probe.getsockname()[1]
        return port


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
    return f"tcp://{host}:{port}"


@step(
    "init_torch_distributed",
    description="Create the torch.distributed process group with the profile's backend",
    requires=["import_backend"],
    device_bound=True,
    retries=2,
    retry_on=(ConnectionRefusedError,),
    settings=(COLLECTIVE_BACKEND, MASTER_ADDR, MASTER_PORT, TIMEOUT_S),
)
def init_torch_distributed(ctx: StepContext) -> Any:
    import torch.distributed as dist

    backend = str(ctx.setting("device.collective_backend"))
    provider = BACKEND_PROVIDERS.get(backend)
    if provider is not None:
        try:
            importlib.import_module(provider)
        except ImportError as exc:
            raise StepError(f"backend '{backend}' needs {provider}: {exc}",
                            hint=f"install a build of {provider.split('.')[0]} that matches "
                                 "your torch version") from exc
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
                                world_size=ctx.rank.world_size, timeout=timeout)
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
