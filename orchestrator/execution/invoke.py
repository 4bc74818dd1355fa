"""Running one step: device context, timeout, retries, logging, diagnosis.

Every executor runs a step through its run's :class:`StepInvoker`, on whatever
thread it chooses; that is what makes device-context safety hold by
construction.  The first thing that happens on the thread that will execute a
``device_bound`` step — including the helper thread a timeout uses — is
re-applying the rank's device binding.  No code path calls a device-bound action
without it.
"""

from __future__ import annotations

import linecache
import os
import sys
import sysconfig
import threading
import time
import traceback
from collections.abc import Callable
from types import FrameType
from typing import Any, Protocol

from initorch.errors import RunInterrupted, describe_exception, exception_message
from initorch.execution.context import RunState, RunStepContext
from initorch.execution.heartbeat import Heartbeat
from initorch.execution.native_output import release_captures
from initorch.execution.signals import POLL_S, SignalGuard
from initorch.execution.watchdog import Watchdog
from initorch.location import display_path
from initorch.records import record
from initorch.reporting.diagnosis import DiagnosisCatalog, failure_text
from initorch.reporting.report import StepOutcome
from initorch.resolution.plan import PlannedStep


class StepTimeoutError(Exception):
    """A step ran past its timeout; carries where it hangs (``where``, also on the
    message's first line, the one the CLI prints last) and the stack of its thread."""

    def __init__(self, step: str, timeout: float, elapsed: float, stack: str,
                 where: str = "") -> None:
        super().__init__(f"step '{step}' timed out after {elapsed:.1f}s (timeout {timeout:g}s); "
                         f"{where or 'where it is stuck is unknown'}; its stack:\n{stack}")
        self.step = step
        self.timeout = timeout
        self.elapsed = elapsed
        self.stack = stack
        self.where = where


_STDLIB = tuple({sysconfig.get_path("stdlib"), sysconfig.get_path("platstdlib")})


def _in_stdlib(path: str) -> bool:
    """Whether ``path`` is the standard library's (an installed package is not, even
    where site-packages lies below the standard library's folder)."""
    return path.startswith(_STDLIB) and "-packages" not in path


def stuck_at(frame: FrameType | None) -> str:
    """Where a thread is, in one line: the innermost frame of code outside the
    standard library (the step's, or its vendor's), and the library call it waits in,
    if any (``threading.py:355 in wait``); ``""`` without a frame."""
    if frame is None:
        return ""
    inner = frame
    while frame is not None and _in_stdlib(frame.f_code.co_filename):
        frame = frame.f_back
    own = frame or inner
    line = linecache.getline(own.f_code.co_filename, own.f_lineno).strip()
    said = (f"it is stuck at {display_path(own.f_code.co_filename)}:{own.f_lineno} in "
            f"{own.f_code.co_name}")
    said += f" ({line})" if line else ""
    if own is not inner:
        said += (f", waiting in {os.path.basename(inner.f_code.co_filename)}:"
                 f"{inner.f_lineno} in {inner.f_code.co_name}")
    return said


class StepAbortedError(Exception):
    """A step ended by raising what is not an :class:`Exception`: ``sys.exit``,
    ``KeyboardInterrupt`` raised by its own code, a vendor's ``BaseException``.
    That is the step's failure, like any other; ``raised`` (also ``__cause__``) is
    what it raised."""

    def __init__(self, step: str, raised: BaseException) -> None:
        said = describe_exception(raised)  # "it called sys.exit(0)" or "Type: message"
        what = said.removeprefix("it ") if said.startswith("it ") else f"raised {said}"
        super().__init__(f"step '{step}' {what}")
        self.step = step
        self.raised = raised


LateResult = Callable[[PlannedStep, Any], None]
"""Receives the output of a step the run stopped waiting for (timed out or
interrupted) if that step finishes after all, so that it is torn down too."""

GiveUp = Callable[[], BaseException | None]
"""Asked while a step runs on a helper thread: an error means that the step can no
longer succeed (a peer it waits for broke off), and the run stops waiting for it."""


