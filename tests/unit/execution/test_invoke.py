"""Running one step: timeouts with the hung thread's stack, retries with backoff."""

from __future__ import annotations

import gc
import threading
import weakref
from collections.abc import Iterator

import pytest

from initorch.errors import StepError
from initorch.execution.context import RankInfo, RunState
from initorch.execution.invoke import (
    GiveUp,
    StepAbortedError,
    StepInvoker,
    StepTimeoutError,
    stuck_at,
)
from initorch.execution.run import Run
from initorch.execution.signals import SignalGuard
from initorch.execution.watchdog import Watchdog
from initorch.reporting.diagnosis import DiagnosisCatalog
from initorch.reporting.logs import get_logger
from initorch.reporting.report import StepOutcome
from initorch.resolution.plan import PlannedStep
from tests.support.runs import (
    DIAGNOSES,
    EXECUTORS,
    WAIT,
    TeardownLog,
    captured_records,
    load_acl,
    plan_of,
    with_teardown,
)
from tests.support.synthetic import define

HUNG_TIMEOUT = 0.05


@pytest.fixture
def peer() -> Iterator[threading.Event]:
    """Released at the end of the test, so a hung helper thread always ends."""
    event = threading.Event()
    yield event
    event.set()


def wait_for_the_peer(event: threading.Event) -> str:
    """Where the hung step blocks; its name must show up in the reported stack."""
    event.wait(WAIT)
    return "late resource"


def hung_plan(peer: threading.Event, teardowns: TeardownLog, **hung_fields):
    return plan_of([
        with_teardown(define("ready", lambda ctx: "ready"), teardowns),
        with_teardown(define("hung", lambda ctx: wait_for_the_peer(peer), requires=["ready"],
                             timeout=HUNG_TIMEOUT, **hung_fields), teardowns),
        define("after_hung", requires=["hung"]),
        define("independent", after=["ready"]),
    ])


@pytest.mark.parametrize("executor", EXECUTORS)
def test_a_hung_step_is_reported_with_name_elapsed_and_stack(executor, peer):
    teardowns = TeardownLog()
    report = Run(hung_plan(peer, teardowns), executor=executor, keep_going=True,
                 diagnoses=DIAGNOSES).start()
    hung = report.outcomes["hung"]
    error = hung.error
    assert isinstance(error, StepTimeoutError)
    assert error.step == "hung"
    assert error.timeout == HUNG_TIMEOUT
    assert error.elapsed >= error.timeout
    assert "wait_for_the_peer" in error.stack
    assert "event.wait(WAIT)" in error.stack  # the very line it blocks on
    # The first line (the one the CLI prints last) names where it hangs: the step's own
    # line, and the library call it waits in.
    first = str(error).splitlines()[0]
    assert first.startswith(f"step 'hung' timed out after {error.elapsed:.1f}s "
                            f"(timeout {HUNG_TIMEOUT:g}s); it is stuck at ")
    assert "tests/unit/execution/test_invoke.py:" in first
    assert " in wait_for_the_peer (event.wait(WAIT)), waiting in threading.py:" in first
    assert first.endswith("; its stack:") and error.where in first
    assert hung.status == "failed"
    assert hung.attempts == 1
    # the run fails cleanly: dependents skipped, independent work done, teardown done
    assert report.outcomes["after_hung"].status == "skipped"
    assert report.outcomes["after_hung"].reason == "upstream failed: hung"
    assert report.outcomes["independent"].status == "succeeded"
    assert teardowns.order == ["ready"]


def test_a_timeout_whose_thread_has_no_frame_says_so():
    assert stuck_at(None) == ""
    error = StepTimeoutError("hung", 1.0, 1.5, "(stack unavailable)")
    assert str(error).splitlines()[0] == ("step 'hung' timed out after 1.5s (timeout 1s); "
                                          "where it is stuck is unknown; its stack:")


