"""Glue that plugs a SIMULATED vendor device into torch the way real plugins do.

Only the simulated vendor shims (``torch_npu``, ``torch_musa`` in this site directory)
import this module; it imports torch lazily so the rest of ``initorch_simulation``
stays torch-free.

What is registered, and why it is faithful enough:

* The device module goes through torch's PrivateUse1 slot (renamed to ``npu`` or
  ``musa``), exactly the slot torch_npu and torch_musa use, so ``torch.device("npu:1")``
  parses and ``torch.get_device_module("npu").set_device(1)`` reaches the simulated
  per-thread runtime.  There is one PrivateUse1 slot per process, hence only one of
  the two simulated plugins can be loaded per process, as with the real ones.
* The collective backend (``hccl`` / ``mccl``) is registered through
  ``torch.distributed.Backend.register_backend`` and builds a real gloo process group:
  real collectives under a simulated name.  It also claims ``cpu`` tensors, because
  no tensor can live on the simulated device (no device allocator exists).
* DEVIATION: torch accepts a PrivateUse1 pinned-memory allocator only from C++, so
  ``torch.empty(..., pin_memory=True)`` would raise ``NotImplementedError``.  The
  simulation wraps torch's CPU factory functions so that ``pin_memory=True`` returns
  a plain CPU tensor whose storage is recorded in ``initorch_simulation.pinned.PINNED``;
  ``Tensor.is_pinned()`` consults that record and ``Tensor.pin_memory()`` copies into
  such a block.  No memory is really page-locked.
"""

from __future__ import annotations

import functools
import logging
import sys
import types
import weakref
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

from initorch_simulation._context import SimulatedDeviceRuntime
from initorch_simulation.pinned import PINNED

if TYPE_CHECKING:
    import torch

LOG = logging.getLogger("initorch_simulation")

PRIVATEUSE1_DEFAULT_NAME = "privateuseone"

PINNING_FACTORIES = (
    "empty",
    "empty_strided",
    "zeros",
    "ones",
    "full",
    "empty_like",
    "zeros_like",
    "ones_like",
    "full_like",
)
"""torch factory functions whose ``pin_memory=True`` the simulation serves."""

_pinning_state: dict[str, str] = {}
"""``{"backend": name}`` once the simulated pinned allocator is installed."""


# -- device module ---------------------------------------------------------------------
def _device_index(device: Any, backend: str) -> int:
    """Normalise an int / "npu:1" / torch.device to an index; -1 means "no index"."""
    import torch

    if isinstance(device, bool):
        raise TypeError(f"simulated {backend}: invalid device {device!r}")
    if isinstance(device, int):
        return device
    if isinstance(device, str):
        if device.strip().lstrip("-").isdigit():
            return int(device)
        device = torch.device(device)
    if isinstance(device, torch.device):
        if device.type != backend:
            raise ValueError(f"Expected a {backend} device, but got: {device}")
        return -1 if device.index is None else device.index
    raise TypeError(f"simulated {backend}: invalid device {device!r}")


