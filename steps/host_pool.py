"""The HiCache host KV pool: allocate it, then register it with the Mooncake Store.

Which allocator a device needs is a profile fact (``device.host_allocator``),
a setting declared with its table of allocators, so that a name is checked at plan
time and looked up with no default: the MUSA crash came from a table whose
default was the CUDA path.  A plugin adds an allocator with
``registry.settings.extend_choices("device.host_allocator", {name: allocator})``.
Allocators, as SGLang 0.5.23 has them
(``srt/mem_cache/pool_host/common.py`` ``ALLOC_MEMORY_FUNCS``):

``cuda_host_register``  allocate, then ``cudaHostRegister`` through
                        ``torch.cuda.cudart()`` (CUDA, and ROCm where cudart is HIP).
``pin_memory``          ``torch.empty(..., pin_memory=True)`` (NPU, MUSA).
``pin_memory_xpu``      the same, failing on a null pointer: torch-xpu returns
                        ``data_ptr() == 0`` from a failed pinned allocation instead
                        of raising (``alloc_with_pin_memory_xpu``).
``plain``               ordinary host memory (CPU, MPS).

The pool's size is ``hicache.host_pool_mb``, or, with ``hicache.host_pool_ratio``
above 0, that many times the device KV pool, as SGLang sizes it (0.5.23
``mem_cache/pool_host/base.py``: host tokens = device tokens x
``host_to_device_ratio``; ``--hicache-ratio`` defaults to 2.0 in
``arg_groups/hicache_hook.py``).  The device pool is the output of a step this
one ``requires`` (a profile adds the edge) that has ``device_pool_bytes``.  A
pool larger than this rank's share of host memory is refused with SGLang's own
message, on SGLang's rule (``pool_host/base.py:28, 68-108, 244-256``): each rank
may take ``(available - 10 GiB) // ranks per host``, the reserve being
``hicache.host_memory_reserve_mb``.

Registration follows SGLang's ``MooncakeStore.register_mem_pool_host`` ->
``register_buffer(ptr, size)``; teardown unregisters.
"""

from __future__ import annotations

import os
from collections.abc import Callable
from typing import Any, Protocol, runtime_checkable

from initorch.plugin import StepContext, StepError, capture_native_stderr, record, setting, step
from initorch.steps.kv_layout import DEPRECATED_LAYOUTS, IO_BACKENDS, LAYOUTS, resolve_layout
from initorch.steps.shared_settings import HICACHE_ENABLED, MOONCAKE_ENABLED, STORAGE_BACKEND
from initorch.steps.store import StoreClient
from initorch.steps.topology import host_available_bytes, local_world_size


@runtime_checkable
class DevicePool(Protocol):
    """What a device KV pool step returns for the host pool to be sized from it."""

    @property
    def device_pool_bytes(self) -> int: ...


@record(frozen=False)
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


Memory = tuple[Any, Callable[[], None] | None]
"""A host buffer (a uint8 tensor) and what releases it, if anything must."""
MemorySource = Callable[[int], Memory]


def torch_memory(nbytes: int) -> Memory:
    """Ordinary host memory from torch (SGLang's ``HostTensorAllocator``)."""
    import torch

    return torch.empty(nbytes, dtype=torch.uint8), None


def mooncake_memory(nbytes: int) -> Memory:
    """Mooncake's shared, pre-faulted host memory (hugetlb with ``MC_STORE_USE_HUGEPAGE``),
    as SGLang 0.5.23 takes it with the Mooncake store (``pool_host/common.py:78-88`` ->
    ``MooncakeHostTensorAllocator``, ``mooncake_store.py:38-77``); failures carry
    Mooncake's and SGLang's own words (``shm_helper.cpp``, the null-pointer check)."""
    import ctypes

    import torch

    try:
        from mooncake.store import MooncakeHostMemAllocator
    except ImportError as exc:
        raise StepError(f"cannot import mooncake.store.MooncakeHostMemAllocator: {exc}",
                        hint="install Mooncake 0.3.8.post1 or later, or set "
                             "hicache.mooncake_host_allocator: false") from exc
    allocator = MooncakeHostMemAllocator()
    with capture_native_stderr() as native:
        try:
            ptr = int(allocator.alloc(nbytes))
        except RuntimeError as exc:
            raise StepError(f"MooncakeHostMemAllocator.alloc({nbytes}): {exc}",
                            native_log=native.error_lines()) from exc
    if not ptr:
        raise StepError(f"MooncakeHostMemAllocator.alloc returned a null pointer for "
                        f"{nbytes / 1024**3:.3f} GB ({nbytes} bytes)",
                        native_log=native.error_lines())
    view = (ctypes.c_byte * nbytes).from_address(ptr)
    return torch.frombuffer(view, dtype=torch.uint8, count=nbytes), lambda: allocator.free(ptr)