@pytest.mark.parametrize("executor", EXECUTORS)
def test_a_step_that_finishes_in_time_returns_its_output_through_the_helper(executor):
    plan = plan_of([define("quick", lambda ctx: threading.current_thread().name, timeout=WAIT)])
    run = Run(plan, executor=executor, diagnoses=DIAGNOSES)
    assert run.start().ok
    assert run.output("quick") == "initorch-quick"


@pytest.mark.parametrize("executor", EXECUTORS)
def test_an_error_on_the_helper_thread_is_the_step_failure(executor):
    def fail(ctx):
        raise StepError("engine refused", vendor_code=-1)

    report = Run(plan_of([define("engine", fail, timeout=WAIT)]), executor=executor,
                 diagnoses=DIAGNOSES).start()
    error = report.outcomes["engine"].error
    assert isinstance(error, StepError)
    assert str(error) == "engine refused"


@pytest.mark.parametrize("executor", EXECUTORS)
def test_a_timed_out_step_that_completes_later_is_still_torn_down(executor, peer):
    # Python cannot kill the helper thread; when the hung call finally returns,
    # what it produced must not leak (the run promises late completions are torn
    # down).  Today the helper's result is dropped and its teardown never runs.
    teardowns = TeardownLog()

    def teardown(ctx, output):
        teardowns(ctx, output)
        teardowns.done.set()

    released = define("hung", lambda ctx: wait_for_the_peer(peer), timeout=HUNG_TIMEOUT)
    released.teardown(teardown)
    run = Run(plan_of([released]), executor=executor, diagnoses=DIAGNOSES)
    assert run.start().outcomes["hung"].status == "failed"
    peer.set()
    assert teardowns.done.wait(5), "the late result of a timed-out step was never torn down"
    assert teardowns.outputs == {"hung": "late resource"}


# -- retries -------------------------------------------------------------------------------------

class Flaky:
    """Fails with ``error`` the first ``failures`` calls, then returns 'connected'."""

    def __init__(self, failures: int, error: type[Exception] = ConnectionRefusedError) -> None:
        self.failures = failures
        self.error = error
        self.calls = 0

    def __call__(self, ctx) -> str:
        self.calls += 1
        if self.calls <= self.failures:
            raise self.error(f"rendezvous not ready (call {self.calls})")
        return "connected"


def retrying_run(action, executor: str, **fields) -> tuple[Run, list[float]]:
    delays: list[float] = []
    fields = {"retries": 3, "retry_on": (ConnectionError,), **fields}
    plan = plan_of([define("connect", action, **fields)])
    return Run(plan, executor=executor, sleep=delays.append, diagnoses=DIAGNOSES), delays


class Unsupervised:
    """A :class:`~initorch.execution.invoke.Supervisor` with nothing to add: no
    watchdog, no peers, and no step it stopped waiting for."""

    def watchdog_for(self, planned: PlannedStep) -> Watchdog | None:
        return None

    def give_up_for(self, planned: PlannedStep) -> GiveUp | None:
        return None

    def finished_late(self, planned: PlannedStep, output: object) -> None:
        raise AssertionError(f"the invoker waited for every step, not for {planned.name}")


def test_one_invoker_runs_every_step_of_a_run_with_what_it_was_built_with():
    # What does not change from step to step is given once; a step is then only
    # itself and the outcome it fills.
    plan = plan_of([define("connect", Flaky(failures=1), retries=1,
                           retry_on=(ConnectionError,)),
                    define("use", lambda ctx: ctx.output("connect") + " and used",
                           requires=["connect"])])
    state, delays, ticks = RunState(plan, RankInfo()), [], iter(range(100))
    log = get_logger()
    invoker = StepInvoker(state=state, diagnoses=DiagnosisCatalog(), log=log,
                          clock=lambda: float(next(ticks)), signals=SignalGuard(log),
                          supervisor=Unsupervised(), sleep=delays.append)
    outcomes = {name: StepOutcome(name) for name in plan.order}
    for planned in plan.steps:
        invoker.invoke(planned, outcome=outcomes[planned.name])
    assert {name: (o.status, o.attempts) for name, o in outcomes.items()} == {
        "connect": ("succeeded", 2), "use": ("succeeded", 1)}
    assert delays == [0.5]
    assert state.output("use") == "connected and used"
    assert (outcomes["use"].started, outcomes["use"].finished) == (2.0, 3.0)


