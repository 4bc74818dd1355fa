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
from dataclasses import dataclass
from typing import Any

from orchestrator.context import RunState, StepContext
from orchestrator.diagnosis import DiagnosisBook, failure_text, vendor_code_of
from orchestrator.plan import PlannedStep
from orchestrator.report import StepOutcome


class StepTimeoutError(Exception):
    """A step ran past its timeout; carries the stack of the thread it hangs in."""

    def __init__(self, step: str, timeout: float, elapsed: float, stack: str) -> None:
        super().__init__(f"step '{step}' timed out after {elapsed:.1f}s (timeout {timeout:g}s); "
                         f"it is stuck in:\n{stack}")
        self.step = step
        self.timeout = timeout
        self.elapsed = elapsed
        self.stack = stack


def call_step(planned: PlannedStep, ctx: StepContext) -> Any:
    """Run the action on the current thread, binding the device first if required."""
    if planned.step.device_bound:
        ctx.state.bind_device()
    return planned.step.action(ctx)


@dataclass(slots=True)
class _Box:
    value: Any = None
    error: BaseException | None = None


def call_with_timeout(planned: PlannedStep, ctx: StepContext) -> Any:
    """:func:`call_step`, on a daemon helper thread when the step has a timeout.

    Python cannot kill a thread; a hung step's thread is left behind as a daemon
    (it cannot keep the interpreter alive) and the run fails cleanly.
    """
    timeout = planned.step.timeout
    if timeout is None:
        return call_step(planned, ctx)
    box = _Box()

    def target() -> None:
        try:
            box.value = call_step(planned, ctx)
        except BaseException as exc:  # handed to the calling thread
            box.error = exc

    helper = threading.Thread(target=target, name=f"initorch-{planned.name}", daemon=True)
    began = time.monotonic()
    helper.start()
    helper.join(timeout)
    if helper.is_alive():
        frame = sys._current_frames().get(helper.ident or -1)
        stack = "".join(traceback.format_stack(frame)) if frame else "(stack unavailable)"
        raise StepTimeoutError(planned.name, timeout, time.monotonic() - began, stack)
    if box.error is not None:
        raise box.error
    return box.value


def invoke_step(planned: PlannedStep, state: RunState, outcome: StepOutcome,
                diagnoses: DiagnosisBook, log: Any, clock: Callable[[], float],
                sleep: Callable[[float], None] = time.sleep) -> Any:
    """Run ``planned`` with retries, filling ``outcome``; returns the step's output.

    Only exceptions the step lists in ``retry_on`` are retried, with exponential
    backoff.  ``KeyboardInterrupt``/``SystemExit`` are never swallowed.
    """
    step = planned.step
    step_log = log.bind(step=step.name)
    ctx = StepContext(state, step.name, step_log)
    current = threading.current_thread()
    outcome.thread, outcome.thread_id = current.name, current.ident
    outcome.started = clock()
    for attempt in range(1, step.retries + 2):
        outcome.attempts = attempt
        step_log.info("step_started", attempt=attempt, wave=planned.wave,
                      device_bound=step.device_bound)
        try:
            output = call_with_timeout(planned, ctx)
            state.record_output(step.name, output, binds_device=step.binds_device)
        except Exception as exc:
            if isinstance(exc, step.retry_on) and attempt <= step.retries:
                delay = step.retry_backoff * 2 ** (attempt - 1)
                step_log.warning("step_retry", attempt=attempt, delay_s=delay,
                                 error_type=type(exc).__name__, error=str(exc))
                sleep(delay)
                continue
            outcome.finished = clock()
            outcome.status, outcome.error = "failed", exc
            outcome.finding = diagnoses.match(exc)
            step_log.error(
                "step_failed", error_type=type(exc).__name__, error=failure_text(exc),
                vendor_code=vendor_code_of(exc), attempts=attempt,
                duration_s=round(outcome.duration, 6),
                diagnosis=outcome.finding.summary() if outcome.finding else None,
            )
            return None
        outcome.finished = clock()
        outcome.status = "succeeded"
        step_log.info("step_succeeded", attempts=attempt, duration_s=round(outcome.duration, 6))
        return output
    raise AssertionError("unreachable: the loop returns on the last attempt")