def _plain(nbytes: int, memory: MemorySource) -> Memory:
    return memory(nbytes)


def _pin_memory(nbytes: int, memory: MemorySource) -> Memory:
    """torch's own pinned allocation: SGLang's pin_memory path takes no storage memory."""
    import torch

    return torch.empty(nbytes, dtype=torch.uint8, pin_memory=True), None


def _pin_memory_xpu(nbytes: int, memory: MemorySource) -> Memory:
    buffer, release = _pin_memory(nbytes, memory)
    if buffer.numel() > 0 and buffer.data_ptr() == 0:  # SGLang's words, for the diagnosis
        raise StepError(f"Pinned host memory allocation of {nbytes / 2**30:.1f} GiB "
                        f"({nbytes} bytes) returned a null pointer",
                        hint="shrink hicache.host_pool_mb or free host memory")
    return buffer, release


def _cuda_host_register(nbytes: int, memory: MemorySource) -> Memory:
    """``memory`` page-locked with ``cudaHostRegister`` (SGLang's
    ``alloc_with_host_register``, ``pool_host/common.py:330-351``)."""
    import torch

    buffer, release = memory(nbytes)
    cudart = torch.cuda.cudart()  # type: ignore[no-untyped-call]
    ptr = buffer.data_ptr()
    try:
        status = cudart.cudaHostRegister(ptr, nbytes, 0)
    except BaseException:
        if release is not None:
            release()
        raise
    code = int(getattr(status, "value", status))
    if code != 0:
        if release is not None:
            release()
        raise StepError(f"cudaHostRegister(ptr={ptr:#x}, nbytes={nbytes}) failed with error {code}",
                        vendor_code=code)

    def unregister() -> None:
        cudart.cudaHostUnregister(ptr)
        if release is not None:
            release()

    return buffer, unregister


Allocator = Callable[[int, MemorySource], Memory]
"""``(bytes, where plain memory comes from) -> the pool's memory``: what a name of
``device.host_allocator`` selects."""

HOST_ALLOCATOR = setting(
    "device.host_allocator", str, required=True,
    choices={"cuda_host_register": _cuda_host_register, "pin_memory": _pin_memory,
             "pin_memory_xpu": _pin_memory_xpu, "plain": _plain},
    description="host KV pool allocator: cuda_host_register (CUDA, ROCm), pin_memory (NPU, "
                "MUSA), pin_memory_xpu (XPU: a null pointer is an error) or plain (CPU, MPS)")
HOST_POOL_MB = setting("hicache.host_pool_mb", int, default=64, minimum=1, maximum=2**24,
                       description="HiCache host KV pool size in MiB")
HOST_POOL_RATIO = setting(
    "hicache.host_pool_ratio", float, default=0, minimum=0, maximum=1024,
    description="above 0: the host pool is this many times the device KV pool of a step "
                "alloc_host_mem_pool requires (SGLang's --hicache-ratio); 0: host_pool_mb")
LAYOUT = setting(
    "hicache.layout", str, default="page_first", choices=LAYOUTS + tuple(DEPRECATED_LAYOUTS),
    description="SGLang's --hicache-mem-layout (page_first_direct on NPU, page_first_kv_split "
                "for MLA models; page_first_kv_spilt is a deprecated alias)")
MOONCAKE_HOST_ALLOCATOR = setting(
    "hicache.mooncake_host_allocator", bool, default=True,
    description="with the Mooncake store, take the cuda_host_register and plain pools from "
                "Mooncake's MooncakeHostMemAllocator (shared memory, pre-faulted), as SGLang "
                "does; false: from torch")
MLA = setting(
    "hicache.mla", bool, default=False,
    description="the model uses multi-head latent attention (SGLang's is_mla_model): its "
                "host pool may stay layer_first with the Mooncake store and kernel_ascend io")
HOST_MEMORY_RESERVE_MB = setting(
    "hicache.host_memory_reserve_mb", int, default=10240, minimum=0, maximum=2**24,
    description="host memory left free when checking the host pool's size (SGLang's "
                "HICACHE_HOST_MEMORY_RESERVE_BYTES, 10 GiB); the rest is shared by the ranks "
                "on this host")
IO_BACKEND = setting(
    "hicache.io_backend", str, default="kernel", choices=IO_BACKENDS,
    description="SGLang's --hicache-io-backend (kernel_ascend on NPU); decides how layer_first "
                "is rewritten for the Mooncake store")


