"""``set_device``: bind this rank to its accelerator, per thread.

Device context is per host thread on every accelerator we target (CUDA's
current device, Ascend's ACL context).  So this step does not just call
``set_device`` once: it returns a :class:`ThreadDeviceBinding` that the
executor applies again on whichever thread runs a ``device_bound`` step.  Ranks
that never bind all land on device 0; this step makes the index explicit.
"""

from __future__ import annotations

import os
import threading
from dataclasses import field
from types import ModuleType
from typing import Any

from initorch.plugin import StepContext, StepError, record, setting, step

# Devices without per-rank device selection: binding is a no-op.
HOST_DEVICE_TYPES = frozenset({"cpu"})

VISIBLE_DEVICES_ENV = setting(
    "device.visible_devices_env", str, nullable=True, pattern=r"[A-Za-z_][A-Za-z0-9_]*",
    description="environment variable that limits the visible devices "
                "(CUDA_VISIBLE_DEVICES, ASCEND_RT_VISIBLE_DEVICES); null for none")

CONTEXT_PER_THREAD = setting(
    "device.context_per_thread", bool, default=True,
    description="whether the device context is per host thread (cudaSetDevice, "
                "aclrtSetDevice): a device-bound call on a thread where set_device never ran "
                "fails or lands on device 0; false for host devices (cpu, mps). Read by "
                "engine integrations that check where vendor calls are made")


@record(frozen=False)
class ThreadDeviceBinding:
    """Callable that sets ``index`` as the current device on the calling thread."""

    module: ModuleType | None
    index: int | None
    bound_threads: set[int] = field(default_factory=set)

    def __call__(self) -> None:
        if self.module is not None and self.index is not None:
            setter = getattr(self.module, "set_device", None)
            if setter is not None:
                setter(self.index)
        self.bound_threads.add(threading.get_ident())

    def __repr__(self) -> str:
        name = getattr(self.module, "__name__", "host")
        return f"<device binding {name}:{self.index}>"


def visible_devices(ctx: StepContext) -> list[str] | None:
    """The entries of the profile's visible-devices variable, if it is set."""
    variable = ctx.setting("device.visible_devices_env")
    if variable is None:
        return None
    raw = os.environ.get(str(variable))
    if raw is None or not raw.strip():
        return None
    return [item.strip() for item in raw.split(",") if item.strip()]


def device_index(ctx: StepContext) -> int:
    """The local device index: ``--device TYPE:N`` if given, else ``LOCAL_RANK``."""
    if ctx.device.index is not None and ctx.rank.local_rank != 0:
        raise StepError(
            f"--device {ctx.device} pins every rank to device {ctx.device.index}, but this is "
            f"local rank {ctx.rank.local_rank}",
            hint="drop the index (--device " + ctx.device.type + ") so that LOCAL_RANK picks "
                 "each rank's device",
        )
    index = ctx.device.index if ctx.device.index is not None else ctx.rank.local_rank
    visible = visible_devices(ctx)
    if visible is not None and index >= len(visible):
        variable = ctx.setting("device.visible_devices_env")
        raise StepError(
            f"device index {index} but {variable}={','.join(visible)} exposes only "
            f"{len(visible)} device(s)",
            hint=f"start at most {len(visible)} ranks per node, or widen {variable}",
        )
    return index


def tensor_device(ctx: StepContext) -> Any:
    """The ``torch.device`` this rank's tensors live on.  Its type is the name of
    the profile's device module (``torch.npu`` -> ``npu``; ROCm's ``torch.cuda`` ->
    ``cuda``), so no device string is spelled out here."""
    import torch

    if ctx.device.type in HOST_DEVICE_TYPES:
        return torch.device("cpu")
    module: ModuleType = ctx.output("import_backend")
    return torch.device(module.__name__.rsplit(".", 1)[-1], device_index(ctx))


@step(
    "set_device",
    description="Set this rank's device on the calling thread (LOCAL_RANK, visible devices)",
    requires=["import_backend"],
    reads=["import_backend"],
    binds_device=True,
    settings=(VISIBLE_DEVICES_ENV, CONTEXT_PER_THREAD),
)
def set_device(ctx: StepContext) -> ThreadDeviceBinding:
    module: ModuleType = ctx.output("import_backend")
    if ctx.device.type in HOST_DEVICE_TYPES:
        binding = ThreadDeviceBinding(None, None)
    else:
        index = device_index(ctx)
        count_fn = getattr(module, "device_count", None)
        count = count_fn() if count_fn is not None else None
        if count is not None and index >= count:
            raise StepError(
                f"device index {index} is out of range: {module.__name__} sees {count} "
                "device(s)",
                hint="check LOCAL_RANK and the visible-devices variable",
            )
        binding = ThreadDeviceBinding(module, index)
    binding()
    ctx.log.info("device_bound", index=binding.index,
                 device_module=getattr(module, "__name__", None))
    return binding


STEPS = (set_device,)
