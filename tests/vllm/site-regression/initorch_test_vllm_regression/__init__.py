"""A TEST vLLM plugin that injects a start-up regression: the KV connector built inside
``init_device``, before the process group.

On ``PYTHONPATH`` (with its ``.dist-info``, vLLM loads it as a general plugin,
``plugins/__init__.py:77-90``), it wraps each worker's ``CPUWorker.init_device`` so that
the worker builds its KV connector (``ensure_kv_transfer_initialized``, vLLM's own
function) before ``init_device`` creates the process group: the order vLLM 0.32.0 has the
other way round (``v1/engine/core.py:144`` before :157), and the one the ``vllm``
overlay states.  Without a KV transfer config the call does nothing, so stock vLLM would
start; verify mode must stop it, naming both calls.  Only the tests use it.
"""

from __future__ import annotations

import multiprocessing
from typing import Any


def register() -> None:
    """Entry point (``vllm.general_plugins``): wrap the CPU worker's ``init_device`` in
    the processes vLLM spawned (the API server builds no worker)."""
    if multiprocessing.parent_process() is None:
        return
    from vllm.distributed.kv_transfer import kv_transfer_state
    from vllm.v1.worker.cpu_worker import CPUWorker

    original = CPUWorker.init_device

    def init_device_connector_first(self: Any) -> None:
        kv_transfer_state.ensure_kv_transfer_initialized(self.vllm_config, None)
        original(self)

    CPUWorker.init_device = init_device_connector_first  # type: ignore[method-assign]