@step(
    "alloc_host_mem_pool",
    description="Allocate the HiCache host KV pool with the device's host allocator",
    requires=["import_backend"],
    device_bound=True,
    when="hicache.enabled",
    settings=(HICACHE_ENABLED, HOST_ALLOCATOR, HOST_POOL_MB, HOST_POOL_RATIO, LAYOUT, IO_BACKEND,
              STORAGE_BACKEND, HOST_MEMORY_RESERVE_MB, MLA, MOONCAKE_HOST_ALLOCATOR,
              MOONCAKE_ENABLED),
)
def alloc_host_mem_pool(ctx: StepContext) -> HostPool:
    name = str(ctx.setting("device.host_allocator"))
    allocator: Allocator = ctx.implementation("device.host_allocator")
    choice = resolve_layout(str(ctx.setting("hicache.layout")),
                            str(ctx.setting("hicache.storage_backend")),
                            str(ctx.setting("hicache.io_backend")),
                            bool(ctx.setting("hicache.mla")))
    for note in choice.notes:
        ctx.log.warning("layout_changed", layout=choice.layout, io_backend=choice.io_backend,
                        note=note)
    nbytes = host_pool_bytes(ctx)
    reserve = int(ctx.setting("hicache.host_memory_reserve_mb")) * 2**20
    ranks = ctx.rank.local_world_size or local_world_size(os.environ) or 1
    budget = host_memory_budget(host_available_bytes(), reserve, ranks)
    if nbytes > budget:
        raise StepError(f"Not enough host memory available. Requesting {nbytes / 1e9:.2f} GB "
                        f"but only have {budget / 1e9:.2f} GB free. Please reduce the size of "
                        "the hierarchical cache.",
                        hint=f"each rank may take (available - {reserve >> 20} MiB) // {ranks} "
                             "ranks on this host, as in SGLang; lower hicache.host_pool_mb or "
                             "hicache.host_pool_ratio (or hicache.host_memory_reserve_mb)")
    # SGLang takes the storage backend's memory only on its host-register path
    # (get_allocator_from_storage, pool_host/common.py:78-88); plain is that path without
    # the registration.
    from_store = bool(ctx.setting("hicache.mooncake_host_allocator")) and \
        ctx.setting("hicache.storage_backend") == "mooncake" and \
        bool(ctx.setting("mooncake.enabled"))
    buffer, release = allocator(nbytes, mooncake_memory if from_store else torch_memory)
    pool = HostPool(buffer, nbytes, choice.layout, name, release)
    ctx.log.info("host_pool_allocated", nbytes=nbytes, allocator=name, ptr=hex(pool.ptr),
                 layout=pool.layout, memory="mooncake" if from_store else "torch")
    return pool


def host_memory_budget(available: int, reserve: int, ranks_per_host: int) -> int:
    """The host memory one rank may give its host pool: SGLang 0.5.23's
    ``host_memory_budget_bytes`` (``pool_host/base.py:103-108``), whose floor division
    can go below zero when less than the reserve is free."""
    return (available - reserve) // ranks_per_host


def host_pool_bytes(ctx: StepContext) -> int:
    """``hicache.host_pool_ratio`` x the required device pool, or ``host_pool_mb``."""
    ratio = float(ctx.setting("hicache.host_pool_ratio"))
    if ratio:
        requires = ctx.declared.requires
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


@record(frozen=False)
class Registration:
    """A pool registered with the store; teardown unregisters it."""

    client: StoreClient
    pool: HostPool


@step(
    "register_mem_pool_host",
    description="Register the host pool with the Mooncake Store (register_buffer)",
    requires=["alloc_host_mem_pool", "init_mooncake_store"],
    reads=["alloc_host_mem_pool", "init_mooncake_store"],
    device_bound=True,
    when="hicache.enabled and mooncake.enabled and hicache.storage_backend == 'mooncake'",
    settings=(HICACHE_ENABLED, MOONCAKE_ENABLED, STORAGE_BACKEND),
)
def register_mem_pool_host(ctx: StepContext) -> Registration:
    pool: HostPool = ctx.output("alloc_host_mem_pool")
    client: StoreClient = ctx.output("init_mooncake_store")
    with capture_native_stderr() as native:
        rc = client.store.register_buffer(pool.ptr, pool.nbytes)
    if rc != 0:  # SGLang's MooncakeBaseStore.register_buffer words it so
        raise StepError(f"Failed to register buffer to Mooncake Store, error code: {rc}",
                        vendor_code=rc, native_log=native.error_lines())
    ctx.log.info("host_pool_registered", ptr=hex(pool.ptr), nbytes=pool.nbytes,
                 layout=pool.layout)
    return Registration(client, pool)


@register_mem_pool_host.teardown
def unregister_mem_pool_host(ctx: StepContext, registration: Registration) -> None:
    rc = registration.client.store.unregister_buffer(registration.pool.ptr)
    if rc != 0:
        raise StepError(f"unregister_buffer returned {rc}")


STEPS = (alloc_host_mem_pool, register_mem_pool_host)
