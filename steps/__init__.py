"""initorch's built-in steps, profiles and failure diagnoses: the ``builtin`` plugin.

Importing this package is cheap: step modules import torch, vendor plugins and
Mooncake only inside the steps, so ``initorch plan`` never loads them.

Besides ``register``, the package exports what a plugin that builds on the built-in
steps reads (``examples/tiny_server`` does): the ``memory_baseline`` step's output
(:class:`MemoryBaseline`, with its pool budget), the device's visibility setting and
the device a rank's tensors live on.  Step modules themselves stay private.
"""

from __future__ import annotations

from importlib.resources import files
from typing import TYPE_CHECKING

from initorch.steps.device import VISIBLE_DEVICES_ENV, tensor_device
from initorch.steps.memory import MemoryBaseline

if TYPE_CHECKING:
    from initorch import Registry

__all__ = ["VISIBLE_DEVICES_ENV", "MemoryBaseline", "register", "tensor_device"]


def register(registry: Registry) -> None:
    """Entry point of the ``builtin`` plugin (``initorch.plugins`` group)."""
    from initorch.steps import (
        backend,
        collectives,
        cpu_binding,
        device,
        distributed,
        host_pool,
        memory,
        mooncake_master,
        mooncake_pg,
        parallel,
        rendezvous,
        store,
        transfer_engine,
        verify,
    )
    from initorch.steps.detect import BUILTIN_PROBES
    from initorch.steps.diagnoses import BUILTIN_DIAGNOSES

    for module in (backend, cpu_binding, device, rendezvous, distributed, transfer_engine,
                   mooncake_pg, mooncake_master, store, parallel, collectives, memory, host_pool,
                   verify):
        for definition in module.STEPS:
            registry.steps.add(definition)
    registry.profiles.add_directory(files("initorch.profiles"), plugin="builtin")
    registry.diagnoses.extend(BUILTIN_DIAGNOSES)
    registry.probes.extend(BUILTIN_PROBES)
