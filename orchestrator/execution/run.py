"""A run: one execution of a plan, torn down exactly once.

>>> with Run(plan, diagnoses=registry.diagnoses) as run:   # raises StepFailedError on failure
...     serve(run.output("init_shared_mooncake_transfer_engine"))
...                                   # leaving the block tears everything down

Teardown undoes completed steps when the run fails, when the context manager
exits, on SIGINT/SIGTERM (with ``handle_signals``) and, optionally, at
interpreter exit.  By default side by side (``teardown="side-by-side"``): a
step's teardown starts once every step ordered after it (``requires``,
``after``, ``wants``, ``reads``, the device binding) has been undone, and
independent ones run on threads of their own, as systemd stops units;
``teardown="sequential"`` undoes one step at a time in reverse completion
order on the calling thread.  Either way a device-bound teardown runs with the
device bound on its thread, a failing teardown is logged and the others still
run, whatever it raised (``KeyboardInterrupt`` and ``SystemExit`` included),
and a teardown cut short all the same is finished by the next call of
:meth:`Run.teardown`; the report and the exit code are the same in both
modes.

A run fails fast: once a step has failed, no new step starts (steps already
running finish or time out), and the rest are reported as skipped, "not
started" because of that failure.  A start-up half done is of no use to a
server, and every step started after a failure (a master, a store, a pool
registration) only costs time before it is torn down again.  With
``keep_going=True`` a failure skips only what hard-depends on it
(``requires``, or the device binding), reported once as "upstream failed" with
the root cause; ``wants`` and ordering-only dependents still run.

One run at a time is active in a process, from :meth:`Run.start` until its
teardown ends: runs share the default process group, the environment, fd 2
and the calling thread's device.  A second one is refused with
:class:`~initorch.errors.ActiveRunError` (a dry run touches none of that and
is always allowed).
"""

from __future__ import annotations

import atexit
import datetime
import gc
import os
import threading
import time
import weakref
from collections.abc import Callable, Mapping
from types import MappingProxyType, TracebackType
from typing import Any

from initorch.errors import (
    ActiveRunError,
    StepFailedError,
    exception_message,
)
from initorch.execution.context import RankInfo, RunState
from initorch.execution.environment import AppliedEnvironment, apply_environment
from initorch.execution.executors import (
    TEARDOWN_MODES,
    DryRunExecutor,
    Executor,
    make_executor,
    tear_down,
)
from initorch.execution.heartbeat import DEFAULT_INTERVAL_S, Heartbeat
from initorch.execution.invoke import StepInvoker, release_frames
from initorch.execution.launchers import LaunchArguments, detect_rank
from initorch.execution.membership import JobMembership
from initorch.execution.signals import SignalGuard
from initorch.execution.supervision import RunSupervisor, Stopwatch
from initorch.execution.teardown_stack import TeardownStack
from initorch.reporting.diagnosis import DiagnosisCatalog
from initorch.reporting.logs import get_logger
from initorch.reporting.report import RunReport, StepOutcome
from initorch.reporting.status import StatusFile
from initorch.resolution.plan import Plan, PlannedStep

HARD_EDGE_KINDS = frozenset({"requires", "device"})


class _ActiveRun:
    """The run that holds this process, if it is still alive (a weak reference: a run
    dropped without teardown holds nothing once it is collected)."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._run: weakref.ref[Run] | None = None

    def claim(self, run: Run) -> None:
        """Make ``run`` the process's active run, or raise :class:`ActiveRunError`."""
        with self._lock:
            if self._holder() not in (None, run):
                gc.collect()  # an unreachable run in a reference cycle is not a holder
            holder = self._holder()
            if holder is not None and holder is not run:
                raise ActiveRunError(holder.describe())
            self._run = weakref.ref(run)

    def release(self, run: Run) -> None:
        with self._lock:
            if self._holder() is run:
                self._run = None

    def _holder(self) -> Run | None:
        return self._run() if self._run is not None else None


_ACTIVE = _ActiveRun()


