"""The HiCache host-pool allocator for devices SGLang's table does not name.

SGLang 0.5.23 picks the host pool's allocator from ``ALLOC_MEMORY_FUNCS``
(``srt/mem_cache/pool_host/common.py:453-459``), a ``defaultdict`` whose default is
``alloc_with_host_register``: ``cudaHostRegister`` through ``torch.cuda.cudart()``.
Every device it does not list (``cpu`` today; ``musa`` before SGLang listed it, the
seed of initorch) takes the CUDA path and fails at start-up ("Found no NVIDIA driver",
or ``'NoneType' object has no attribute 'cudaHostRegister'``).  The integration fills
the entry for the running device from the profile's ``device.host_allocator``, and
says that it did; a device SGLang lists keeps SGLang's own choice.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from initorch.kit import record

__all__ = ["AllocatorChoice", "allocator_table", "install_host_allocator"]

# The profile's allocator names, as SGLang's own functions where SGLang has one.
_SGLANG_FUNCTIONS = {
    "pin_memory": "alloc_with_pin_memory",
    "pin_memory_xpu": "alloc_with_pin_memory_xpu",
    "cuda_host_register": "alloc_with_host_register",
}


def alloc_without_pinning(dims: tuple[int, ...], dtype: Any, device: str, pin_memory: bool,
                          allocator: Any, registration_granularity_bytes: int | None = None,
                          ) -> Any:
    """The ``plain`` allocator, in the signature of SGLang's allocation functions: the
    pool's own tensor allocator (the Mooncake Store's shared memory with the mooncake
    backend), and no pinning, which a host device does not need."""
    if allocator is not None:
        return allocator.allocate(dims, dtype=dtype, device=device)
    import torch

    return torch.empty(dims, dtype=dtype, device=device)


@record
class AllocatorChoice:
    """What the host pool of ``device_type`` uses, and whether initorch put it there."""

    device_type: str
    allocator: str
    installed: bool

    def describe(self) -> str:
        if not self.installed:
            return (f"host pool allocator for {self.device_type}: SGLang's own "
                    f"({self.allocator})")
        return (f"host pool allocator for {self.device_type}: installed the profile's "
                f"{self.allocator} (SGLang's ALLOC_MEMORY_FUNCS has no {self.device_type} "
                "entry and would fall through to cudaHostRegister)")


def allocator_table() -> tuple[Any, Any]:
    """SGLang's allocator table and the module that holds it, where the installed
    release's layout says (``pool_host/common.py`` from 0.5.14, ``memory_pool_host.py``
    before: :data:`initorch_sglang.layouts.model.AllocatorTable`)."""
    import pkgutil

    from initorch_sglang.calls import installed_layout

    candidates = installed_layout().allocator.dotted()
    for dotted in candidates:
        owner, _, name = dotted.rpartition(".")
        try:
            module = pkgutil.resolve_name(owner)
        except (ImportError, AttributeError, ValueError):
            continue
        if hasattr(module, name):
            return getattr(module, name), module
    raise LookupError(f"none of {', '.join(candidates)} is in the installed SGLang")


def install_host_allocator(device_type: str, allocator: str) -> AllocatorChoice:
    """Fill ``ALLOC_MEMORY_FUNCS[device_type]`` with ``allocator`` unless SGLang has
    an entry for it."""
    table, common = allocator_table()
    if device_type in table:  # membership does not call a defaultdict's factory
        return AllocatorChoice(device_type, table[device_type].__name__, installed=False)
    function: Callable[..., Any] = (
        alloc_without_pinning if allocator == "plain"
        else getattr(common, _SGLANG_FUNCTIONS[allocator]))
    table[device_type] = function
    return AllocatorChoice(device_type, allocator, installed=True)
