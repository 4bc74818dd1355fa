"""The side-by-side teardown: dependents first, independent ones at once, the same
report as the sequential teardown, device-bound ones with the device bound."""

from __future__ import annotations

import threading
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from initorch.execution.executors import TEARDOWN_MODES, reversed_graph, tear_down
from initorch.execution.run import Run
from tests.support.runs import (
    DIAGNOSES,
    EXECUTORS,
    WAIT,
    Dag,
    TeardownLog,
    dags,
    finish,
    load_acl,
    plan_of,
    spawn_python,
    with_teardown,
)
from tests.support.synthetic import define


class Spans:
    """Teardowns that record when each one began and ended, in one global sequence."""

    def __init__(self, failing: frozenset[str] = frozenset()) -> None:
        self._lock = threading.Lock()
        self._tick = 0
        self.began: dict[str, int] = {}
        self.ended: dict[str, int] = {}
        self.threads: dict[str, str] = {}
        self.failing = failing

    def _next(self) -> int:
        with self._lock:
            self._tick += 1
            return self._tick

    def __call__(self, ctx: Any, output: Any) -> None:
        self.began[ctx.step] = self._next()
        self.threads[ctx.step] = threading.current_thread().name
        self.ended[ctx.step] = self._next()
        if ctx.step in self.failing:
            raise OSError(f"cannot release {ctx.step}")


def spans_run(dag: Dag, mode: str, spans: Spans, executor: str = "sequential") -> Run:
    steps = dag.definitions(lambda name: lambda ctx: f"{name}-output")
    for definition in steps:
        definition.teardown(spans)
    return Run(plan_of(steps), executor=executor, workers=3, teardown=mode,
               diagnoses=DIAGNOSES)


@pytest.mark.parametrize("executor", EXECUTORS)
@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(dag=dags(), data=st.data())
def test_a_step_is_undone_only_after_every_step_ordered_after_it(executor, dag: Dag, data):
    failing = frozenset(data.draw(st.sets(st.sampled_from(dag.names)), label="failing"))
    spans = Spans(failing)
    run = spans_run(dag, "side-by-side", spans, executor)
    assert run.start().ok
    run.teardown()
    assert set(spans.began) == set(dag.names)  # each once, failing ones included
    for source, target, _ in dag.name_edges():
        assert spans.ended[target] < spans.began[source], (source, target)
    statuses = {entry.step: entry.status for entry in run.report.teardown}
    assert statuses == {name: "failed" if name in failing else "succeeded"
                        for name in dag.names}


