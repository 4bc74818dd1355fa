"""The HiCache host KV pool: allocate it, then register it with Mooncake.

Which allocator a device needs is a profile fact (``device.host_allocator``),
looked up here by name with no default: the MUSA crash came from a table whose
default was the CUDA path.  Allocators:

``cuda_host_register``  allocate, then ``cudaHostRegister`` through
                        ``torch.cuda.cudart()`` (CUDA, and ROCm where cudart is HIP).
``pin_memory``          ``torch.empty(..., pin_memory=True)`` (NPU, MUSA, XPU).
``plain``               ordinary host memory (CPU, MPS).

The pool's size is ``hicache.host_pool_mb``, or, with ``hicache.host_pool_ratio``
above 0, that many times the device KV pool, as SGLang sizes it (0.5.23
``mem_cache/pool_host/base.py``: host tokens = device tokens x
``host_to_device_ratio``; ``--hicache-ratio`` defaults to 2.0 in
``arg_groups/hicache_hook.py``).  The device pool is the output of a step this
one ``requires`` (a profile adds the edge) that has ``device_pool_bytes``.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, Protocol, runtime_checkable

from initorch import StepContext, StepError, setting, step
from initorch.steps.topology import host_available_bytes
from initorch.steps.transfer_engine import MOONCAKE_ENABLED, SharedTransferEngine

SUPPORTED_LAYOUTS = ("layer_first", "page_first", "page_first_direct", "page_head",
                     "page_first_kv_split")
# A misspelling that circulates in deployed configs; accepted, with a warning.
LAYOUT_MISSPELLINGS = {"page_first_kv_spilt": "page_first_kv_split"}


@runtime_checkable
class DevicePool(Protocol):
    """What a device KV pool step returns for the host pool to be sized from it."""

    @property
    def device_pool_bytes(self) -> int: ...


@dataclass(slots=True)
class HostPool:
    """A host buffer for the KV cache; ``buffer`` keeps the memory alive."""

    buffer: Any
    nbytes: int
    layout: str
    allocator: str
    release: Callable[[], None] | None = None

    @property
    def ptr(self) -> int:
        return int(self.buffer.data_ptr())


def _plain(nbytes: int) -> tuple[Any, Callable[[], None] | None]:
    import torch

    return torch.empty(nbytes, dtype=torch.uint8), None


def _pin_memory(nbytes: int) -> tuple[Any, Callable[[], None] | None]:
    import torch

    return torch.empty(nbytes, dtype=torch.uint8, pin_memory=True), None


def _cuda_host_register(nbytes: int) -> tuple[Any, Callable[[], None] | None]:
    import torch

    buffer = torch.empty(nbytes, dtype=torch.uint8)
    cudart = torch.cuda.cudart()  # type: ignore[no-untyped-call]
    ptr = buffer.data_ptr()
    status = cudart.cudaHostRegister(ptr, nbytes, 0)
    code = int(getattr(status, "value", status))
    if code != 0:
        raise StepError(f"cudaHostRegister(ptr={ptr:#x}, nbytes={nbytes}) failed with error {code}",
                        vendor_code=code)

    def unregister() -> None:
        cudart.cudaHostUnregister(ptr)

    return buffer, unregister


ALLOCATORS: dict[str, Callable[[int], tuple[Any, Callable[[], None] | None]]] = {
    "cuda_host_register": _cuda_host_register,
    "pin_memory": _pin_memory,
    "plain": _plain,
}

HICACHE_ENABLED = setting("hicache.enabled", bool, default=True,
                          description="allocate (and register) the HiCache host KV pool")
HOST_ALLOCATOR = setting(
    "device.host_allocator", str, required=True, choices=tuple(ALLOCATORS),
    description="host KV pool allocator: cuda_host_register (CUDA, ROCm), pin_memory (NPU, "
                "MUSA, XPU) or plain (CPU, MPS)")
HOST_POOL_MB = setting("hicache.host_pool_mb", int, default=64, minimum=1, maximum=2**24,
                       description="HiCache host KV pool size in MiB")
HOST_POOL_RATIO = setting(
    "hicache.host_pool_ratio", float, default=0, minimum=0, maximum=1024,
    description="above 0: the host pool is this many times the device KV pool of a step "
                "alloc_host_mem_pool requires (SGLang's --hicache-ratio); 0: host_pool_mb")
LAYOUT = setting(
    "hicache.layout", str, default="page_first",
    choices=SUPPORTED_LAYOUTS + tuple(LAYOUT_MISSPELLINGS),
    description="host pool memory layout the storage backend reads (page_first_direct on "
                "NPU, page_first_kv_split for MLA models)")


def storage_layout(layout: str, ctx: StepContext) -> str:
    """The canonical layout name, if the storage backend supports ``layout``."""
    if layout in SUPPORTED_LAYOUTS:
        return layout
    corrected = LAYOUT_MISSPELLINGS.get(layout)
    if corrected is not None:
        ctx.log.warning("layout_misspelt", layout=layout, using=corrected,
                        fix=f"write hicache.layout: {corrected}")
        return corrected
    raise StepError(
        f"host pool layout '{layout}' is not supported by the Mooncake storage backend",
        hint=f"set hicache.layout to one of {', '.join(SUPPORTED_LAYOUTS)}",
    )


@step(
    "alloc_host_mem_pool",
    description="Allocate the HiCache host KV pool with the device's host allocator",
    requires=["import_backend"],
    device_bound=True,
    when="hicache.enabled",
    settings=(HICACHE_ENABLED, HOST_ALLOCATOR, HOST_POOL_MB, HOST_POOL_RATIO, LAYOUT),
)
def alloc_host_mem_pool(ctx: StepContext) -> HostPool:
    name = str(ctx.setting("device.host_allocator"))
    allocator = ALLOCATORS.get(name)
    if allocator is None:
        raise StepError(f"unknown host allocator '{name}' for device '{ctx.device.type}'",
                        hint=f"set device.host_allocator to one of {', '.join(ALLOCATORS)}")
    nbytes = host_pool_bytes(ctx)
    available = host_available_bytes()
    if nbytes > available:
        raise StepError(f"a host pool of {nbytes / 2**30:.2f} GiB does not fit in the "
                        f"{available / 2**30:.2f} GiB of host memory available",
                        hint="lower hicache.host_pool_mb or hicache.host_pool_ratio")
    buffer, release = allocator(nbytes)
    pool = HostPool(buffer, nbytes, str(ctx.setting("hicache.layout")), name, release)
    ctx.log.info("host_pool_allocated", nbytes=nbytes, allocator=name, ptr=hex(pool.ptr))
    return pool


def host_pool_bytes(ctx: StepContext) -> int:
    """``hicache.host_pool_ratio`` x the required device pool, or ``host_pool_mb``."""
    ratio = float(ctx.setting("hicache.host_pool_ratio"))
    if ratio:
        requires = ctx.plan.step(ctx.step).step.requires
        pools = [ctx.output(name) for name in requires
                 if isinstance(ctx.output(name), DevicePool)]
        if not pools:
            raise StepError(
                f"hicache.host_pool_ratio is {ratio:g}, but none of the steps "
                f"{ctx.step} requires ({', '.join(requires)}) provides a device pool",
                hint=f"add your KV pool step to {ctx.step}'s requires in the profile, or "
                     "set hicache.host_pool_ratio: 0")
        return int(pools[0].device_pool_bytes * ratio)
    size_mb = ctx.setting("hicache.host_pool_mb")
    if not isinstance(size_mb, int) or isinstance(size_mb, bool) or size_mb <= 0:
        raise StepError(f"hicache.host_pool_mb must be a positive whole number, got {size_mb!r}",
                        hint="e.g. --set hicache.host_pool_mb=64")
    return size_mb * 2**20


@alloc_host_mem_pool.teardown
def free_host_mem_pool(ctx: StepContext, pool: HostPool) -> None:
    if pool.release is not None:
        pool.release()
    pool.buffer = None


@dataclass(slots=True)
class Registration:
    """A pool registered with an engine; teardown unregisters it."""

    engine: SharedTransferEngine
    pool: HostPool
    layout: str


@step(
    "register_mem_pool_host",
    description="Check the pool layout and register the host pool with the transfer engine",
    requires=["alloc_host_mem_pool", "init_shared_mooncake_transfer_engine"],
    device_bound=True,
    when="hicache.enabled and mooncake.enabled",
    settings=(HICACHE_ENABLED, MOONCAKE_ENABLED),
)
def register_mem_pool_host(ctx: StepContext) -> Registration:
    pool: HostPool = ctx.output("alloc_host_mem_pool")
    engine: SharedTransferEngine = ctx.output("init_shared_mooncake_transfer_engine")
    layout = storage_layout(pool.layout, ctx)
    engine.call("register_memory", pool.ptr, pool.nbytes)
    ctx.log.info("host_pool_registered", ptr=hex(pool.ptr), nbytes=pool.nbytes, layout=layout)
    return Registration(engine, pool, layout)


@register_mem_pool_host.teardown
def unregister_mem_pool_host(ctx: StepContext, registration: Registration) -> None:
    registration.engine.call("unregister_memory", registration.pool.ptr)


STEPS = (alloc_host_mem_pool, register_mem_pool_host)