def build_device_module(
    module_name: str,
    backend: str,
    runtime: SimulatedDeviceRuntime,
    current_device: Callable[[], int],
    device_label: str,
) -> types.ModuleType:
    """Build the ``torch.<backend>`` module object of a simulated vendor plugin.

    ``current_device`` carries the vendor's semantics for a thread with no context
    (both torch_npu and torch_musa answer 0 there without raising).
    """
    module = types.ModuleType(
        module_name,
        f"SIMULATED torch.{backend} device module (initorch tests); "
        f"per-thread context kept by {type(runtime).__name__}.",
    )
    seeds: list[int] = []

    def set_device(device: Any) -> None:
        """Bind the calling thread to ``device`` (negative / index-less: no-op, as torch)."""
        index = _device_index(device, backend)
        if index >= 0:
            runtime.set_device(index)

    def device_count() -> int:
        return runtime.device_count()

    def is_available() -> bool:
        return runtime.device_count() > 0

    def is_initialized() -> bool:
        return True

    def synchronize(device: Any = None) -> None:
        """Nothing is queued on a simulated device; only validate the argument."""
        if device is not None:
            _device_index(device, backend)

    def _is_in_bad_fork() -> bool:
        return False

    def manual_seed(seed: int) -> None:
        seeds.append(int(seed))

    def manual_seed_all(seed: int) -> None:
        seeds.append(int(seed))

    def get_device_name(device: Any = None) -> str:
        index = current_device() if device is None else _device_index(device, backend)
        index = current_device() if index < 0 else index
        return f"{device_label} (simulated, physical id {runtime.physical_id(index)})"

    class device:  # mirrors torch.<backend>.device
        """Context manager that switches the thread's device and restores it."""

        def __init__(self, target: Any) -> None:
            self.index = _device_index(target, backend)
            self.previous = -1

        def __enter__(self) -> None:
            if self.index >= 0:
                self.previous = current_device()
                runtime.set_device(self.index)

        def __exit__(self, *exc: object) -> None:
            if self.index >= 0 and self.previous >= 0:
                runtime.set_device(self.previous)

    for fn in (
        set_device,
        device_count,
        is_available,
        is_initialized,
        synchronize,
        _is_in_bad_fork,
        manual_seed,
        manual_seed_all,
        get_device_name,
    ):
        setattr(module, fn.__name__, fn)
    module.current_device = current_device  # type: ignore[attr-defined]
    module.device = device  # type: ignore[attr-defined]
    module.SIMULATED = True  # type: ignore[attr-defined]
    module.simulated_runtime = runtime  # type: ignore[attr-defined]
    module.simulated_seeds = seeds  # type: ignore[attr-defined]
    return module


def claim_privateuse1(backend: str, device_module: types.ModuleType) -> None:
    """Rename PrivateUse1 to ``backend`` and register ``device_module`` as torch.<backend>.

    Raises RuntimeError when another simulated vendor already owns the slot: torch has
    one PrivateUse1 per process, which is why npu and musa never coexist.
    """
    import torch
    from torch.utils.backend_registration import _setup_privateuseone_for_python_backend

    current = torch._C._get_privateuse1_backend_name()
    if current == backend and getattr(torch, backend, None) is device_module:
        return
    if current != PRIVATEUSE1_DEFAULT_NAME:
        raise RuntimeError(
            f"simulated torch_{backend} cannot be loaded: torch's PrivateUse1 device slot "
            f"is already claimed by {current!r}. The simulated npu (torch_npu) and musa "
            f"(torch_musa) plugins both register through PrivateUse1, so only one of them "
            f"can be imported per process; run the other in a separate process."
        )
    _setup_privateuseone_for_python_backend(rename=backend, backend_module=device_module)
    route_torch_accelerator(device_module)
    LOG.info("simulated %s device module registered through PrivateUse1", backend)


def route_torch_accelerator(device_module: types.ModuleType) -> None:
    """Send ``torch.accelerator`` device get/set to the simulated runtime.

    A Python PrivateUse1 backend can only supply a dummy device guard (its Python
    binding overrides nothing but ``type_``), so ``torch.accelerator.set_device_index``
    would silently do nothing and ``current_device_index`` would always answer 0.  On
    the real plugins both reach the runtime, so the simulation re-routes the
    ``torch._C._accelerator_*`` entry points that ``torch.accelerator`` calls.
    """
    import torch

    def set_device_index(index: int) -> None:
        device_module.set_device(index)

    def get_device_index() -> int:
        return int(device_module.current_device())

    def exchange_device(index: int) -> int:
        previous = get_device_index()
        if index >= 0 and index != previous:
            device_module.set_device(index)
        return previous

    def synchronize_device(index: int) -> None:
        device_module.synchronize(index if index >= 0 else None)

    routes = {
        "_accelerator_setDeviceIndex": set_device_index,
        "_accelerator_getDeviceIndex": get_device_index,
        "_accelerator_exchangeDevice": exchange_device,
        "_accelerator_maybeExchangeDevice": exchange_device,
        "_accelerator_synchronizeDevice": synchronize_device,
    }
    for name, fn in routes.items():
        setattr(torch._C, name, fn)