@pytest.mark.parametrize("executor", EXECUTORS)
def test_a_transient_error_is_retried_with_exponential_backoff(executor):
    flaky = Flaky(failures=2)
    run, delays = retrying_run(flaky, executor)
    report = run.start()
    assert report.ok
    assert delays == [0.5, 1.0]
    assert report.outcomes["connect"].attempts == 3
    assert run.output("connect") == "connected"


@pytest.mark.parametrize("executor", EXECUTORS)
def test_exhausted_retries_fail_with_attempts_retries_plus_one(executor):
    flaky = Flaky(failures=100)
    run, delays = retrying_run(flaky, executor)
    outcome = run.start().outcomes["connect"]
    assert outcome.status == "failed"
    assert outcome.attempts == 4 == flaky.calls
    assert delays == [0.5, 1.0, 2.0]
    assert isinstance(outcome.error, ConnectionRefusedError)
    assert str(outcome.error) == "rendezvous not ready (call 4)"


@pytest.mark.parametrize("executor", EXECUTORS)
def test_an_error_the_step_did_not_declare_transient_is_not_retried(executor):
    flaky = Flaky(failures=1, error=ValueError)
    run, delays = retrying_run(flaky, executor)
    outcome = run.start().outcomes["connect"]
    assert (outcome.status, outcome.attempts, flaky.calls, delays) == ("failed", 1, 1, [])


def test_backoff_starts_at_the_declared_value():
    run, delays = retrying_run(Flaky(failures=3), "sequential", retry_backoff=0.25)
    assert run.start().ok
    assert delays == [0.25, 0.5, 1.0]


def test_each_retry_is_logged_as_step_retry():
    run, _ = retrying_run(Flaky(failures=2), "sequential")
    with captured_records() as records:
        run.start()
    retries = records.events("step_retry")
    assert [(r.step, r.attempt, r.delay_s, r.error_type) for r in retries] == [
        ("connect", 1, 0.5, "ConnectionRefusedError"),
        ("connect", 2, 1.0, "ConnectionRefusedError"),
    ]
    assert [r.attempt for r in records.events("step_started")] == [1, 2, 3]
    assert retries[0].error == "rendezvous not ready (call 1)"


@pytest.mark.parametrize("executor", EXECUTORS)
def test_every_attempt_of_a_device_bound_step_is_bound_again(executor):
    # The first attempt loses its context (a failed init resets the device); the
    # retry must not inherit that: the binding is applied before each attempt.
    runtime = load_acl().SimulatedAclRuntime(environ={"ASCEND_RT_VISIBLE_DEVICES": "0,1"})
    attempts: list[int] = []

    def engine(ctx):
        attempts.append(runtime.get_device())
        if len(attempts) == 1:
            runtime.reset_thread()
            raise ConnectionResetError("peer went away during handshake")
        return "engine"

    def binder(ctx):
        runtime.set_device(1)
        return lambda: runtime.set_device(1)

    plan = plan_of([define("set_device", binder, binds_device=True),
                    define("engine", engine, device_bound=True, retries=1,
                           retry_on=(ConnectionError,))])
    report = Run(plan, executor=executor, sleep=lambda s: None, diagnoses=DIAGNOSES).start()
    assert report.ok, [o.error for o in report.failed]
    assert attempts == [1, 1]


def interrupting_plan(teardowns: TeardownLog, raised: BaseException,
                      timeout: float | None = None):
    def interrupted(ctx):
        raise raised

    return plan_of([with_teardown(define("first", lambda ctx: 1), teardowns),
                    define("second", interrupted, requires=["first"], retries=2,
                           retry_on=(Exception,), timeout=timeout)])


