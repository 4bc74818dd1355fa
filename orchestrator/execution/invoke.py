"""Running one step: device context, timeout, retries, logging, diagnosis.

Both executors call :func:`invoke_step`, on whatever thread they choose; that
is what makes device-context safety hold by construction.  The first thing
that happens on the thread that will execute a ``device_bound`` step —
including the helper thread a timeout uses — is re-applying the rank's device
binding.  No code path calls a device-bound action without it.
"""

from __future__ import annotations

import sys
import threading
import time
import traceback
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from initorch.execution.context import RunState, StepContext
from initorch.execution.heartbeat import Heartbeat
from initorch.reporting.diagnosis import DiagnosisBook, failure_text
from initorch.reporting.report import StepOutcome
from initorch.resolution.plan import PlannedStep


class StepTimeoutError(Exception):
    """A step ran past its timeout; carries the stack of the thread it hangs in."""

    def __init__(self, step: str, timeout: float, elapsed: float, stack: str) -> None:
        super().__init__(f"step '{step}' timed out after {elapsed:.1f}s (timeout {timeout:g}s); "
                         f"it is stuck in:\n{stack}")
        self.step = step
        self.timeout = timeout
        self.elapsed = elapsed
        self.stack = stack


LateResult = Callable[[PlannedStep, Any], None]
"""Receives the output of a step the run stopped waiting for (timed out or
interrupted) if that step finishes after all, so that it is torn down too."""


def call_step(planned: PlannedStep, ctx: StepContext, outcome: StepOutcome) -> Any:
    """Run the action on the current thread, binding the device first if required."""
    current = threading.current_thread()
    outcome.thread, outcome.thread_id = current.name, current.ident
    if planned.step.device_bound:
        ctx.state.bind_device()
    return planned.step.action(ctx)


@dataclass(slots=True)
class _Helper:
    """What the helper thread and the waiting thread share."""

    value: Any = None
    error: BaseException | None = None
    finished: bool = False
    abandoned: bool = False
    lock: threading.Lock = field(default_factory=threading.Lock)


def call_with_timeout(planned: PlannedStep, ctx: StepContext, outcome: StepOutcome,
                      late: LateResult) -> Any:
    """:func:`call_step`, on a daemon helper thread when the step has a timeout.

    Python cannot kill a thread: a hung step's thread is left behind as a daemon
    (it cannot keep the interpreter alive) and the run fails cleanly.  Should the
    abandoned step finish after all, its output goes to ``late``.
    """
    timeout = planned.step.timeout
    if timeout is None:
        return call_step(planned, ctx, outcome)
    shared = _Helper()

    def target() -> None:
        try:
            value = call_step(planned, ctx, outcome)
        except BaseException as exc:  # handed to the waiting thread
            with shared.lock:
                shared.error, shared.finished = exc, True
            return
        with shared.lock:
            shared.value, shared.finished = value, True
            abandoned = shared.abandoned
        if abandoned:
            late(planned, value)

    helper = threading.Thread(target=target, name=f"initorch-{planned.name}", daemon=True)
    began = time.monotonic()
    waited = False
    try:
        helper.start()
        helper.join(timeout)
        waited = True
    finally:  # also when a signal interrupts the start or the wait
        with shared.lock:
            shared.abandoned = not (waited and shared.finished)
            unclaimed = shared.abandoned and shared.finished and shared.error is None
        if unclaimed:  # it finished, but the interrupted caller will never record it
            late(planned, shared.value)
    if shared.abandoned:
        frame = sys._current_frames().get(helper.ident or -1)
        stack = "".join(traceback.format_stack(frame)) if frame else "(stack unavailable)"
        raise StepTimeoutError(planned.name, timeout, time.monotonic() - began, stack)
    if shared.error is not None:
        raise shared.error
    return shared.value


def invoke_step(planned: PlannedStep, state: RunState, outcome: StepOutcome,
                diagnoses: DiagnosisBook, log: Any, clock: Callable[[], float],
                late: LateResult, sleep: Callable[[float], None] = time.sleep,
                heartbeat: Heartbeat | None = None) -> Any:
    """Run ``planned`` with retries, filling ``outcome``; returns the step's output.

    Only exceptions the step lists in ``retry_on`` are retried, with exponential
    backoff; a timeout is never retried (the hung attempt is still running).
    ``KeyboardInterrupt``/``SystemExit`` are never swallowed.  While the step
    runs (retries included), ``heartbeat`` logs that it is still running.
    """
    step = planned.step
    step_log = log.bind(step=step.name)
    ctx = StepContext(state, step.name, step_log)
    outcome.started = clock()
    if heartbeat is not None:
        heartbeat.watch(step.name, step.timeout)
    try:
        for attempt in range(1, step.retries + 2):
            outcome.attempts = attempt
            step_log.info("step_started", attempt=attempt, wave=planned.wave,
                          device_bound=step.device_bound)
            try:
                output = call_with_timeout(planned, ctx, outcome, late)
                state.record_output(step.name, output, binds_device=step.binds_device)
            except Exception as exc:
                transient = (isinstance(exc, step.retry_on)
                             and not isinstance(exc, StepTimeoutError))
                if transient and attempt <= step.retries:
                    delay = step.retry_backoff * 2 ** (attempt - 1)
                    step_log.warning("step_retry", attempt=attempt, delay_s=delay,
                                     error_type=type(exc).__name__, error=str(exc))
                    sleep(delay)
                    continue
                outcome.finished = clock()
                outcome.status, outcome.error = "failed", exc
                outcome.finding = diagnoses.match(exc)
                _stop_watching(heartbeat, step.name)  # no beat after the outcome
                step_log.error(
                    "step_failed", error_type=type(exc).__name__, error=failure_text(exc),
                    vendor_code=outcome.vendor_code, attempts=attempt,
                    duration_s=round(outcome.duration, 6),
                    diagnosis=outcome.finding.summary() if outcome.finding else None,
                )
                return None
            outcome.finished = clock()
            outcome.status = "succeeded"
            _stop_watching(heartbeat, step.name)
            step_log.info("step_succeeded", attempts=attempt,
                          duration_s=round(outcome.duration, 6))
            return output
    finally:  # also when a signal interrupts the step
        _stop_watching(heartbeat, step.name)
    raise AssertionError("unreachable: the loop returns on the last attempt")


def _stop_watching(heartbeat: Heartbeat | None, step: str) -> None:
    if heartbeat is not None:
        heartbeat.stop_watching(step)
