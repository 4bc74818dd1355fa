"""What a run must undo: each completed step undone exactly once, whoever asks, and
one teardown's failure never another's; which step goes when is the executors'."""

from __future__ import annotations

import threading
from typing import Any

from initorch import RankInfo
from initorch.execution.context import RunState
from initorch.execution.membership import JobMembership
from initorch.execution.teardown_stack import TeardownStack
from initorch.reporting.logs import get_logger
from initorch.reporting.report import RunReport, StepOutcome
from initorch.resolution.plan import Plan
from tests.support.runs import (
    WAIT,
    FakeClock,
    TeardownLog,
    captured_records,
    plan_of,
    with_teardown,
)
from tests.support.synthetic import define


class Stack:
    """A teardown stack with a run's other parts around it: state, report, membership."""

    def __init__(self, plan: Plan) -> None:
        self.clock = FakeClock()
        self.report = RunReport(plan, "sequential", 0,
                                {name: StepOutcome(name) for name in plan.order}, started_at="")
        self.membership = JobMembership(plan, RankInfo(), get_logger(), self.report)
        self.state = RunState(plan, RankInfo(), job=self.membership)
        self.stack = TeardownStack(self.state, self.membership, self.report, get_logger(),
                                   self.clock)

    def complete(self, *names: str) -> None:
        for name in names:
            self.state.record_output(name, f"{name}-output", binds_device=False)
            self.stack.push(name)

    def statuses(self) -> dict[str, str]:
        return {entry.step: entry.status for entry in self.report.teardown}


def three(log: TeardownLog, teardown: Any = None) -> Plan:
    return plan_of([with_teardown(define("a"), log), with_teardown(define("b"), teardown or log),
                    define("no_teardown"), with_teardown(define("c"), log)])


def test_each_completed_step_is_undone_once_with_its_output():
    log = TeardownLog()
    run = Stack(three(log))
    run.complete("a", "no_teardown", "b")
    assert run.stack.names() == ["a", "no_teardown", "b"]
    for name in ["b", "b", "no_teardown", "c", "a"]:  # "c" never completed
        run.stack.undo(name)
    assert log.order == ["b", "a"]
    assert log.outputs == {"b": "b-output", "a": "a-output"}
    assert not run.stack and not run.state.outputs()  # the last references go too


def test_many_threads_asking_undo_each_step_once():
    log = TeardownLog()
    run = Stack(three(log))
    run.complete("a", "b", "c")
    go = threading.Barrier(4)

    def undo_all() -> None:
        go.wait(WAIT)
        for name in ["c", "b", "a"]:
            run.stack.undo(name)

    threads = [threading.Thread(target=undo_all) for _ in range(4)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(WAIT)
    assert sorted(log.order) == ["a", "b", "c"]


def test_a_failing_teardown_is_recorded_and_the_others_still_run():
    log = TeardownLog()

    def exits(ctx: Any, output: Any) -> None:
        log(ctx, output)
        raise SystemExit(3)  # not even this stops the others

    run = Stack(three(log, exits))
    run.complete("a", "b", "c")
    for name in reversed(run.stack.names()):
        run.stack.undo(name)
    assert log.order == ["c", "b", "a"]
    assert run.statuses() == {"c": "succeeded", "b": "failed", "a": "succeeded"}
    [failed] = [entry for entry in run.report.teardown if entry.status == "failed"]
    assert failed.error == "SystemExit: 3"


def test_teardown_entries_are_timed_on_the_runs_clock():
    def slow(ctx: Any, output: Any) -> None:
        run.clock.advance(2.5)

    run = Stack(plan_of([with_teardown(define("a"), slow)]))
    run.complete("a")
    run.stack.undo("a")
    [entry] = run.report.teardown
    assert (entry.started, entry.finished) == (100.0, 102.5)
    assert entry.thread == threading.current_thread().name


def test_a_step_completed_once_the_teardown_began_is_undone_at_once():
    log = TeardownLog()
    run = Stack(three(log))
    run.complete("a")
    assert run.stack.close() is True
    assert run.stack.close() is False  # only the first teardown begins it
    run.complete("b")
    assert log.order == ["b"] and run.stack.names() == ["a"]
    assert run.stack.closed


def test_a_late_output_is_undone_and_said():
    log = TeardownLog()
    run = Stack(three(log))
    with captured_records() as records:
        run.stack.undo_late(run.state.plan.step("b"), "late-output")
    assert log.outputs == {"b": "late-output"}
    assert [r.step for r in records.events("step_finished_late")] == ["b"]


def test_a_device_bound_teardown_runs_with_the_device_bound_on_its_thread():
    bound: list[str] = []
    seen: list[list[str]] = []

    def binder(ctx: Any) -> Any:
        return lambda: bound.append(threading.current_thread().name)

    def release(ctx: Any, output: Any) -> None:
        seen.append(list(bound))

    plan = plan_of([define("bind", binder, binds_device=True),
                    with_teardown(define("pool", device_bound=True), release)])
    run = Stack(plan)
    run.state.record_output("bind", binder(None), binds_device=True)
    run.complete("pool")
    undoer = threading.Thread(target=run.stack.undo, args=("pool",), name="undoer")
    undoer.start()
    undoer.join(WAIT)
    assert seen == [["undoer"]]