@pytest.mark.parametrize("timeout", [None, WAIT], ids=["own-thread", "timeout-helper"])
@pytest.mark.parametrize("executor", EXECUTORS)
@pytest.mark.parametrize("raised", [KeyboardInterrupt(), SystemExit(0)])
def test_without_signal_handling_an_interrupt_in_a_step_reaches_the_caller(raised, executor,
                                                                           timeout):
    # The run does not handle signals, so its caller does: these may come from Ctrl-C or
    # the host's own signal handlers, and a server's `except KeyboardInterrupt` must see
    # them.  Both executors agree, whichever thread ran the step.
    teardowns = TeardownLog()
    run = Run(interrupting_plan(teardowns, raised, timeout=timeout), executor=executor,
              diagnoses=DIAGNOSES)
    with pytest.raises(type(raised)):
        run.start()
    assert teardowns.order == ["first"]
    outcome = run.report.outcomes["second"]
    assert (outcome.status, outcome.attempts) == ("interrupted", 1)  # never retried
    assert run.report.interrupted  # what stopped it, as the report and the table say


@pytest.mark.parametrize("executor", EXECUTORS)
@pytest.mark.parametrize(("raised", "said"), [
    (KeyboardInterrupt(), "step 'second' raised KeyboardInterrupt"),
    (SystemExit(0), "step 'second' called sys.exit(0)"),
])
def test_with_signal_handling_an_interrupt_raised_by_a_step_is_its_failure(raised, said,
                                                                          executor):
    # The run turns real signals into RunInterrupted: these can only be the step's own.
    teardowns = TeardownLog()
    run = Run(interrupting_plan(teardowns, raised), executor=executor, handle_signals=True,
              diagnoses=DIAGNOSES)
    report = run.start()
    outcome = report.outcomes["second"]
    assert (outcome.status, outcome.attempts) == ("failed", 1)  # never retried
    assert isinstance(outcome.error, StepAbortedError)
    assert outcome.error.raised is raised and outcome.error.__cause__ is raised
    assert str(outcome.error) == said
    assert teardowns.order == ["first"]


class Resource:
    """Stands for what a step uses: a process group, an engine, a pool."""


def look_up(resource: Resource) -> None:
    """A helper the step calls; its frame holds the resource when it raises."""
    raise KeyError("no such rank")


@pytest.mark.parametrize("timeout", [None, WAIT], ids=["own-thread", "timeout-helper"])
@pytest.mark.parametrize("executor", EXECUTORS)
def test_a_failed_step_keeps_nothing_it_used_alive_past_teardown(executor, timeout):
    # The report keeps the failure and its traceback; the objects the step's frames
    # held must go with their teardown, not when the garbage collector reaches the
    # error's reference cycle (at interpreter exit, that aborted a rank of
    # test_e2e_server: a gloo thread dropping a tensor could not take the GIL).
    alive: list[weakref.ref[Resource]] = []

    def use_then_fail(ctx):
        resource = ctx.output("make")
        alive.append(weakref.ref(resource))
        try:
            look_up(resource)
        except KeyError as exc:
            raise StepError("the step broke while using its resource") from exc

    make = with_teardown(define("make", lambda ctx: Resource()), lambda ctx, output: None)
    plan = plan_of([make, define("use", use_then_fail, requires=["make"], timeout=timeout)])
    gc.disable()  # only reference counting may free it, as at interpreter exit
    try:
        run = Run(plan, executor=executor, diagnoses=DIAGNOSES)
        report = run.start()  # fails, and tears down
        assert report.outcomes["use"].status == "failed"
        assert alive[0]() is None, gc.get_referrers(alive[0]())
    finally:
        gc.enable()
    text = report.outcomes["use"].traceback or ""
    assert "in use_then_fail" in text and "in look_up" in text  # the report keeps it all
    assert "KeyError: 'no such rank'" in text