class Supervisor(Protocol):
    """What the invoker asks of the run it works for, besides the run's state (a run's
    is a :class:`~initorch.execution.supervision.RunSupervisor`): asked as each step
    starts, which watchdog guards it and what ends the wait for it; told the output
    of a step that the run stopped waiting for, should it finish after all."""

    def watchdog_for(self, planned: PlannedStep) -> Watchdog | None:
        """The watchdog that ends the process should ``planned`` hang holding the GIL
        (started for a step with a timeout), or ``None``."""

    def give_up_for(self, planned: PlannedStep) -> GiveUp | None:
        """What ends the wait for ``planned`` once a peer broke off (:data:`GiveUp`),
        or ``None``."""

    def finished_late(self, planned: PlannedStep, output: Any) -> None:
        """A :data:`LateResult`: ``planned`` returned ``output`` after the run stopped
        waiting for it (timed out or interrupted), so it is torn down too."""


def call_step(planned: PlannedStep, ctx: RunStepContext, outcome: StepOutcome) -> Any:
    """Run the action on the current thread: after the other ranks arrive if it is a
    barrier, and with the device bound if it is device-bound."""
    current = threading.current_thread()
    outcome.thread, outcome.thread_id = current.name, current.ident
    if planned.step.barrier:
        ctx.state.wait_for_peers(planned.name)
    if planned.step.device_bound:
        ctx.state.bind_device()
    return planned.step.action(ctx)


class _HelperCall:
    """One step call on a daemon helper thread, and what it shares with the thread
    that waits for it: the outcome, and whether the waiter gave up on it."""

    def __init__(self, planned: PlannedStep, ctx: RunStepContext, outcome: StepOutcome,
                 late: LateResult, watchdog: Watchdog | None) -> None:
        self.planned, self.ctx, self.outcome, self.late = planned, ctx, outcome, late
        self.watchdog = watchdog
        self.value: Any = None
        self.error: BaseException | None = None
        self.gave_up: BaseException | None = None  # why the waiter stopped waiting early
        self.finished = self.abandoned = False
        self.lock = threading.Lock()
        self.thread = threading.Thread(target=self._target, name=f"initorch-{planned.name}",
                                       daemon=True)

    def _target(self) -> None:
        try:
            value = call_step(self.planned, self.ctx, self.outcome)
        except BaseException as exc:  # handed to the waiting thread
            with self.lock:
                self.error, self.finished = exc, True
            return
        finally:
            if self.watchdog is not None:
                self.watchdog.step_finished(self.planned.name)
        with self.lock:
            self.value, self.finished = value, True
            abandoned = self.abandoned
        if abandoned:
            self.late(self.planned, value)

    def wait(self, deadline: float | None, give_up: GiveUp | None = None) -> None:
        """Start the call and wait until it returns, ``deadline`` (monotonic) passes or
        ``give_up`` says why it cannot succeed, waking every ``POLL_S`` so that signal
        handlers run."""
        self.thread.start()
        while self.thread.is_alive():
            wait = POLL_S if deadline is None else min(POLL_S, deadline - time.monotonic())
            self.gave_up = give_up() if give_up is not None else None
            if wait <= 0 or self.gave_up is not None:
                return
            self.thread.join(wait)

    def settle(self, waited: bool) -> None:
        """Decide, once, whether the waiter got the result; if not, the step is
        abandoned: its fd 2 capture and its watchdog deadline are released, and a
        result that arrives later goes to ``late``."""
        with self.lock:
            self.abandoned = not (waited and self.finished)
            unclaimed = self.abandoned and self.finished and self.error is None
        if self.abandoned:
            release_captures()  # the run's own last lines must reach the real stderr
            if self.watchdog is not None:
                self.watchdog.step_abandoned(self.planned.name)
        if unclaimed:  # it finished, but the interrupted caller will never record it
            self.late(self.planned, self.value)

    def stuck(self) -> tuple[str, str]:
        """Where the call hangs now (see :func:`stuck_at`) and its thread's stack."""
        frame = sys._current_frames().get(self.thread.ident or -1)
        if frame is None:
            return "", "(stack unavailable)"
        return stuck_at(frame), "".join(traceback.format_stack(frame))


