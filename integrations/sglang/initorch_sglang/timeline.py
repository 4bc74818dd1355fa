"""The whole start-up of an SGLang launch, every process, from process start to ready.

With ``INITORCH_SGLANG_TIMELINE=DIR`` beside ``INITORCH_SGLANG=verify`` (or ``drive``),
every process that loads the plugin records its start-up with the kit's
:class:`~initorch.kit.timeline.ProcessRecorder` and writes it as ``DIR/process-<pid>.json``
(atomically, redacted); ``initorch sglang timeline DIR`` joins them
(:func:`~initorch.kit.timeline.read_launch`).  SGLang 0.5.23 loads the plugins in:

- the launcher, which is also the HTTP server and the tokenizer manager
  (``launch_server.py:79``; ``srt/entrypoints/http_server.py:3125 launch_server``);
- each scheduler rank (``srt/managers/scheduler.py:6323`` in ``run_scheduler_process``);
- the detokenizer (``srt/managers/detokenizer_manager.py:552`` in
  ``run_detokenizer_process``).

Each process's phases: the interpreter's start and SGLang's imports (from ``/proc`` to the
plugin's load), the plugin's load, then calls of SGLang's own functions, named after them
with their file:line (:data:`PHASES`).  In a rank, the calls verify mode already observed
(the modelled steps and the vendor calls below them) are taken from its recorder, not
recorded twice.  The launcher adds the processes below it that load no plugin, seen from
``/proc`` ("not measured" past their start), and the ready moment: when the server first
answered ``GET /health_generate`` with 200 (``http_server.py:722-723``).

Files are written when a process's start-up is over: a rank's when ``Scheduler.__init__``
ends and again after its first batch, the detokenizer's when its manager is built, the
launcher's when ``_wait_and_warmup`` ends and again at the first 200 of the probe.
"""

from __future__ import annotations

import functools
import logging
import os
import sys
import time
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

from initorch.kit import (
    FirstAnswer,
    ProcessRecorder,
    ProcessRecording,
    caller_outside,
    code_source,
)
from initorch_sglang.options import TIMELINE_ENV

if TYPE_CHECKING:
    from initorch.kit import Hook, RankSession

__all__ = ["HEALTH_PATH", "PHASES", "TIMELINE_ENV", "LaunchRecording", "start_recording"]

HEALTH_PATH = "/health_generate"
"""SGLang's readiness probe: 200 once a one-token generation went through every process
(``srt/entrypoints/http_server.py:722-790 health_generate``)."""
_HTTP_SERVER = "sglang.srt.entrypoints.http_server"

ROLES = {"run_scheduler_process": "scheduler", "run_detokenizer_process": "detokenizer"}
"""The process an SGLang function loads the plugins in, by its name
(``managers/scheduler.py:6323``, ``managers/detokenizer_manager.py:552``); the launcher
is the process with no multiprocessing parent."""

PHASES: dict[str, tuple[str, ...]] = {
    # The launcher: http_server.py:3125 launch_server -> Engine._launch_subprocesses
    # (entrypoints/engine.py:1129: the ranks and the detokenizer spawned, the tokenizer
    # manager built at :1339, the ranks awaited at :1350 -> :2013), then
    # _setup_and_run_http_server (http_server.py:2841: uvicorn), whose lifespan starts
    # _wait_and_warmup (:451 -> :2572: /model_info polled, a warm-up request).
    # Engine's classmethods are not hooked: an ``around`` wrapper would unbind them.
    "launcher": (f"{_HTTP_SERVER}.launch_server",
                 "sglang.srt.managers.tokenizer_manager.TokenizerManager.__init__",
                 "sglang.srt.entrypoints.engine._wait_for_scheduler_ready",
                 f"{_HTTP_SERVER}._setup_and_run_http_server",
                 f"{_HTTP_SERVER}._wait_and_warmup"),
    # A rank: run_scheduler_process (managers/scheduler.py:6310) -> publish,
    # configure_scheduler_process (:6257), Scheduler(...) (:6362; its __init__ at :465 is
    # framed by verify's hook) -> init_model_worker (:568 -> :1128: weights, KV pools,
    # attention backends :1113, graph capture :1122), build_kv_cache (:575; HiCache's
    # host pool and storage backend: mem_cache/kv_cache_builder.py).
    "scheduler": ("sglang.srt.managers.scheduler.configure_scheduler_process",
                  "sglang.srt.managers.scheduler.Scheduler.init_model_worker",
                  "sglang.srt.managers.scheduler.Scheduler.init_all_attention_backends",
                  "sglang.srt.managers.scheduler.Scheduler.init_all_cuda_graphs",
                  "sglang.srt.mem_cache.kv_cache_builder.build_kv_cache"),
    # The detokenizer: run_detokenizer_process (managers/detokenizer_manager.py:545) ->
    # DetokenizerManager(...) (:559; __init__ at :107), then its event loop.
    "detokenizer": ("sglang.srt.managers.detokenizer_manager.DetokenizerManager.__init__",),
}
"""The SGLang functions whose calls are phases, by process (0.5.23's lines)."""


def start_recording(entered: float) -> LaunchRecording | None:
    """This process's recording, if the launch asked for one (``None`` otherwise):
    begun at ``entered``, the moment the plugin's load began, which also ends the
    interpreter's start and SGLang's imports."""
    directory = os.environ.get(TIMELINE_ENV)
    if not directory:
        return None
    import multiprocessing

    function, where = caller_outside("/initorch_sglang/", "/sglang/srt/plugins/")
    role = "launcher" if multiprocessing.parent_process() is None \
        else ROLES.get(function, "process")
    recording = LaunchRecording(directory, role, ProcessRecorder())
    with recording.recorder.accounted():
        recording.recorder.interpreter_and_imports(
            entered, f"{where} ({function}: load_plugins)" if where else None)
    return recording


