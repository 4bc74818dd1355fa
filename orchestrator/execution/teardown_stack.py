"""What a run must undo, and undoing one step of it.

A step is pushed as it completes and taken out exactly once, by whichever teardown
undoes it: what a teardown cut short leaves here, the next one finds.  Which step is
undone when (side by side, or in reverse completion order) is
:func:`~initorch.execution.executors.tear_down`'s business; this module undoes one
step at a time, on whatever thread asks: it leaves the job first if the step joined
it, binds the device if the step is device-bound, runs the step's teardown, and
records how it went in the report, whatever it raised (``KeyboardInterrupt`` and
``SystemExit`` included), so that one failing teardown never skips the others.
"""

from __future__ import annotations

import threading
from collections.abc import Callable
from typing import Any

from initorch.errors import exception_message
from initorch.execution.context import RunState, RunStepContext
from initorch.execution.membership import JobMembership
from initorch.reporting.report import RunReport, TeardownOutcome
from initorch.resolution.plan import PlannedStep


class TeardownStack:
    """The completed steps of one run, in completion order, and their undoing;
    thread-safe.

    Once :meth:`close`\\ d (the run's teardown has begun), a step that completes all
    the same is undone at once instead of being pushed.  ``clock`` gives the time
    since the run started, for the report's teardown entries.  The names are a
    dict's keys (kept in insertion order), so taking one out costs the same on a
    plan of 16,000 steps as on one of 10: a list's ``remove`` made a teardown
    quadratic.
    """

    def __init__(self, state: RunState, membership: JobMembership, report: RunReport,
                 log: Any, clock: Callable[[], float]) -> None:
        self._state = state
        self._membership = membership
        self._report = report
        self._log = log
        self._clock = clock
        self._lock = threading.Lock()
        self._names: dict[str, None] = {}
        self._closed = False

    def push(self, name: str) -> None:
        """``name`` completed: keep it for the teardown, or, once that has begun,
        undo it now."""
        with self._lock:
            closed = self._closed
            if not closed:
                self._names[name] = None
        if closed:  # finished after teardown began (a parallel run interrupted)
            self._undo_output(name, self._state.forget(name))

    def close(self) -> bool:
        """The run's teardown begins: ``True`` the first time only."""
        with self._lock:
            first, self._closed = not self._closed, True
            return first

    @property
    def closed(self) -> bool:
        return self._closed

    def names(self) -> list[str]:
        """What is left to undo, in completion order."""
        with self._lock:
            return list(self._names)

    def __bool__(self) -> bool:
        with self._lock:
            return bool(self._names)

    def undo(self, name: str) -> None:
        """Undo the completed step ``name``, unless another teardown took it already."""
        with self._lock:
            if name not in self._names:
                return
            del self._names[name]
        self._undo_output(name, self._state.forget(name))

    def undo_late(self, planned: PlannedStep, output: Any) -> None:
        """A step the run stopped waiting for finished after all: undo it now
        (:data:`~initorch.execution.invoke.LateResult`)."""
        self._log.warning("step_finished_late", step=planned.name)
        self._undo_output(planned.name, output)

    def _undo_output(self, name: str, output: Any) -> None:
        self._membership.undoing(name)  # before the job's store goes
        planned = self._state.plan.step(name)
        teardown = planned.step.teardown
        if teardown is None:
            return
        log = self._log.bind(step=name)
        log.info("teardown_started")
        current = threading.current_thread()
        entry = TeardownOutcome(name, started=self._clock(), thread=current.name,
                                thread_id=current.ident)
        try:
            if planned.step.device_bound and self._state.has_binding:
                self._state.bind_device()
            teardown(RunStepContext(self._state, name, log), output)
        except BaseException as exc:  # sys.exit or ^C in one teardown never skips the others
            entry.finished = self._clock()
            message = exception_message(exc)
            entry.status, entry.error = "failed", f"{type(exc).__name__}: {message}"
            log.error("teardown_failed", error_type=type(exc).__name__, error=message)
        else:
            entry.finished = self._clock()
            log.info("teardown_succeeded", duration_s=round(entry.duration, 6))
        self._report.teardown.append(entry)