def call_supervised(planned: PlannedStep, ctx: RunStepContext, outcome: StepOutcome,
                    late: LateResult, *, offload: bool = False,
                    watchdog: Watchdog | None = None, give_up: GiveUp | None = None) -> Any:
    """:func:`call_step`, on a daemon helper thread when the step has a timeout or
    when ``offload`` asks for it (the calling thread must stay free to act on
    signals), with the calling thread waiting.

    The waiting thread wakes at least every ``POLL_S`` seconds, so a signal
    handler runs promptly even if the signal landed just before a blocking wait.
    Python cannot kill a thread: a hung step's thread is left behind as a daemon
    (it cannot keep the interpreter alive) and the run fails cleanly; should the
    abandoned step finish after all, its output goes to ``late``.  If the step
    holds the GIL so that no thread can act, the ``watchdog`` (told the step's
    deadline) ends the process.  Whatever the step raises on the helper thread,
    ``sys.exit`` and ``KeyboardInterrupt`` included, is raised here as it is, for
    :func:`as_step_failure` to judge.  With ``give_up`` the step runs on a helper
    thread too, and the wait ends as soon as it returns an error, which is raised
    here (the step is abandoned like a timed-out one).
    """
    timeout = planned.step.timeout
    if watchdog is not None:
        watchdog.step_started(planned.name, timeout)
    if timeout is None and not offload and give_up is None:
        try:
            return call_step(planned, ctx, outcome)
        finally:
            if watchdog is not None:
                watchdog.step_finished(planned.name)
    call = _HelperCall(planned, ctx, outcome, late, watchdog)
    began = time.monotonic()
    waited = False
    try:
        call.wait(None if timeout is None else began + timeout, give_up)
        waited = call.gave_up is None
    finally:  # also when a signal interrupts the start or the wait
        call.settle(waited)
    if call.abandoned and call.gave_up is not None:
        raise call.gave_up
    if call.abandoned:
        where, stack = call.stuck()
        raise StepTimeoutError(planned.name, timeout or 0.0, time.monotonic() - began,
                               stack, where)
    if call.error is not None:  # as_step_failure says what it is
        raise call.error
    return call.value


def as_step_failure(planned: PlannedStep, raised: BaseException, *,
                    signals_handled: bool) -> Exception | None:
    """What ``raised`` (by a step, on whichever thread ran it) is: the step's failure,
    or ``None`` for an interrupt that must unwind the run.

    :class:`RunInterrupted` (the run's own signal handler) always interrupts.  When
    the run does not handle signals, its caller does: ``KeyboardInterrupt`` and
    ``SystemExit`` may come from Ctrl-C or from the host's own signal handlers, and
    a server's ``except KeyboardInterrupt`` must see them, so they interrupt too --
    in both executors and on any thread, so that the same step behaves the same
    whichever executor runs it.  When the run handles signals, a real signal
    arrives as :class:`RunInterrupted`, so these can only come from the step's own
    code: like anything else, they are the step's failure.
    """
    if isinstance(raised, Exception):
        return raised
    if isinstance(raised, RunInterrupted):
        return None
    if isinstance(raised, (KeyboardInterrupt, SystemExit)) and not signals_handled:
        return None
    failure = StepAbortedError(planned.name, raised)
    failure.__cause__ = raised
    return failure


def release_frames(error: BaseException) -> None:
    """Clear the local variables of the finished frames in ``error``'s traceback, and in
    those of its causes and contexts; the traceback itself (files, lines, functions)
    stays, for the report and ``--debug``.

    A failed step's frames hold what the step was using -- the process groups, an
    engine, a pool -- and the error, kept in the report, is in a reference cycle with
    the frame that caught it.  Left alone, those objects outlive their teardown and
    are destroyed whenever the garbage collector gets to the cycle, possibly during
    interpreter shutdown: a gloo worker that then drops the last reference to a
    tensor needs the GIL, Python ends the thread instead (``pthread_exit``), and the
    unwinding through a C++ destructor aborts the process ("terminate called without
    an active exception").  A frame still running (the caller's) is left as it is.
    """
    seen: set[int] = set()
    pending = [error]
    while pending:
        exc = pending.pop()
        if id(exc) in seen:
            continue
        seen.add(id(exc))
        traceback.clear_frames(exc.__traceback__)
        pending += [e for e in (exc.__cause__, exc.__context__) if e is not None]