class LaunchRecording(ProcessRecording):
    """One SGLang process's recording (the kit's :class:`~initorch.kit.ProcessRecording`):
    the hooks that record its phases, and its name."""

    serving = "launcher"
    log = logging.getLogger("initorch_sglang")

    def plugin_loaded(self, entered: float) -> None:
        """The plugin's load, from ``entered`` to now."""
        from initorch_sglang import plugin

        self.recorder.record("plugin load", entered, time.time(), kind="process",
                             source=code_source(plugin.load),
                             detail="initorch's SGLang plugin: options, release check, hooks")

    def hooks(self) -> dict[str, Hook]:
        """The ``around`` hooks that record this process's phases; the launcher's also
        write its file when the warm-up is over, and watch for the first answer of the
        readiness probe."""
        written_after = {f"{_HTTP_SERVER}._wait_and_warmup": self.write,
                         PHASES["detokenizer"][0]: self.write_up}
        hooks: dict[str, Hook] = {
            target: (self.recorder.around(_short(target), then=written_after.get(target)),
                     "around")
            for target in PHASES.get(self.role, ())}
        if self.role == "launcher":
            from initorch.kit import after_import

            after_import(_HTTP_SERVER, self._watch_the_probe)
        return hooks

    def frame_scheduler(self, hook: Callable[..., Any]) -> Callable[..., Any]:
        """Verify's ``around`` hook on ``Scheduler.__init__`` (``hook``), recorded as one
        phase; the session it ran is kept for its calls, and the file is written when
        the constructor ends and again after the rank's first batch."""

        def framed(original: Callable[..., Any], scheduler: Any, *args: Any,
                   **kwargs: Any) -> Any:
            from initorch.kit import active

            @functools.wraps(original)  # verify reads the constructor's signature
            def constructor(*inner: Any, **named: Any) -> Any:
                self.session = active()
                return original(*inner, **named)

            try:
                with self.recorder.phase("Scheduler.__init__", source=code_source(original),
                                         detail="with initorch's plan and session at its "
                                                "start and its report at its end"):
                    result = hook(constructor, scheduler, *args, **kwargs)
            except BaseException:
                self.write()  # the failed constructor, never up
                raise
            self.write_up()
            self._watch_first_batch(scheduler)
            return result

        return framed

    def _watch_first_batch(self, scheduler: Any) -> None:
        """Record the rank's first ``run_batch`` (the launcher's warm-up request:
        ``http_server.py:2360 _execute_server_warmup``), then leave the scheduler as it
        was: the hook is the instance's own attribute, removed at its first call."""
        batch = scheduler.run_batch

        def first_batch(*args: Any, **kwargs: Any) -> Any:
            del scheduler.run_batch  # every later batch goes straight to SGLang's
            try:
                with self.recorder.phase("Scheduler.run_batch (first batch)",
                                         source=code_source(batch),
                                         detail="the first batch this rank ran: the "
                                                "launcher's warm-up request"):
                    return batch(*args, **kwargs)
            finally:
                self.write()

        scheduler.run_batch = first_batch

    def _watch_the_probe(self, module: Any) -> None:
        """Note the first 200 of ``/health_generate`` in SGLang's FastAPI app (an ASGI
        middleware that only watches; added before the app starts)."""
        with self.recorder.accounted():
            module.app.add_middleware(FirstAnswer, path=HEALTH_PATH, answered=self._answered)

    def _answered(self, began: float, answered: float) -> None:
        handler = sys.modules[_HTTP_SERVER].health_generate
        self.answered("health_generate (first 200)", began, answered,
                      source=code_source(handler),
                      detail=f"the first GET {HEALTH_PATH} SGLang answered with 200: the "
                             "server is ready")

    def name(self) -> str:
        if self.role == "scheduler" and self.session is not None:
            return f"SGLang scheduler, rank {self.session.rank}"
        return {"launcher": "SGLang launcher (HTTP server, tokenizer manager)",
                "detokenizer": "SGLang detokenizer"}.get(self.role, f"SGLang {self.role}")


    def engine_label(self) -> str:
        sglang = sys.modules.get("sglang")
        return f"SGLang {getattr(sglang, '__version__', '(version unknown)')}"

    def integration(self) -> str:
        from initorch_sglang.engine import SGLANG

        return SGLANG.integration

    def step_sources(self, session: RankSession) -> dict[str, str | None]:
        """Each observed step's SGLang function, as ``file:line`` (the hooked target,
        unwrapped; ``set_device`` on the profile's device module)."""
        import pkgutil

        from initorch_sglang.calls import installed_layout

        module = str(session.plan.config()["device.torch_module"])
        sources: dict[str, str | None] = {}
        for call in installed_layout().calls:
            try:
                sources[call.step] = code_source(pkgutil.resolve_name(call.hook_target(module)))
            except (ImportError, AttributeError, ValueError):
                sources[call.step] = call.target
        return sources

def _short(target: str) -> str:
    """A phase's name: the function's qualified name in its module
    (``Scheduler.init_model_worker``, ``build_kv_cache``)."""
    rest = target.partition(".srt.")[2]
    parts = rest.split(".")
    for index in range(len(parts)):
        if parts[index][:1].isupper():  # a class: Class.method
            return ".".join(parts[index:])
    return parts[-1]

