"""A run: one execution of a plan, torn down exactly once.

>>> with Run(plan) as run:            # runs the plan; raises StepFailedError on failure
...     serve(run.output("init_shared_mooncake_transfer_engine"))
...                                   # leaving the block tears everything down

Teardown runs the teardowns of completed steps in reverse completion order
when the run fails, when the context manager exits, on SIGINT/SIGTERM (with
``handle_signals``) and, optionally, at interpreter exit.  A failing teardown
is logged and the others still run.  A step's failure skips everything that
hard-depends on it (``requires``, or the device binding), reported once as
"upstream failed" with the root cause; ``wants`` and ordering-only dependents
still run.
"""

from __future__ import annotations

import atexit
import datetime
import os
import threading
import time
from collections.abc import Callable, Mapping
from types import MappingProxyType, TracebackType
from typing import Any

from initorch.errors import StepFailedError
from initorch.execution.context import RankInfo, RunState, StepContext
from initorch.execution.environment import AppliedEnvironment, apply_environment
from initorch.execution.executors import DryRunExecutor, Executor, make_executor
from initorch.execution.heartbeat import DEFAULT_INTERVAL_S, Heartbeat
from initorch.execution.invoke import invoke_step
from initorch.execution.signals import SignalGuard
from initorch.plugins import Registry
from initorch.reporting.diagnosis import DiagnosisBook
from initorch.reporting.logs import get_logger
from initorch.reporting.report import RunReport, StepOutcome, TeardownOutcome
from initorch.resolution.plan import Plan, PlannedStep

HARD_EDGE_KINDS = frozenset({"requires", "device"})


