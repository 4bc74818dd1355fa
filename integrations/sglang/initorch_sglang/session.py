"""One rank's start-up under the integration: from ``Scheduler.__init__`` to its end.

SGLang builds each rank's ``Scheduler`` in ``run_scheduler_process``
(``srt/managers/scheduler.py:6362``), right after it loaded the plugins; everything
initorch models happens inside that constructor (``Scheduler.__init__``:
``init_parallel_runtime`` :536, ``init_model_worker`` :568, ``build_kv_cache`` :575).
So the session begins when the constructor is entered, with SGLang's own server
arguments: it resolves the plan for them, starts recording, and fills the host-pool
allocator; it ends when the constructor returns or raises, writing the rank's report
and trace.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from initorch_sglang.allocator import AllocatorChoice, install_host_allocator
from initorch_sglang.calls import CALLS, hook_target
from initorch_sglang.hooks import HookKind, apply
from initorch_sglang.options import Options
from initorch_sglang.outputs import build_report, now_iso, rank_path, write_outputs
from initorch_sglang.recorder import Recorder
from initorch_sglang.selection import selection_for

if TYPE_CHECKING:
    from collections.abc import Callable

    from initorch import Plan, RunReport

__all__ = ["Session", "active", "observer_hooks", "scheduler_hook"]

logger = logging.getLogger("initorch_sglang")

SCHEDULER_INIT = "sglang.srt.managers.scheduler.Scheduler.__init__"

class _Current:
    """The session of this process's start-up, while ``Scheduler.__init__`` runs (one
    per process: SGLang builds one Scheduler in each rank)."""

    session: Session | None = None


def active() -> Session | None:
    """The session of this process's start-up, while it runs."""
    return _Current.session


@dataclass(slots=True)
class Session:
    """The plan, the recorder and what was installed, for one rank."""

    options: Options
    plan: Plan
    rank: int
    recorder: Recorder
    started_at: str
    allocator: AllocatorChoice | None = None
    extra: dict[str, Any] = field(default_factory=dict)
    driven: RunReport | None = None
    driven_offset: float = 0.0

    def adopt_drive(self, report: RunReport, offset: float) -> None:
        """Keep drive mode's run report; its times start ``offset`` s into the session."""
        self.driven, self.driven_offset = report, offset
        self.extra["drive"] = report.to_dict()

    @classmethod
    def begin(cls, server_args: Any, options: Options) -> Session:
        from initorch import Registry

        selection = selection_for(server_args, options)
        registry = Registry.with_plugins()
        plan = selection.plan(registry)
        module = str(plan.config()["device.torch_module"])
        recorder = Recorder(plan, stop_on_violation=options.stop_on_violation,
                            device=lambda: _current_device(module))
        session = cls(options, plan, _world_rank(), recorder, now_iso())
        session.extra["selection"] = selection.describe()
        apply({hook_target(call, module): (observer("set_device"), "around")
               for call in CALLS if call.step == "set_device"})
        if plan.config().get("hicache.enabled") and server_args.enable_hierarchical_cache:
            session.allocator = install_host_allocator(
                plan.device.type, str(plan.config()["device.host_allocator"]))
            logger.info("initorch-sglang: %s", session.allocator.describe())
        return session

    def finish(self, error: BaseException | None = None) -> None:
        """Write the report and trace, and say how the start-up went against the plan."""
        from initorch.renderers import run_summary_text

        report = build_report(self.recorder, mode=self.options.mode, rank=self.rank,
                              started_at=self.started_at, driven=self.driven,
                              driven_offset=self.driven_offset)
        table = run_summary_text(report)
        self.extra |= {
            "table": table,
            "mode": self.options.mode,
            "calls": [call.to_dict() for call in self.recorder.calls],
            "violations": [str(violation) for violation in self.recorder.violations],
            "host_allocator": None if self.allocator is None else {
                "device": self.allocator.device_type, "allocator": self.allocator.allocator,
                "installed_by_initorch": self.allocator.installed},
            "error": None if error is None else f"{type(error).__name__}: {error}",
        }
        for warning in write_outputs(report, self.extra,
                                     report_path=rank_path(self.options.report, self.rank),
                                     trace_path=rank_path(self.options.trace, self.rank)):
            logger.warning(warning)
        logger.info("initorch-sglang: the start-up as initorch steps:\n%s", table)
        checked = sum(1 for name in self.plan.order if name in self.recorder.first_calls())
        if self.recorder.violations:
            for violation in self.recorder.violations:
                logger.error("initorch-sglang: order violation: %s", violation)
        elif error is None:
            logger.info("initorch-sglang: %s ok: %d of %d planned steps seen in SGLang's "
                        "order (profiles %s, fingerprint %s)", self.options.mode, checked,
                        len(self.plan.order), " + ".join(self.plan.profiles),
                        self.plan.fingerprint[:12])


def observer(step: str) -> Callable[..., Any]:
    """An ``around`` hook that records each call as a call of ``step``."""

    def observe(original: Callable[..., Any], *args: Any, **kwargs: Any) -> Any:
        session = _Current.session
        if session is None:
            return original(*args, **kwargs)
        with session.recorder.observe(step):
            return original(*args, **kwargs)

    observe.__qualname__ = f"observe_{step}"
    return observe


def observer_hooks() -> dict[str, tuple[Callable[..., Any], HookKind]]:
    """The hooks that record SGLang's calls; ``set_device``'s target depends on the
    device, so it is hooked when the session knows the profile."""
    return {call.target: (observer(call.step), "around") for call in CALLS
            if call.step != "set_device"}


def scheduler_hook(options: Options) -> Callable[..., Any]:
    """The ``around`` hook on ``Scheduler.__init__`` that runs the session."""

    def run_session(original: Callable[..., Any], scheduler: Any, server_args: Any,
                    *args: Any, **kwargs: Any) -> Any:
        session = _Current.session = Session.begin(server_args, options)
        try:
            result = original(scheduler, server_args, *args, **kwargs)
        except BaseException as error:
            session.finish(error)
            raise
        else:
            session.finish()
        finally:
            _Current.session = None
        return result

    return run_session


def _world_rank() -> int:
    """This rank in SGLang's world (``_init_parallel_groups``: tp_size * pp_rank + tp_rank)."""
    from sglang.srt.runtime_context import get_parallel

    parallel = get_parallel()
    return int(parallel.tp_size * parallel.pp_rank + parallel.tp_rank)


def _current_device(module_name: str) -> str | None:
    """The calling thread's current device, as ``type:index`` (``cpu`` for the host)."""
    import importlib

    module = importlib.import_module(module_name)
    kind = module_name.rsplit(".", 1)[-1]
    if kind == "cpu":
        return "cpu"
    try:
        return f"{kind}:{module.current_device()}"
    except Exception:  # no device context yet on this thread: that is the information
        return None

