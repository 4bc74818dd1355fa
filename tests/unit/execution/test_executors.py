"""Executors: ordering, exactly-once, real overlap, worker bound, dry run, determinism."""

from __future__ import annotations

import threading

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from initorch.execution.executors import (
    DryRunExecutor,
    ParallelExecutor,
    SequentialExecutor,
    make_executor,
)
from initorch.execution.run import Run
from initorch.plugin import Executor, RunDriver
from tests.support.runs import DIAGNOSES, EXECUTORS, WAIT, Dag, Recorder, dags, plan_of
from tests.support.synthetic import FLAGS_ENABLED, define

PROPERTY = settings(max_examples=60, deadline=None,
                    suppress_health_check=[HealthCheck.too_slow])


def run_dag(dag: Dag, executor: str, workers: int = 4) -> tuple[Recorder, Run]:
    recorder = Recorder()
    plan = plan_of(dag.definitions(recorder.action))
    run = Run(plan, executor=executor, workers=workers, diagnoses=DIAGNOSES)
    run.start()
    # Torn down here, not left to the garbage collector: a parallel worker that has not
    # yet returned still holds the run, and the next example's run would be refused.
    run.teardown()
    return recorder, run


def assert_edges_respected(dag: Dag, recorder: Recorder) -> None:
    for source, target, kind in dag.name_edges():
        assert recorder.finishes[source][0] < recorder.starts[target][0], (
            f"{target} started before {source} finished ({kind} edge); "
            f"start order {recorder.order}")


@pytest.mark.parametrize("executor", EXECUTORS)
@PROPERTY
@given(dag=dags(), workers=st.integers(1, 4))
def test_random_dags_never_violate_an_edge_and_run_each_step_once(executor, dag, workers):
    recorder, run = run_dag(dag, executor, workers)
    assert run.report.ok
    assert sorted(recorder.order) == sorted(dag.names)  # each exactly once
    assert all(len(ticks) == 1 for ticks in recorder.starts.values())
    assert {o.status for o in run.report.outcomes.values()} == {"succeeded"}
    assert_edges_respected(dag, recorder)


class BlockingDriver:
    """A RunDriver that blocks the steps it was given (as a run does after a failure) and
    records, under a lock, what it was asked, what ran and what was skipped."""

    def __init__(self, plan, blocked: set[str]) -> None:
        self.plan, self.blocked = plan, blocked
        self.lock = threading.Lock()
        self.asked: list[str] = []
        self.ran: list[str] = []
        self.skipped: list[str] = []

    def _settled(self) -> set[str]:
        return {*self.ran, *self.skipped}

    def blocked_by(self, planned):
        with self.lock:
            early = set(self.plan.graph.predecessors(planned.name)) - self._settled()
            assert not early, f"{planned.name} asked about before {early} settled"
            self.asked.append(planned.name)
        return "root" if planned.name in self.blocked else None

    def skip(self, planned, root_cause):
        with self.lock:
            self.skipped.append(planned.name)

    def run_step(self, planned):
        with self.lock:
            assert set(self.plan.graph.predecessors(planned.name)) <= self._settled()
            self.ran.append(planned.name)

    would_run = run_step


@pytest.mark.parametrize("executor", EXECUTORS)
@PROPERTY
@given(dag=dags(), data=st.data())
def test_the_walk_asks_the_run_about_every_step_once_and_skips_exactly_what_it_blocks(
        executor, dag, data):
    # The walk withholds nothing itself: a skipped step is done like one that ran, and
    # each of its dependents is asked about in turn (the run's rule decides how far a
    # failure carries: failing fast, everything; keep_going, only what requires it).
    blocked = data.draw(st.sets(st.sampled_from(dag.names)), label="blocked")
    plan = plan_of(dag.definitions(lambda name: lambda ctx: None))
    driver = BlockingDriver(plan, blocked)
    make_executor(executor, workers=3).execute(driver)
    assert sorted(driver.asked) == sorted(plan.order)
    assert sorted(driver.skipped) == sorted(blocked)
    assert sorted(driver.ran) == sorted(set(plan.order) - blocked)
    if executor == "sequential":
        assert driver.asked == list(plan.order)


@PROPERTY
@given(dag=dags())
def test_sequential_runs_in_plan_order_on_the_calling_thread(dag):
    recorder, run = run_dag(dag, "sequential")
    assert recorder.order == list(run.plan.order)
    assert set(recorder.threads.values()) == {threading.get_ident()}


