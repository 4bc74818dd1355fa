"""The whole start-up of a vLLM launch, every process, from process start to ready.

With ``INITORCH_VLLM_TIMELINE=DIR`` beside ``INITORCH_VLLM=verify``, every process that
loads the plugin records its start-up with the kit's
:class:`~initorch.kit.timeline.ProcessRecorder` and writes it as ``DIR/process-<pid>.json``
(atomically, redacted); ``initorch vllm timeline DIR`` joins them
(:func:`~initorch.kit.timeline.read_launch`).  vLLM 0.32.0 loads the general plugins in
(``plugins/__init__.py``, once per process):

- the API server, while it builds its argument parser (``engine/arg_utils.py:3202``,
  ``AsyncEngineArgs.add_cli_args``);
- the engine core (``v1/engine/core.py:129``, ``EngineCore.__init__``);
- each worker (``v1/worker/worker_base.py:276``, ``init_worker``).

Each process's phases: the interpreter's start and vLLM's imports (from ``/proc`` to the
plugin's load), the plugin's load, then calls of vLLM's own functions, named after them
with their file:line (:data:`PHASES`).  In a worker, the calls verify mode already
observes (``init_device``, the distributed environment, ``load_model``,
``determine_available_memory``, the KV cache, ``compile_or_warm_up_model``) are taken from
its recorder, not recorded twice.  The API server adds the processes below it that load
no plugin, seen from ``/proc`` ("not measured" past their start), and the ready moment:
when the server first answered ``GET /health`` with 200
(``entrypoints/serve/instrumentator/health.py:22``).

Files are written when a process's start-up is over: a worker's when its warm-up
returns, the engine core's when its busy loop starts, the API server's when its engine
client is built and again at the first 200 of the probe.
"""

from __future__ import annotations

import logging
import multiprocessing
import os
import sys
import time
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

from initorch.kit import (
    ProcessRecorder,
    ProcessRecording,
    caller_outside,
    code_source,
    watch_first_answer,
)
from initorch_vllm.layout import ENGINE, LAYOUTS, LOGGER, SESSION_END, SESSION_START
from initorch_vllm.options import TIMELINE_ENV

if TYPE_CHECKING:
    from initorch.kit import Hook, RankSession

__all__ = ["HEALTH_PATH", "PHASES", "TIMELINE_ENV", "LaunchRecording", "start_recording"]


HEALTH_PATH = "/health"
"""vLLM's readiness probe: 200 once the engine client answers ``check_health``
(``entrypoints/serve/instrumentator/health.py:22-33``)."""
_HEALTH = "vllm.entrypoints.serve.instrumentator.health"
_BUILD_APP = "vllm.entrypoints.launchers.api_server.entry.build_app"
_BUSY_LOOP = "vllm.v1.engine.core.EngineCoreProc.run_busy_loop"
_CLIENT = "vllm.v1.engine.async_llm.AsyncLLM.__init__"

ROLES = {"v1/engine/core.py": "engine core", "v1/worker/worker_base.py": "worker"}
"""The process a vLLM file loads the plugins in (``v1/engine/core.py:129``,
``v1/worker/worker_base.py:276``); the API server is the process with no
multiprocessing parent."""

PHASES: dict[str, tuple[str, ...]] = {
    # The API server: entrypoints/launchers/api_server/entry.py:209 main -> run_server ->
    # build_async_engine_client (:36): the config (engine/arg_utils.py:2205), AsyncLLM
    # (v1/engine/async_llm.py:87: starts the engine core and waits for its handshake),
    # then build_and_serve (:116): build_app (:137, launchers/app.py:19), uvicorn.
    "api server": ("vllm.engine.arg_utils.EngineArgs.create_engine_config", _CLIENT,
                   _BUILD_APP),
    # The engine core: EngineCore.__init__ (v1/engine/core.py:118) builds its executor
    # (:144; the workers start in _init_executor: multiproc_executor.py:118 spawns them,
    # uniproc_executor.py:52 builds one in this process), sizes and builds the KV cache
    # (_initialize_kv_caches :157 -> :261), then EngineCoreProc serves from run_busy_loop
    # (:1547), whose start is the engine core's ready moment.
    "engine core": ("vllm.v1.executor.multiproc_executor.MultiprocExecutor._init_executor",
                    "vllm.v1.executor.uniproc_executor.UniProcExecutor._init_executor",
                    "vllm.v1.engine.core.EngineCore._initialize_kv_caches"),
}
"""The vLLM functions whose calls are phases, by process (0.32.0's lines); a worker's are
verify's observed calls (:mod:`initorch_vllm.layout`)."""

_LAST_CALLS = tuple(call.target for layout in LAYOUTS for call in layout.calls
                    if call.step == SESSION_END)
"""Each worker class's warm-up: when it returns, the worker's start-up is over."""


def start_recording(entered: float) -> LaunchRecording | None:
    """This process's recording, if the launch asked for one (``None`` otherwise):
    begun at ``entered``, the moment the plugin's load began, which also ends the
    interpreter's start and vLLM's imports."""
    directory = os.environ.get(TIMELINE_ENV)
    if not directory:
        return None
    function, where = caller_outside("/initorch_vllm/", "/vllm/plugins/")
    role = "api server" if multiprocessing.parent_process() is None else next(
        (role for file, role in ROLES.items() if where and f"/vllm/{file}:" in where),
        "process")
    recording = LaunchRecording(directory, role, ProcessRecorder())
    with recording.recorder.accounted():
        recording.recorder.interpreter_and_imports(
            entered, f"{where} ({function}: load_general_plugins)" if where else None)
    return recording