@record(kw_only=True)
class StepInvoker:
    """Runs one step of a run at a time, on the calling thread: built once per run
    with what stays the same from step to step, then :meth:`invoke` for each step.

    ``clock`` times the outcomes; ``supervisor`` is the run's side of each step
    (:class:`Supervisor`: its watchdog, what ends the wait for it, where a late output
    goes); ``sleep`` waits between retries; ``heartbeat``, if any, logs that a step is
    still running.  ``signals`` is the run's guard: whether it handles SIGINT/SIGTERM
    is read as each step starts.
    """

    state: RunState
    diagnoses: DiagnosisCatalog
    log: Any
    clock: Callable[[], float]
    signals: SignalGuard
    supervisor: Supervisor
    sleep: Callable[[float], None] = time.sleep
    heartbeat: Heartbeat | None = None

    def invoke(self, planned: PlannedStep, *, outcome: StepOutcome) -> Any:
        """Run ``planned`` with retries, filling ``outcome``; returns the step's output.

        Only exceptions the step lists in ``retry_on`` are retried, with exponential
        backoff; a timeout is never retried (the hung attempt is still running), nor
        a ``sys.exit`` or any other :class:`StepAbortedError`.  Interrupts are never
        swallowed (see :func:`as_step_failure`).  When the run handles signals, a
        step called on the main thread runs on a helper thread (see
        :func:`call_supervised`), so that the main thread stays free to act on them.
        """
        step = planned.step
        watchdog = self.supervisor.watchdog_for(planned)
        handled = self.signals.installed
        offload = handled and threading.current_thread() is threading.main_thread()
        give_up = self.supervisor.give_up_for(planned)
        step_log = self.log.bind(step=step.name)
        ctx = RunStepContext(self.state, step.name, step_log)
        outcome.started = self.clock()
        if self.heartbeat is not None:
            self.heartbeat.watch(step.name, step.timeout)
        try:
            for attempt in range(1, step.retries + 2):
                outcome.attempts = attempt
                step_log.info("step_started", attempt=attempt, wave=planned.wave,
                              device_bound=step.device_bound)
                try:
                    output = call_supervised(planned, ctx, outcome,
                                             self.supervisor.finished_late, offload=offload,
                                             watchdog=watchdog, give_up=give_up)
                    self.state.record_output(step.name, output, binds_device=step.binds_device)
                except BaseException as raised:
                    exc = as_step_failure(planned, raised, signals_handled=handled)
                    if exc is None:
                        raise
                    transient = (isinstance(exc, step.retry_on)
                                 and not isinstance(exc, (StepTimeoutError, StepAbortedError)))
                    if transient and attempt <= step.retries:
                        delay = step.retry_backoff * 2 ** (attempt - 1)
                        step_log.warning("step_retry", attempt=attempt, delay_s=delay,
                                         error_type=type(exc).__name__,
                                         error=exception_message(exc))
                        self.sleep(delay)
                        continue
                    outcome.finished = self.clock()
                    outcome.status, outcome.error = "failed", exc
                    outcome.finding = self.diagnoses.match(exc)
                    _stop_watching(self.heartbeat, step.name)  # no beat after the outcome
                    step_log.error(
                        "step_failed", error_type=type(exc).__name__, error=failure_text(exc),
                        vendor_code=outcome.vendor_code, attempts=attempt,
                        duration_s=round(outcome.duration, 6),
                        diagnosis=outcome.finding.summary() if outcome.finding else None,
                    )
                    return None
                outcome.finished = self.clock()
                outcome.status = "succeeded"
                _stop_watching(self.heartbeat, step.name)
                step_log.info("step_succeeded", attempts=attempt,
                              duration_s=round(outcome.duration, 6))
                return output
        finally:  # also when a signal interrupts the step
            _stop_watching(self.heartbeat, step.name)
        raise AssertionError("unreachable: the loop returns on the last attempt")


def _stop_watching(heartbeat: Heartbeat | None, step: str) -> None:
    if heartbeat is not None:
        heartbeat.stop_watching(step)