class Run:
    """Executes a plan and owns the resources its steps produced.

    ``heartbeat`` is the interval in seconds at which a step that is still
    running logs ``step_still_running`` (``None``: never).
    """

    def __init__(
        self,
        plan: Plan,
        *,
        executor: str | Executor = "sequential",
        workers: int | None = None,
        diagnoses: DiagnosisBook | None = None,
        rank: RankInfo | None = None,
        handle_signals: bool = False,
        teardown_at_exit: bool = False,
        heartbeat: float | None = DEFAULT_INTERVAL_S,
        clock: Callable[[], float] = time.perf_counter,
        sleep: Callable[[float], None] = time.sleep,
    ) -> None:
        self._plan = plan
        self.executor = make_executor(executor, workers) if isinstance(executor, str) \
            else executor
        self.diagnoses = diagnoses if diagnoses is not None \
            else Registry.with_plugins().diagnoses
        self.state = RunState(plan, rank or RankInfo.from_env())
        self.log = get_logger(profile="+".join(plan.profiles), rank=self.state.rank.rank)
        self._handle_signals = handle_signals
        self._teardown_at_exit = teardown_at_exit
        self._clock, self._sleep = clock, sleep
        self._t0 = 0.0
        self._lock = threading.Lock()
        self._teardown_lock = threading.Lock()  # a second caller waits for the first
        self._completed: list[str] = []
        self._environment: AppliedEnvironment | None = None
        self._started = self._closing = self._torn_down = False
        self._signals = SignalGuard(self.log)
        self._heartbeat = Heartbeat(heartbeat, self.log) if heartbeat is not None else None
        outcomes = {name: StepOutcome(name) for name in plan.order}
        for skipped in plan.skipped:
            outcomes[skipped.name] = StepOutcome(skipped.name, "skipped", reason=skipped.reason)
        self.report = RunReport(plan, self.executor.name, self.state.rank.rank, outcomes,
                                started_at="")

    # -- lifecycle -----------------------------------------------------------------

    @property
    def plan(self) -> Plan:
        return self._plan

    def start(self) -> RunReport:
        """Run every step; on failure tear down before returning the report."""
        if self._started or self._torn_down:
            raise RuntimeError("a Run is single-use; create a new one")
        self._started = True
        try:
            if self._handle_signals:
                self._signals.install()
            if self._teardown_at_exit:
                atexit.register(self.teardown)
            self.report.started_at = datetime.datetime.now(datetime.timezone.utc).isoformat()
            self._t0 = self._clock()
            self.log.info("run_started", executor=self.executor.name,
                          steps=len(self._plan.steps), skipped=len(self._plan.skipped),
                          fingerprint=self._plan.fingerprint,
                          working_directory=os.getcwd())  # what ./paths are relative to
            self._apply_environment()
            for skipped in self._plan.skipped:
                self.log.info("step_skipped", step=skipped.name, reason=skipped.reason)
            self.executor.execute(self)
            self._stop_heartbeat()
            if self.report.ok and self.state.has_binding:
                self.state.bind_device()  # leave the caller's thread on this rank's device
        except BaseException as stop:
            self._stop_heartbeat()
            self.report.interrupted = str(stop) or type(stop).__name__
            if self._t0:
                self.report.wall_time = self._clock() - self._t0
            for outcome in self.report.outcomes.values():
                if outcome.status == "pending" and outcome.started is not None:
                    outcome.status = "interrupted"
            self.teardown()
            raise
        self.report.wall_time = self._clock() - self._t0
        failed = [o.name for o in self.report.failed]
        self.log.info("run_finished", ok=not failed, failed=failed,
                      wall_time_s=round(self.report.wall_time, 6))
        if failed:
            self.teardown()
        return self.report

    def teardown(self) -> None:
        """Undo completed steps in reverse completion order; safe to call many times
        and from any thread (a concurrent caller returns once teardown is done)."""
        with self._teardown_lock:
            with self._lock:
                if self._torn_down:
                    return
                self._torn_down = self._closing = True
                order = list(reversed(self._completed))
            self._signals.quiet()
            try:
                for name in order:
                    self._teardown_output(name, self.state.forget(name))
            finally:
                if self._environment is not None:
                    undone = self._environment.restore()
                    if undone:
                        self.log.info("env_restored", unset=undone)
                self._signals.release()
                if self._teardown_at_exit:
                    atexit.unregister(self.teardown)

    def output(self, step: str) -> Any:
        """The output of a completed step (e.g. the transfer engine)."""
        return self.state.output(step)

    @property
    def outputs(self) -> Mapping[str, Any]:
        """Every completed step's output by step name, in completion order (read-only;
        empty once torn down)."""
        return MappingProxyType(self.state.outputs())

    def __enter__(self) -> Run:
        report = self.start()
        if not report.ok:
            raise failure_error(report)
        return self

    def __exit__(self, exc_type: type[BaseException] | None, exc: BaseException | None,
                 tb: TracebackType | None) -> None:
        self.teardown()

    # -- the RunDriver interface used by executors -----------------------------------

    def blocked_by(self, planned: PlannedStep) -> str | None:
        for name in self._plan.graph.predecessors(planned.name, HARD_EDGE_KINDS):
            outcome = self.report.outcomes[name]
            if outcome.status == "failed":
                return name
            if outcome.root_cause is not None:
                return outcome.root_cause
        return None

    def skip(self, planned: PlannedStep, root_cause: str) -> None:
        outcome = self.report.outcomes[planned.name]
        outcome.status, outcome.reason = "skipped", f"upstream failed: {root_cause}"
        outcome.root_cause = root_cause
        self.log.info("step_skipped", step=planned.name, reason=outcome.reason,
                      root_cause=root_cause)

    def run_step(self, planned: PlannedStep) -> None:
        outcome = self.report.outcomes[planned.name]
        if self._closing:  # torn down from another thread while the walk went on
            outcome.status, outcome.reason = "skipped", "the run was torn down"
            return
        invoke_step(planned, self.state, outcome, self.diagnoses, self.log,
                    self._elapsed, self._late_result, self._sleep, self._heartbeat)
        if outcome.status != "succeeded":
            return
        with self._lock:
            late = self._closing
            if not late:
                self._completed.append(planned.name)
        if late:  # finished after teardown began (parallel run interrupted)
            self._teardown_output(planned.name, self.state.forget(planned.name))

    def would_run(self, planned: PlannedStep) -> None:
        outcome = self.report.outcomes[planned.name]
        outcome.status = "would_run"
        self.log.info("step_would_run", step=planned.name, wave=planned.wave,
                      device_bound=planned.step.device_bound, timeout=planned.step.timeout)

    # -- internals -------------------------------------------------------------------

    def _apply_environment(self) -> None:
        """Set the plan's ``env:`` variables the process lacks (the process wins);
        a dry run changes nothing."""
        if isinstance(self.executor, DryRunExecutor):
            return
        self._environment = apply_environment(self._plan.env)
        self.report.environment = [o.to_dict() for o in self._environment.outcomes]
        for outcome in self._environment.outcomes:
            if outcome.source == "process" and outcome.value != outcome.profile_value:
                self.log.warning("env_kept", name=outcome.name, value=outcome.value,
                                 profile_value=outcome.profile_value,
                                 why="the process environment wins over profiles")
        if self._environment.outcomes:
            self.log.info("env_applied", set=self._environment.set_by_run,
                          kept=[o.name for o in self._environment.outcomes
                                if o.source == "process"])

    def _stop_heartbeat(self) -> None:
        if self._heartbeat is not None:
            self._heartbeat.stop()

    def _elapsed(self) -> float:
        return self._clock() - self._t0

    def _late_result(self, planned: PlannedStep, output: Any) -> None:
        """A step the run stopped waiting for finished after all: undo it now."""
        self.log.warning("step_finished_late", step=planned.name)
        self._teardown_output(planned.name, output)

    def _teardown_output(self, name: str, output: Any) -> None:
        planned = self._plan.step(name)
        teardown = planned.step.teardown
        if teardown is None:
            return
        log = self.log.bind(step=name)
        log.info("teardown_started")
        current = threading.current_thread()
        entry = TeardownOutcome(name, started=self._elapsed(), thread=current.name,
                                thread_id=current.ident)
        try:
            if planned.step.device_bound and self.state.has_binding:
                self.state.bind_device()
            teardown(StepContext(self.state, name, log), output)
        except Exception as exc:
            entry.finished = self._elapsed()
            entry.status, entry.error = "failed", f"{type(exc).__name__}: {exc}"
            log.error("teardown_failed", error_type=type(exc).__name__, error=str(exc))
        else:
            entry.finished = self._elapsed()
            log.info("teardown_succeeded", duration_s=round(entry.duration, 6))
        self.report.teardown.append(entry)


def failure_error(report: RunReport) -> StepFailedError:
    """The error a failed run raises: names the first failed step and its diagnosis,
    and keeps the step's own exception as ``__cause__`` (tracebacks show both)."""
    first = report.failed[0]
    error = first.error
    text = f"step '{first.name}' failed: {type(error).__name__}: {error}"
    if first.finding is not None:
        text += f"\n{first.finding.summary()}"
    failure = StepFailedError(first.name, text, report)
    failure.__cause__ = error
    return failure
