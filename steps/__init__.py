"""initorch's built-in steps, profiles and failure diagnoses: the ``builtin`` plugin.

Importing this package is cheap: step modules import torch, vendor plugins and
Mooncake only inside the steps, so ``initorch plan`` never loads them.
"""

from __future__ import annotations

from importlib.resources import files
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from initorch import Registry

__all__ = ["register"]


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
