"""The vLLM plugin (entry point ``vllm.general_plugins`` -> ``initorch``).

vLLM calls it in every process it starts: the API server (or the script that builds
``LLM``), the engine core (``v1/engine/core.py:129``) and each worker, where it is loaded
at the start of ``init_worker``, before the worker is built (``v1/worker/
worker_base.py:274-276``).  Without ``INITORCH_VLLM`` it returns at once and vLLM starts
exactly as without initorch.  With ``INITORCH_VLLM=verify``:

- in the first process, it refuses a vLLM whose hook targets do not resolve
  (:mod:`initorch_vllm.release`), before any worker starts;
- in the processes vLLM spawned, it hooks the worker's start-up calls
  (:mod:`initorch_vllm.session`); they take effect in a worker, where they are called.

vLLM lets an exception from a plugin's function propagate (``plugins/__init__.py:
87-90``), so each refusal here is a ``SystemExit`` with its message: the launch stops,
naming the cause.
"""

from __future__ import annotations

import multiprocessing
import os
import time

# Only what deciding "off" needs: a vLLM that did not ask imports nothing more.
from initorch_vllm.options import TIMELINE_ENV, OptionsError, read_options

__all__ = ["load"]


def load() -> None:
    """Entry point of the vLLM plugin."""
    entered = time.time()  # the start-up timeline's end of vLLM's imports
    started = time.perf_counter()
    try:
        options = read_options()
    except OptionsError as error:
        raise SystemExit(str(error)) from None
    if not options.active:
        return
    from initorch.kit import COST

    recording = None
    if os.environ.get(TIMELINE_ENV):  # the launch asked for this process's timeline
        from initorch_vllm.timeline import start_recording

        recording = start_recording(entered)
    if multiprocessing.parent_process() is None:  # the API server: workers come later
        from initorch_vllm.release import refusal

        refused = refusal()
        COST.add("plugin load", time.perf_counter() - started)
        if refused is not None:
            raise SystemExit(refused)
        if recording is not None:
            recording.start(entered)
        return
    from initorch.kit import HookError, apply_hooks
    from initorch_vllm.layout import ENGINE
    from initorch_vllm.session import hooks

    COST.add("plugin load", time.perf_counter() - started)  # "hooks" has the rest
    try:
        apply_hooks(hooks(options) if recording is None
                    else recording.hooks(hooks(options)), ENGINE)
    except HookError as error:
        raise SystemExit(str(error)) from None
    if recording is not None:
        recording.plugin_loaded(entered)