def test_sequential_order_is_deterministic_and_lexicographic_among_independent_steps():
    definitions = [define("zeta"), define("alpha"), define("mid", requires=["zeta"]),
                   define("beta")]
    orders = []
    for _ in range(3):
        recorder = Recorder()
        plan = plan_of([define(d.fields["name"], recorder.action(d.fields["name"]),
                               requires=d.fields["requires"]) for d in definitions])
        Run(plan, diagnoses=DIAGNOSES).start()
        orders.append(recorder.order)
    assert orders == [["alpha", "beta", "zeta", "mid"]] * 3


def test_parallel_overlaps_independent_steps():
    # Both steps must be inside their action at the same time to pass the barrier;
    # a serialising executor breaks it (timeout) instead of hanging.
    barrier = threading.Barrier(2, timeout=WAIT)
    recorder = Recorder()

    def meet(ctx):
        return barrier.wait()

    plan = plan_of([define("left", recorder.action("left", meet)),
                    define("right", recorder.action("right", meet))])
    run = Run(plan, executor="parallel", workers=2, diagnoses=DIAGNOSES)
    run.start()
    assert run.report.ok, [o.error for o in run.report.failed]
    assert recorder.max_active == 2
    assert recorder.threads["left"] != recorder.threads["right"]


class HoldingDriver:
    """A RunDriver whose steps hold their worker until the test releases them."""

    def __init__(self, plan, recorder: Recorder) -> None:
        self.plan = plan
        self.recorder = recorder
        self.changed = threading.Condition()
        self.asked = 0
        self.held: set[str] = set()
        self.releases = {name: threading.Event() for name in plan.order}

    def blocked_by(self, planned):
        with self.changed:
            self.asked += 1
            self.changed.notify_all()
        return None

    def run_step(self, planned):
        self.recorder.start(planned.name)
        with self.changed:
            self.held.add(planned.name)
            self.changed.notify_all()
        released = self.releases[planned.name].wait(WAIT)
        self.recorder.finish(planned.name)
        assert released, f"{planned.name} was never released"

    def skip(self, planned, root_cause):
        raise AssertionError("nothing fails here")

    would_run = skip

    def release_one(self, at_least: int) -> bool:
        """Once ``at_least`` steps are held, release the first of them."""
        with self.changed:
            full = self.changed.wait_for(lambda: len(self.held) >= at_least, timeout=WAIT)
            name = min(self.held)
            self.held.remove(name)
        self.releases[name].set()
        return full


@pytest.mark.parametrize("workers", [1, 2, 3])
def test_parallel_never_exceeds_its_worker_count(workers):
    # Every step is ready at once.  After the executor has asked about all of
    # them (so it has handed them all to its workers), steps are released one at a
    # time, each time only once `workers` are held: the bound is reached at every
    # round, and a step beyond it would be counted while the others are held.
    recorder = Recorder()
    names = [f"step{i}" for i in range(workers * 3)]
    driver = HoldingDriver(plan_of([define(name) for name in names]), recorder)
    runner = threading.Thread(target=ParallelExecutor(workers).execute, args=(driver,))
    runner.start()
    with driver.changed:
        assert driver.changed.wait_for(lambda: driver.asked == len(names), timeout=WAIT)
    rounds = [driver.release_one(min(workers, left)) for left in range(len(names), 0, -1)]
    runner.join(WAIT)
    assert all(rounds)
    assert recorder.max_active == workers
    assert sorted(recorder.order) == sorted(names)


def test_parallel_starts_a_step_as_soon_as_its_own_dependencies_are_done():
    # `quick_child` depends only on `quick`; it must start while `slow` is still
    # running (slow waits until quick_child has run), i.e. no wave barrier.
    child_ran = threading.Event()
    recorder = Recorder()

    def slow(ctx):
        if not child_ran.wait(WAIT):
            raise TimeoutError("quick_child never started while slow was running")

    plan = plan_of([
        define("slow", recorder.action("slow", slow)),
        define("quick", recorder.action("quick")),
        define("quick_child", recorder.action("quick_child", lambda ctx: child_ran.set()),
               requires=["quick"]),
    ])
    run = Run(plan, executor="parallel", workers=2, diagnoses=DIAGNOSES)
    run.start()
    assert run.report.ok, [o.error for o in run.report.failed]


@pytest.mark.parametrize("executor", [*EXECUTORS, "dry-run"])
def test_plan_time_skipped_steps_never_run(executor):
    recorder = Recorder()
    plan = plan_of([define("kept", recorder.action("kept")),
                    define("gated", recorder.action("gated"), when="flags.enabled",
                           settings=FLAGS_ENABLED)],
                   extra_yaml="config:\n  flags:\n    enabled: false\n")
    run = Run(plan, executor=executor, diagnoses=DIAGNOSES)
    run.start()
    assert "gated" not in recorder.order
    assert run.report.outcomes["gated"].status == "skipped"
    assert "flags.enabled" in (run.report.outcomes["gated"].reason or "")


