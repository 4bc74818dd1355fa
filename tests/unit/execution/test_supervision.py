"""What a run lends its step invoker: its clock since the start, its watchdog (started
only when needed), the membership's give-up and the teardown stack's late results."""

from __future__ import annotations

from initorch import RankInfo
from initorch.execution.context import RunState
from initorch.execution.invoke import Supervisor
from initorch.execution.membership import JobMembership
from initorch.execution.supervision import RunSupervisor, Stopwatch
from initorch.execution.teardown_stack import TeardownStack
from initorch.execution.watchdog import current
from initorch.reporting.logs import get_logger
from initorch.reporting.report import RunReport, StepOutcome
from tests.support.runs import FakeClock, TeardownLog, plan_of, with_teardown
from tests.support.synthetic import define


def test_the_stopwatch_reads_zero_until_the_run_starts_then_the_time_since():
    clock = FakeClock()
    watch = Stopwatch(clock)
    assert (watch.started, watch.elapsed()) == (False, 0.0)
    clock.advance(7.0)
    watch.start()
    clock.advance(1.5)
    assert (watch.started, watch.elapsed()) == (True, 1.5)


def supervisor_of(log: TeardownLog) -> tuple[RunSupervisor, RunState]:
    plan = plan_of([define("quick"), with_teardown(define("bounded", timeout=30.0), log),
                    define("meet", barrier=True)])
    report = RunReport(plan, "sequential", 0, {name: StepOutcome(name) for name in plan.order},
                       started_at="")
    membership = JobMembership(plan, RankInfo(), get_logger(), report)
    state = RunState(plan, RankInfo(), job=membership)
    stack = TeardownStack(state, membership, report, get_logger(), FakeClock())
    return RunSupervisor({"profile": "test", "rank": 0}, membership, stack), state


def test_the_watchdog_starts_for_the_first_step_with_a_timeout_and_stops_with_the_run():
    supervisor, state = supervisor_of(TeardownLog())
    plan = state.plan
    assert supervisor.watchdog_for(plan.step("quick")) is None  # nothing started for it
    assert current() is None
    watchdog = supervisor.watchdog_for(plan.step("bounded"))
    try:
        assert watchdog is not None and current() is watchdog
        assert supervisor.watchdog_for(plan.step("quick")) is watchdog  # now guards all
        assert supervisor.watchdog() is watchdog
    finally:
        supervisor.stop(keep_wakeup_fd=False)
    assert current() is None
    assert supervisor.watchdog_for(plan.step("quick")) is None
    supervisor.stop(keep_wakeup_fd=False)  # once is enough: nothing left to stop


def test_give_up_comes_from_the_membership_and_late_outputs_go_to_the_teardown_stack():
    log = TeardownLog()
    supervisor, state = supervisor_of(log)
    lent: Supervisor = supervisor  # all the invoker asks of a run
    assert lent.give_up_for(state.plan.step("meet")) is None  # in no job: nobody to give up on
    lent.finished_late(state.plan.step("bounded"), "late")
    assert log.outputs == {"bounded": "late"}