class Run:
    """Executes a plan and owns the resources its steps produced.

    ``diagnoses`` turn a failed step's error into a cause and a remedy: a run is
    handed them (``registry.diagnoses`` of the registry the plan was resolved
    with) instead of finding plugins itself; :func:`initorch.start` does that.
    ``rank`` says where this process stands in the job; without it, ``launch``
    (SGLang-style :class:`~initorch.execution.launchers.LaunchArguments`:
    ``dist_init_addr``, ``nnodes``, ``node_rank``, ...) describes it, with
    torchrun's or SLURM's variables, which it may restate but not contradict
    (:mod:`initorch.execution.launchers`).
    ``keep_going`` runs, after a failure, every step that does not hard-depend on
    it (the default fails fast: nothing new starts).  ``heartbeat`` is the interval
    in seconds at which a step that is still running logs ``step_still_running``
    (``None``: never).  ``teardown`` is one of
    :data:`~initorch.execution.executors.TEARDOWN_MODES` (see the module).  ``status``,
    if given, is kept up to date with the step the run is in and its state
    (:mod:`initorch.reporting.status`; the caller closes it).
    """

    def __init__(
        self,
        plan: Plan,
        *,
        executor: str | Executor = "sequential",
        workers: int | None = None,
        diagnoses: DiagnosisCatalog,
        rank: RankInfo | None = None,
        launch: LaunchArguments | None = None,
        handle_signals: bool = False,
        teardown_at_exit: bool = False,
        keep_going: bool = False,
        heartbeat: float | None = DEFAULT_INTERVAL_S,
        teardown: str = TEARDOWN_MODES[0],
        status: StatusFile | None = None,
        clock: Callable[[], float] = time.perf_counter,
        sleep: Callable[[float], None] = time.sleep,
    ) -> None:
        if teardown not in TEARDOWN_MODES:
            raise ValueError(f"unknown teardown '{teardown}'; choose one of "
                             f"{', '.join(TEARDOWN_MODES)}")
        self._plan = plan
        self.teardown_mode = teardown
        self._status = status
        self.executor = make_executor(executor, workers) if isinstance(executor, str) \
            else executor
        self.diagnoses = diagnoses
        if rank is not None and launch is not None and launch.given:
            raise TypeError("pass rank=RankInfo(...) or launch=LaunchArguments(...), "
                            "not both")
        rank = rank or detect_rank(os.environ, launch)
        self.log = get_logger(profile="+".join(plan.profiles), rank=rank.rank)
        outcomes = {name: StepOutcome(name) for name in plan.order}
        for skipped in plan.skipped:
            outcomes[skipped.name] = StepOutcome(skipped.name, "skipped", reason=skipped.reason)
        self.report = RunReport(plan, self.executor.name, rank.rank, outcomes,
                                started_at="", teardown_mode=teardown)
        # The owned helpers: the job's membership (the peers), what to undo, and what
        # watches each step; the run itself keeps the lifecycle.
        self._membership = JobMembership(plan, rank, self.log, self.report)
        self.state = RunState(plan, rank, job=self._membership)
        self._stopwatch = Stopwatch(clock)
        self._teardowns = TeardownStack(self.state, self._membership, self.report, self.log,
                                        self._stopwatch.elapsed)
        self._supervisor = RunSupervisor({"profile": "+".join(plan.profiles), "rank": rank.rank},
                                         self._membership, self._teardowns)
        self._handle_signals = handle_signals
        self._keep_going = keep_going
        self._first_failure: str | None = None  # the step that failed first, if any
        self._blocked: dict[str, str] = {}  # skipped step -> the failed step it hard-needs
        self._teardown_at_exit = teardown_at_exit
        self._clock = clock
        self._lock = threading.Lock()
        self._teardown_lock = threading.Lock()  # a second caller waits for the first
        self._environment: AppliedEnvironment | None = None
        self._started = False
        self._signals = SignalGuard(self.log)
        self._heartbeat = Heartbeat(heartbeat, self.log) if heartbeat is not None else None
        self._invoker = StepInvoker(state=self.state, diagnoses=self.diagnoses, log=self.log,
                                    clock=self._stopwatch.elapsed, signals=self._signals,
                                    supervisor=self._supervisor, sleep=sleep,
                                    heartbeat=self._heartbeat)

    # -- lifecycle -----------------------------------------------------------------

    @property
    def plan(self) -> Plan:
        return self._plan

    def start(self) -> RunReport:
        """Run every step; on failure tear down before returning the report."""
        if self._started or self._teardowns.closed:
            raise RuntimeError("a Run is single-use; create a new one")
        if not isinstance(self.executor, DryRunExecutor):
            _ACTIVE.claim(self)
        self._started = True
        try:
            if self._handle_signals and threading.current_thread() is threading.main_thread():
                self._signals.install(self._supervisor.watchdog())
            if self._teardown_at_exit:
                atexit.register(self.teardown)
            now = datetime.datetime.now(datetime.timezone.utc)
            self.report.started_at, self.report.started_epoch = now.isoformat(), now.timestamp()
            self._stopwatch.start()
            rank = self.state.rank
            self.log.info("run_started", executor=self.executor.name,
                          steps=len(self._plan.steps), skipped=len(self._plan.skipped),
                          fingerprint=self._plan.fingerprint,
                          working_directory=os.getcwd(),  # what ./paths are relative to
                          world_size=rank.world_size, local_rank=rank.local_rank,
                          launcher=rank.launcher)
            self._apply_environment()
            for skipped in self._plan.skipped:
                self.log.info("step_skipped", step=skipped.name, reason=skipped.reason)
            self.executor.execute(self)
            if self._status is not None:
                self._status.state("ready" if self.report.ok else "failed")
            self._stop_heartbeat()
            self._membership.note_lost()
            if self.report.ok and self.state.has_binding:
                self.state.bind_device()  # leave the caller's thread on this rank's device
        except BaseException as stop:
            self._stop_heartbeat()
            self._record_interruption(str(stop) or type(stop).__name__)
            self.teardown()
            raise
        self.report.wall_time = self._stopwatch.elapsed()
        failed = [o.name for o in self.report.failed]
        self.log.info("run_finished", ok=not failed, failed=failed,
                      wall_time_s=round(self.report.wall_time, 6))
        if failed:
            self.teardown()
        return self.report

    def _record_interruption(self, what: str) -> None:
        """What an interrupted run knows: a step it was in is ``interrupted`` after the
        time it really ran (the step a user needs after Ctrl-C on a hung start-up, in
        the table, the trace and the critical chain), and the steps it never reached
        are not started because of the interruption."""
        self.report.interrupted = what
        if not self._stopwatch.started:
            return  # interrupted before the first step
        self.report.wall_time = stopped = self._stopwatch.elapsed()
        for outcome in self.report.outcomes.values():
            if outcome.status != "pending":
                continue
            if outcome.started is None:
                outcome.status, outcome.reason = "skipped", f"not started: {what}"
            else:
                outcome.status, outcome.finished = "interrupted", stopped

    def teardown(self) -> None:
        """Undo completed steps, side by side or in reverse completion order (see the
        module); safe to call many times and from any thread (a concurrent caller
        returns once teardown is done).  Every teardown runs whatever another one
        raised; should this call be cut short all the same, the next one finishes
        what is left."""
        with self._teardown_lock:
            if self._teardowns.close():
                self._signals.quiet()
                if self._status is not None:
                    self._status.state("stopping")
                    self._status.phase("teardown")
            began = self._clock()
            try:
                tear_down(self.teardown_mode, self._plan.graph, self._teardowns.names(),
                          self._teardowns.undo)
            finally:
                if self._started:  # a run never started has nothing to time
                    spent = self._clock() - began
                    self.report.teardown_time = (self.report.teardown_time or 0.0) + spent
                self._finish_teardown()

    def _finish_teardown(self) -> None:
        """After the last step's teardown: the environment, the signals, the watchdog
        and the process go back (each once)."""
        with self._lock:
            if self._teardowns:
                return  # cut short: the next teardown() comes back here
            environment, self._environment = self._environment, None
        if environment is not None:
            undone = environment.restore()
            if undone:
                self.log.info("env_restored", unset=undone)
        self._signals.release()
        self._supervisor.stop(keep_wakeup_fd=self._signals.installed)
        if self._teardown_at_exit:
            atexit.unregister(self.teardown)
        if self._status is not None:
            self._status.state("stopped")
        _ACTIVE.release(self)

    def describe(self) -> str:
        """Which run this is, for people: its profiles, rank and when it started."""
        started = f", started {self.report.started_at}" if self.report.started_at else ""
        return f"profile {'+'.join(self._plan.profiles)}, rank {self.state.rank.rank}{started}"

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
        """The failed step ``planned`` hard-depends on; failing fast, any failed step."""
        upstream = self._failed_upstream(planned)
        if upstream is not None or self._keep_going:
            return upstream
        return self._first_failure

    def skip(self, planned: PlannedStep, root_cause: str) -> None:
        outcome = self.report.outcomes[planned.name]
        if self._failed_upstream(planned) is None:  # only failing fast stops it
            outcome.reason = f"not started: step '{root_cause}' failed (fail fast)"
        else:
            self._blocked[planned.name] = root_cause
            outcome.reason = f"upstream failed: {root_cause}"
        outcome.status, outcome.root_cause = "skipped", root_cause
        self.log.info("step_skipped", step=planned.name, reason=outcome.reason,
                      root_cause=root_cause)

    def run_step(self, planned: PlannedStep) -> None:
        outcome = self.report.outcomes[planned.name]
        if self._teardowns.closed:  # torn down from another thread while the walk went on
            outcome.status, outcome.reason = "skipped", "the run was torn down"
            return
        root = self.blocked_by(planned)  # a parallel walk may have released it before a
        if root is not None:             # failure that came while it waited for a thread
            self.skip(planned, root)
            return
        self._membership.step_started(planned.name)
        if self._status is not None:
            self._status.step_started(planned.name)
        self._invoker.invoke(planned, outcome=outcome)
        if self._status is not None:
            self._status.step_finished(planned.name, outcome.status == "succeeded")
        self._membership.step_finished(planned.name, outcome.status)  # joined by it, perhaps
        if outcome.status == "failed":
            if outcome.error is not None:  # invoke has returned: its frame is done too
                release_frames(outcome.error)
            with self._lock:
                self._first_failure = self._first_failure or planned.name
        if outcome.status == "succeeded":
            self._teardowns.push(planned.name)

    def would_run(self, planned: PlannedStep) -> None:
        outcome = self.report.outcomes[planned.name]
        outcome.status = "would_run"
        self.log.info("step_would_run", step=planned.name, wave=planned.wave,
                      device_bound=planned.step.device_bound, timeout=planned.step.timeout)

    # -- internals -------------------------------------------------------------------

    def _failed_upstream(self, planned: PlannedStep) -> str | None:
        """The failed step that hard-blocks ``planned`` (the root cause), if any."""
        for name in self._plan.graph.predecessors(planned.name, HARD_EDGE_KINDS):
            outcome = self.report.outcomes[name]
            if outcome.status == "failed":
                return name
            if name in self._blocked:
                return self._blocked[name]
        return None

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


def failure_error(report: RunReport) -> StepFailedError:
    """The error a failed run raises: names the first failed step and its diagnosis,
    and keeps the step's own exception as ``__cause__`` (tracebacks show both)."""
    first = report.failed[0]
    error = first.error
    message = exception_message(error) if error is not None else "no error recorded"
    text = f"step '{first.name}' failed: {type(error).__name__}: {message}"
    if first.finding is not None:
        text += f"\n{first.finding.summary()}"
    failure = StepFailedError(first.name, text, report)
    failure.__cause__ = error
    return failure