class LaunchRecording(ProcessRecording):
    """One vLLM process's recording (the kit's :class:`~initorch.kit.ProcessRecording`):
    the hooks that record its phases, and its name."""

    serving = "api server"
    log = logging.getLogger(LOGGER)

    def start(self, entered: float) -> None:
        """In a process where verify hooks nothing (the API server): this process's
        phases hooked, and the plugin's load, begun at ``entered``, recorded; a hook
        target vLLM lacks stops the launch, as verify's do."""
        from initorch.kit import HookError, apply_hooks

        try:
            apply_hooks(self.hooks({}), ENGINE)
        except HookError as error:
            raise SystemExit(str(error)) from None
        self.plugin_loaded(entered)

    def plugin_loaded(self, entered: float) -> None:
        """The plugin's load, from ``entered`` to now."""
        from initorch_vllm import plugin

        self.recorder.record("plugin load", entered, time.time(), kind="process",
                             source=code_source(plugin.load),
                             detail="initorch's vLLM plugin: options, release check, hooks")

    def hooks(self, verify: dict[str, Hook]) -> dict[str, Hook]:
        """``verify``'s hooks with this process's phases added: the API server's calls
        (and the probe watched once the app is built), the engine core's, and in a
        process that builds a worker (the engine core too, with one in-process worker)
        verify's own hooks framed: the session kept from the worker's constructor, the
        file written when the warm-up returns."""
        found = dict(verify)
        with self.recorder.accounted():
            for target in PHASES.get(self.role, ()):
                found[target] = (self.recorder.around(
                    _short(target), then=self.write if target == _CLIENT else None), "around")
            if self.role == "api server":
                found[_BUILD_APP] = (self._watching_the_probe, "around")
            if self.role == "engine core":
                found[_BUSY_LOOP] = (self._serving, "around")
            if SESSION_START in verify:
                found[SESSION_START] = (self._keeping_the_session(verify[SESSION_START][0]),
                                        "around")
            for target in _LAST_CALLS:
                if target in verify:
                    found[target] = (self._written_after(verify[target][0]), "around")
        return found

    def _keeping_the_session(self, hook: Callable[..., Any]) -> Callable[..., Any]:
        """Verify's hook on the worker's constructor, then its session kept (its recorder
        has the worker's calls when the file is written)."""

        def keep(original: Callable[..., Any], *args: Any, **kwargs: Any) -> Any:
            from initorch.kit import active

            try:
                return hook(original, *args, **kwargs)
            finally:
                self.session = self.session or active()

        return keep

    def _written_after(self, hook: Callable[..., Any]) -> Callable[..., Any]:
        """Verify's hook on the worker's warm-up, then the worker is up (or, when it
        raised, written without a ready moment)."""

        def written(original: Callable[..., Any], *args: Any, **kwargs: Any) -> Any:
            try:
                result = hook(original, *args, **kwargs)
            except BaseException:
                self.write()
                raise
            self.write_up()
            return result

        return written

    def _serving(self, original: Callable[..., Any], *args: Any, **kwargs: Any) -> Any:
        """The engine core's busy loop: its start is the engine core's ready moment."""
        self.write_up()
        return original(*args, **kwargs)

    def _watching_the_probe(self, original: Callable[..., Any], *args: Any,
                            **kwargs: Any) -> Any:
        """``build_app``, recorded, then the first 200 of ``/health`` watched in the app it
        built (an ASGI middleware that only watches); an app that cannot be watched is
        one warning line, and vLLM serves on without the ready moment."""
        app = self.recorder.around(_short(_BUILD_APP))(original, *args, **kwargs)
        with self.recorder.accounted():
            try:
                watch_first_answer(app, path=HEALTH_PATH, answered=self._answered)
            except Exception as error:  # reported; vLLM goes on
                self.log.warning("%s: cannot watch %s for the ready moment: %s: %s",
                                 ENGINE.integration, HEALTH_PATH, type(error).__name__, error)
        return app

    def _answered(self, began: float, answered: float) -> None:
        handler = getattr(sys.modules.get(_HEALTH), "health", None)
        self.answered("health (first 200)", began, answered, source=code_source(handler),
                      detail=f"the first GET {HEALTH_PATH} vLLM answered with 200: the "
                             "server is ready")

    def name(self) -> str:
        worker = f"worker, rank {self.session.rank}" if self.session is not None else None
        if self.role == "engine core":
            return "vLLM engine core" + (f" (and its {worker})" if worker else "")
        if worker:
            return f"vLLM {worker}"
        return {"api server": "vLLM API server"}.get(self.role, f"vLLM {self.role}")

    def engine_label(self) -> str:
        vllm = sys.modules.get("vllm")
        return f"vLLM {getattr(vllm, '__version__', '(version unknown)')}"

    def integration(self) -> str:
        return ENGINE.integration

    def step_sources(self, session: RankSession) -> dict[str, str | None]:
        """Each observed step's vLLM function, as ``file:line`` (the hooked target,
        unwrapped), from the call map of the worker's device."""
        import pkgutil

        from initorch_vllm.layout import layout_for

        sources: dict[str, str | None] = {}
        for call in layout_for(session.plan.device.type).calls:
            try:
                sources[call.step] = code_source(pkgutil.resolve_name(call.target))
            except (ImportError, AttributeError, ValueError):
                sources[call.step] = call.target
        return sources


def _short(target: str) -> str:
    """A phase's name: the function's qualified name in its module
    (``EngineCore._initialize_kv_caches``, ``build_app``)."""
    parts = target.split(".")
    for index in range(len(parts)):
        if parts[index][:1].isupper():  # a class: Class.method
            return ".".join(parts[index:])
    return parts[-1]

