"""initorch's built-in steps, profiles and failure diagnoses: the ``builtin`` plugin.

Importing this package is cheap: step modules import torch, vendor plugins and
Mooncake only inside the steps, so ``initorch plan`` never loads them.

Besides ``register``, the package exports what a plugin that builds on the built-in
steps reads (``examples/tiny_server`` does): the ``memory_baseline`` step's output
(:class:`MemoryBaseline`, with its pool budget), the device's visibility setting and
the device a rank's tensors live on; and what an engine integration reuses of them
(``initorch-sglang`` does): a free loopback port, the CPU core split of
``bind_cpu_threads`` and its list format, and SGLang's segment-size reading.  Step
modules themselves stay private.
"""

from __future__ import annotations

from importlib.resources import files
from typing import TYPE_CHECKING

from initorch.steps.cpu_binding import plan_shares
from initorch.steps.memory_baseline import MemoryBaseline
from initorch.steps.mooncake_env import segment_mib
from initorch.steps.network import free_port
from initorch.steps.set_device import VISIBLE_DEVICES_ENV, tensor_device
from initorch.steps.topology import format_cpu_list

if TYPE_CHECKING:
    from initorch import Registry

__all__ = ["VISIBLE_DEVICES_ENV", "MemoryBaseline", "format_cpu_list", "free_port",
           "plan_shares", "register", "segment_mib", "tensor_device"]


def register(registry: Registry) -> None:
    """Entry point of the ``builtin`` plugin (``initorch.plugins`` group)."""
    from initorch.steps import (
        collectives,
        cpu_binding,
        distributed,
        host_pool,
        import_backend,
        memory_baseline,
        model_parallel,
        mooncake_master,
        mooncake_pg,
        rendezvous,
        set_device,
        store,
        transfer_engine,
        verify_transfer,
    )
    from initorch.steps.detect import BUILTIN_PROBES
    from initorch.steps.diagnoses import register_diagnoses

    for module in (import_backend, cpu_binding, set_device, rendezvous, distributed,
                   transfer_engine, mooncake_pg, mooncake_master, store, model_parallel,
                   collectives, memory_baseline, host_pool, verify_transfer):
        for definition in module.STEPS:
            registry.steps.add(definition)
    registry.profiles.add_directory(files("initorch.profiles"), plugin="builtin")
    register_diagnoses(registry.diagnoses)
    registry.probes.extend(BUILTIN_PROBES)