@settings(max_examples=30, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(dag=dags(), data=st.data())
def test_both_modes_give_the_same_report(dag: Dag, data):
    failing = frozenset(data.draw(st.sets(st.sampled_from(dag.names)), label="failing"))
    reports = {}
    for mode in TEARDOWN_MODES:
        run = spans_run(dag, mode, Spans(failing))
        report = run.start()
        run.teardown()
        reports[mode] = ({o.name: o.status for o in report.outcomes.values()},
                         sorted((e.step, e.status, e.error) for e in report.teardown))
    assert reports["side-by-side"] == reports["sequential"]


def test_independent_teardowns_run_at_the_same_time():
    # Each teardown waits for the other: only side by side do both get past the barrier.
    meet = threading.Barrier(2, timeout=WAIT)
    teardowns = TeardownLog()

    def waits_for_the_other(ctx, output):
        meet.wait()
        teardowns(ctx, output)

    plan = plan_of([with_teardown(define(name), waits_for_the_other)
                    for name in ("store", "master")])
    run = Run(plan, diagnoses=DIAGNOSES)
    assert run.start().ok
    run.teardown()
    assert sorted(teardowns.order) == ["master", "store"]
    assert [entry.status for entry in run.report.teardown] == ["succeeded"] * 2
    assert len({entry.thread_id for entry in run.report.teardown}) == 2


def test_a_chain_is_undone_on_the_calling_thread_alone():
    spans = Spans()
    plan = plan_of([with_teardown(define(name, **({"requires": [before]} if before else {})),
                                  spans)
                    for name, before in (("a", None), ("b", "a"), ("c", "b"))])
    run = Run(plan, diagnoses=DIAGNOSES)
    assert run.start().ok
    run.teardown()
    assert sorted(spans.began, key=spans.began.__getitem__) == ["c", "b", "a"]
    assert set(spans.threads.values()) == {threading.current_thread().name}


def test_device_bound_teardowns_run_with_the_device_bound_on_their_thread():
    runtime = load_acl().SimulatedAclRuntime(environ={"ASCEND_RT_VISIBLE_DEVICES": "0,1"})
    meet = threading.Barrier(2, timeout=WAIT)  # both on threads of their own, at once
    seen: dict[str, tuple[int, str]] = {}

    def binder(ctx):
        runtime.set_device(1)
        return lambda: runtime.set_device(1)

    def release(ctx, output):
        meet.wait()
        seen[ctx.step] = (runtime.get_device(), threading.current_thread().name)
        runtime.reset_thread()  # the next teardown on this thread must bind again

    plan = plan_of([define("set_device", binder, binds_device=True),
                    *(with_teardown(define(name, device_bound=True), release)
                      for name in ("engine", "store"))])
    run = Run(plan, diagnoses=DIAGNOSES)
    assert run.start().ok
    runtime.reset_thread()
    run.teardown()
    assert [device for device, _ in seen.values()] == [1, 1]
    assert len({thread for _, thread in seen.values()}) == 2


def test_a_teardown_that_escapes_stops_new_ones_and_the_next_call_finishes():
    spans = Spans()
    escaped = threading.Event()

    def undo(name: str) -> None:
        if name == "b" and not escaped.is_set():
            escaped.set()
            raise KeyboardInterrupt
        spans.began[name] = len(spans.began)

    plan = plan_of([define("a"), define("b", requires=["a"])])
    left = ["a", "b"]
    with pytest.raises(KeyboardInterrupt):
        tear_down("side-by-side", plan.graph, left, undo)
    assert spans.began == {}  # a waited for b, which escaped: nothing else started
    tear_down("side-by-side", plan.graph, left, undo)
    assert list(spans.began) == ["b", "a"]


def test_the_reversed_graph_turns_every_edge_round():
    plan = plan_of([define("a"), define("b", requires=["a"]), define("c", after=["a"])])
    turned = reversed_graph(plan.graph)
    assert turned.nodes == list(reversed(plan.graph.nodes))
    assert sorted((e.source, e.target, e.kind) for e in turned.edges()) == [
        ("b", "a", "requires"), ("c", "a", "after")]


def test_an_unknown_mode_is_refused():
    with pytest.raises(ValueError, match="unknown teardown 'backwards'"):
        Run(plan_of([define("a")]), teardown="backwards", diagnoses=DIAGNOSES)


def test_independent_teardowns_at_interpreter_exit_all_run():
    # atexit teardown: threads may be refused this late (Python 3.12+); the calling
    # thread then undoes everything itself.
    process = spawn_python("""
    def teardown(ctx, output):  # one write per line: print's text and newline are two,
        sys.stdout.write(f"teardown {ctx.step}\\n")  # which side-by-side threads interleave
        sys.stdout.flush()

    steps = [define(name) for name in ("a", "b", "c")]
    for definition in steps:
        definition.teardown(teardown)
    run = Run(plan_of(steps), teardown_at_exit=True, diagnoses=DIAGNOSES)
    assert run.start().ok
    print("STARTED", flush=True)
    """)
    finished = finish(process)
    assert finished.returncode == 0, finished.stderr
    lines = finished.stdout.splitlines()
    assert lines[0] == "STARTED"
    assert sorted(lines[1:]) == ["teardown a", "teardown b", "teardown c"]


def test_the_cli_offers_every_mode_and_the_default_first():
    from initorch.cli.parser import TEARDOWN_MODES as OFFERED

    assert OFFERED == TEARDOWN_MODES