def test_dry_run_runs_nothing_and_marks_every_planned_step_would_run():
    recorder = Recorder()
    torn_down = []

    def boom(ctx):
        raise AssertionError("a dry run must not call step actions")

    first = define("first", recorder.action("first", boom))
    first.teardown(lambda ctx, output: torn_down.append(ctx.step))
    plan = plan_of([first, define("second", recorder.action("second", boom), requires=["first"])])
    run = Run(plan, executor="dry-run", diagnoses=DIAGNOSES)
    report = run.start()
    run.teardown()
    assert recorder.order == []
    assert torn_down == []
    assert {name: o.status for name, o in report.outcomes.items()} == {
        "first": "would_run", "second": "would_run"}
    assert report.ok
    assert all(o.attempts == 0 and o.started is None for o in report.outcomes.values())


def test_make_executor_names_and_errors():
    assert isinstance(make_executor("sequential"), SequentialExecutor)
    assert isinstance(make_executor("dry-run"), DryRunExecutor)
    parallel = make_executor("parallel", workers=3)
    assert isinstance(parallel, ParallelExecutor)
    assert parallel.workers == 3
    with pytest.raises(ValueError, match="unknown executor 'fast'"):
        make_executor("fast")
    with pytest.raises(ValueError, match="workers must be >= 1"):
        make_executor("parallel", workers=0)


def test_run_accepts_an_executor_object():
    recorder = Recorder()
    plan = plan_of([define("only", recorder.action("only"))])
    run = Run(plan, executor=ParallelExecutor(workers=1), diagnoses=DIAGNOSES)
    assert run.start().executor == "parallel"
    assert recorder.order == ["only"]


def test_parallel_default_runs_every_ready_waiting_step_at_once():
    # 64 independent steps each wait at one barrier: only a thread per ready step
    # lets them all arrive (with 4 workers the barrier would time out and break).
    count = 64
    barrier = threading.Barrier(count, timeout=WAIT)
    plan = plan_of([define(f"wait{i:02d}", lambda ctx: barrier.wait()) for i in range(count)])
    run = Run(plan, executor="parallel", diagnoses=DIAGNOSES)
    run.start()
    assert run.report.ok, [o.error for o in run.report.failed]


def test_parallel_runs_steps_that_hold_the_gil_one_at_a_time():
    recorder = Recorder()
    computing = [define(f"compute{i}", recorder.action(f"compute{i}"), holds_gil=True)
                 for i in range(6)]
    plan = plan_of(computing)
    run = Run(plan, executor="parallel", diagnoses=DIAGNOSES)
    run.start()
    assert run.report.ok, [o.error for o in run.report.failed]
    assert recorder.max_active == 1
    assert sorted(recorder.order) == [f"compute{i}" for i in range(6)]


@pytest.mark.parametrize("executor", [*EXECUTORS, "dry-run"])
def test_a_plan_whose_every_step_is_skipped_at_plan_time_finishes(executor):
    recorder = Recorder()
    plan = plan_of([define("gated", recorder.action("gated"), when="flags.enabled",
                           settings=FLAGS_ENABLED)],
                   extra_yaml="config:\n  flags:\n    enabled: false\n")
    assert plan.order == ()
    run = Run(plan, executor=executor, diagnoses=DIAGNOSES)
    runner = threading.Thread(target=run.start, daemon=True)
    runner.start()
    runner.join(WAIT)
    assert not runner.is_alive(), "the run never finished"
    assert recorder.order == []
    assert run.report.outcomes["gated"].status == "skipped"


class OwnExecutor:
    """A launcher's own executor, written against the public protocol only."""

    name = "own"

    def execute(self, driver: RunDriver) -> None:
        for planned in driver.plan.steps:
            root = driver.blocked_by(planned)
            if root is None:
                driver.run_step(planned)
            else:
                driver.skip(planned, root)


def test_a_launcher_brings_its_own_executor_through_the_public_protocol():
    def fail(ctx):
        raise RuntimeError("boom")

    executor: Executor = OwnExecutor()
    plan = plan_of([define("a"), define("b", fail, requires=["a"]), define("c")])
    report = Run(plan, executor=executor, diagnoses=DIAGNOSES).start()
    assert report.executor == "own"
    assert {n: (o.status, o.reason) for n, o in report.outcomes.items()} == {
        "a": ("succeeded", None), "b": ("failed", None),
        "c": ("skipped", "not started: step 'b' failed (fail fast)")}