# -- simulated pinned host memory ------------------------------------------------------
def _target_device(name: str, args: tuple[Any, ...], kwargs: dict[str, Any]) -> torch.device:
    import torch

    if kwargs.get("device") is not None:
        return torch.device(kwargs["device"])
    if name.endswith("_like") and args and isinstance(args[0], torch.Tensor):
        return args[0].device
    return torch.get_default_device()


def _record_pinned(tensor: torch.Tensor, backend: str) -> None:
    """Note the tensor's whole storage as pinned until that storage is freed."""
    storage = tensor.untyped_storage()
    block = PINNED.record(storage.data_ptr(), storage.nbytes(), backend)
    weakref.finalize(storage, PINNED.release, block.serial)


def _pinning_factory(name: str, factory: Callable[..., Any], backend: str) -> Callable[..., Any]:
    @functools.wraps(factory)
    def simulated_pinning_factory(*args: Any, **kwargs: Any) -> Any:
        if not kwargs.get("pin_memory") or _target_device(name, args, kwargs).type != "cpu":
            return factory(*args, **kwargs)  # unpinned, or torch's own error for non-CPU
        del kwargs["pin_memory"]
        tensor = factory(*args, **kwargs)
        _record_pinned(tensor, backend)
        return tensor

    simulated_pinning_factory.__initorch_simulated__ = True  # type: ignore[attr-defined]
    return simulated_pinning_factory


def install_simulated_pinned_allocator(backend: str) -> None:
    """Serve ``pin_memory=True`` from plain CPU memory recorded in ``PINNED`` (see DEVIATION)."""
    import torch

    if "backend" in _pinning_state:
        return
    for name in PINNING_FACTORIES:
        setattr(torch, name, _pinning_factory(name, getattr(torch, name), backend))

    real_is_pinned = torch.Tensor.is_pinned
    real_pin_memory = torch.Tensor.pin_memory

    def is_pinned(self: torch.Tensor, *args: Any, **kwargs: Any) -> bool:
        if self.device.type == "cpu" and PINNED.is_pinned(self.data_ptr()):
            return True
        return bool(real_is_pinned(self, *args, **kwargs))

    def pin_memory(self: torch.Tensor, *args: Any, **kwargs: Any) -> torch.Tensor:
        if self.device.type != "cpu" or self.layout != torch.strided:
            return real_pin_memory(self, *args, **kwargs)
        if is_pinned(self):
            return self
        pinned = torch.empty_like(self, pin_memory=True)
        pinned.copy_(self)
        return pinned

    torch.Tensor.is_pinned = is_pinned  # type: ignore[method-assign, assignment]
    torch.Tensor.pin_memory = pin_memory  # type: ignore[method-assign, assignment]
    _pinning_state["backend"] = backend
    LOG.info("simulated pinned host allocator installed for %s (plain CPU memory)", backend)


# -- simulated collective backend ------------------------------------------------------
def register_simulated_collective(name: str, device: str) -> None:
    """Register ``name`` (hccl / mccl) as a c10d backend that runs real gloo underneath."""
    import torch.distributed as dist

    if name.upper() in dist.Backend._plugins:
        return

    def create_simulated_process_group(
        store: Any, rank: int, world_size: int, timeout: Any
    ) -> dist.ProcessGroupGloo:
        LOG.info("simulated %s process group: rank %d of %d over gloo", name, rank, world_size)
        return dist.ProcessGroupGloo(store, rank, world_size, timeout)

    dist.Backend.register_backend(name, create_simulated_process_group, devices=[device, "cpu"])


def register_simulated_plugin(package: str, backend: str, runtime: SimulatedDeviceRuntime,
                              current_device: Callable[[], int], name: str,
                              collective: str) -> types.ModuleType:
    """Everything a simulated vendor plugin does on import, as the real ones do:
    the ``torch.<backend>`` device module on PrivateUse1, the pinned host
    allocator and the vendor-named collective backend.  Returns the module."""
    device_module = build_device_module(f"{package}.{backend}", backend, runtime,
                                        current_device, name)
    claim_privateuse1(backend, device_module)
    sys.modules[f"{package}.{backend}"] = device_module
    install_simulated_pinned_allocator(backend)
    register_simulated_collective(collective, backend)
    return device_module
