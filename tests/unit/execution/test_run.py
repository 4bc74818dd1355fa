"""A run: failure propagation, teardown, the context manager, signals, atexit."""

from __future__ import annotations

import signal
import threading
import time
import traceback
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from initorch import LaunchArguments, RankInfo, StepFailedError
from initorch.errors import EXIT_STEP_FAILED, RunInterrupted, StepError
from initorch.execution.executors import TEARDOWN_MODES
from initorch.execution.run import Run
from tests.support.runs import (
    DIAGNOSES,
    EXECUTORS,
    WAIT,
    Dag,
    Recorder,
    TeardownLog,
    captured_records,
    dags,
    finish,
    json_lines,
    load_acl,
    plan_of,
    spawn_python,
    with_teardown,
)
from tests.support.synthetic import define


class Boom(RuntimeError):
    pass


def fail(ctx):
    raise Boom(f"{ctx.step} broke")


# -- failure propagation ----------------------------------------------------------------------

@pytest.mark.parametrize("executor", EXECUTORS)
@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(dag=dags(), data=st.data())
def test_failures_skip_exactly_the_transitive_requirers_with_the_root_cause(executor, dag: Dag,
                                                                            data):
    failing = data.draw(st.sets(st.sampled_from(dag.names)), label="failing")
    recorder = Recorder()
    steps = dag.definitions(lambda name: recorder.action(name, fail if name in failing else None))
    run = Run(plan_of(steps), executor=executor, workers=3, keep_going=True, diagnoses=DIAGNOSES)
    report = run.start()
    run.teardown()  # a worker still returning would hold the run for the next example

    closure = dag.requires_closure()
    for name in run.plan.order:
        outcome = report.outcomes[name]
        blocked = {up for up in closure[name] if report.outcomes[up].status == "failed"}
        if blocked:
            assert outcome.status == "skipped", name
            root = (outcome.reason or "").removeprefix("upstream failed: ")
            assert root in blocked, (name, outcome.reason, blocked)
            assert name not in recorder.order
        else:
            assert outcome.status == ("failed" if name in failing else "succeeded"), name
            assert recorder.order.count(name) == 1
    assert report.ok == (not failing)


def propagation_plan(recorder: Recorder):
    return plan_of([
        define("root", recorder.action("root", fail)),
        define("mid", recorder.action("mid"), requires=["root"]),
        define("leaf", recorder.action("leaf"), requires=["mid"]),
        define("wanting", recorder.action("wanting"), wants=["root"]),
        define("ordered", recorder.action("ordered"), after=["root"]),
        define("preceding", recorder.action("preceding"), before=["leaf"]),
        define("wants_leaf", recorder.action("wants_leaf"), wants=["leaf"]),
    ])


@pytest.mark.parametrize("executor", EXECUTORS)
def test_keep_going_skips_only_requirers_naming_the_root_cause(executor):
    recorder = Recorder()
    report = Run(propagation_plan(recorder), executor=executor, keep_going=True,
                 diagnoses=DIAGNOSES).start()
    statuses = {name: (o.status, o.reason) for name, o in report.outcomes.items()}
    assert statuses == {
        "root": ("failed", None),
        "mid": ("skipped", "upstream failed: root"),
        "leaf": ("skipped", "upstream failed: root"),  # the root cause, not 'mid'
        "wanting": ("succeeded", None),
        "ordered": ("succeeded", None),
        "preceding": ("succeeded", None),
        "wants_leaf": ("succeeded", None),
    }
    assert [o.name for o in report.failed] == ["root"]  # one failure, not three
    assert sorted(recorder.order) == ["ordered", "preceding", "root", "wanting", "wants_leaf"]


def test_skips_are_logged_once_with_their_root_cause():
    with captured_records() as records:
        Run(propagation_plan(Recorder()), keep_going=True, diagnoses=DIAGNOSES).start()
    skipped = {r.step: (r.reason, r.root_cause) for r in records.events("step_skipped")}
    assert skipped == {"mid": ("upstream failed: root", "root"),
                       "leaf": ("upstream failed: root", "root")}
    assert [r.step for r in records.events("step_failed")] == ["root"]


def fail_fast_run(recorder: Recorder, teardowns: TeardownLog, **options: Any) -> Run:
    """``boom`` fails; under the parallel executor ``running`` (independent, with a
    teardown) has started by then, and returns only once the run holds the failure
    against the steps still to start; the others could start only after the failure."""
    runs: list[Run] = []
    running = threading.Event()

    def fail_once_running(ctx):
        running.wait(WAIT if options.get("executor") == "parallel" else 0)
        fail(ctx)

    def run_past_the_failure(ctx):
        running.set()
        later = runs[0].plan.step("later")
        # Under keep_going nothing is ever held against `later`: there is nothing to wait for.
        deadline = time.monotonic() + (0 if options.get("keep_going") else WAIT)
        while runs[0].blocked_by(later) is None and time.monotonic() < deadline:
            time.sleep(0.005)
        return "running-output"

    plan = plan_of([
        define("boom", recorder.action("boom", fail_once_running)),
        with_teardown(define("running", recorder.action("running", run_past_the_failure)),
                      teardowns),
        define("later", recorder.action("later"), after=["running"]),
        define("needs_later", recorder.action("needs_later"), requires=["later"]),
        define("wanting", recorder.action("wanting"), wants=["boom"]),
        define("needing", recorder.action("needing"), requires=["boom"]),
    ])
    runs.append(Run(plan, **options, diagnoses=DIAGNOSES))
    return runs[0]


@pytest.mark.parametrize("executor", EXECUTORS)
def test_after_a_failure_no_new_step_starts_and_the_rest_are_reported_not_started(executor):
    recorder, teardowns = Recorder(), TeardownLog()
    report = fail_fast_run(recorder, teardowns, executor=executor).start()
    not_started = "not started: step 'boom' failed (fail fast)"
    expected = {
        "boom": ("failed", None),
        "later": ("skipped", not_started),
        "needs_later": ("skipped", not_started),  # its requirement never failed
        "wanting": ("skipped", not_started),
        "needing": ("skipped", "upstream failed: boom"),
    }
    if executor == "parallel":  # started with boom, so it finishes and is torn down
        expected["running"] = ("succeeded", None)
        assert teardowns.order == ["running"]
    else:  # plan order puts it after boom: never started
        expected["running"] = ("skipped", not_started)
        assert teardowns.order == []
    assert {n: (o.status, o.reason) for n, o in report.outcomes.items()} == expected
    assert sorted(recorder.order) == sorted(n for n, (status, _) in expected.items()
                                            if status != "skipped")
    assert {o.root_cause for o in report.outcomes.values() if o.status == "skipped"} == {"boom"}


@pytest.mark.parametrize("executor", EXECUTORS)
def test_keep_going_runs_what_does_not_require_the_failed_step(executor):
    recorder, teardowns = Recorder(), TeardownLog()
    report = fail_fast_run(recorder, teardowns, executor=executor, keep_going=True).start()
    assert {n: o.status for n, o in report.outcomes.items()} == {
        "boom": "failed", "running": "succeeded", "later": "succeeded",
        "needs_later": "succeeded", "wanting": "succeeded", "needing": "skipped"}
    assert teardowns.order == ["running"]


# -- teardown ------------------------------------------------------------------------------------

def chain_plan(teardowns: TeardownLog, last=fail, teardown_of=None):
    """a -> b -> c (each with a teardown), then `last` requiring c."""
    teardown_of = teardown_of or {}
    steps = [with_teardown(define(name, lambda ctx: f"{ctx.step}-output", **edges),
                           teardown_of.get(name, teardowns))
             for name, edges in (("a", {}), ("b", {"requires": ["a"]}),
                                 ("c", {"requires": ["b"]}))]
    return plan_of([*steps, with_teardown(define("last", last, requires=["c"]), teardowns)])


@pytest.mark.parametrize("mode", TEARDOWN_MODES)
@pytest.mark.parametrize("executor", EXECUTORS)
def test_a_failed_run_tears_down_completed_steps_in_reverse_order(executor, mode):
    teardowns = TeardownLog()
    run = Run(chain_plan(teardowns), executor=executor, teardown=mode, diagnoses=DIAGNOSES)
    report = run.start()
    assert not report.ok
    assert teardowns.order == ["c", "b", "a"]  # not the failed step
    assert teardowns.outputs == {"a": "a-output", "b": "b-output", "c": "c-output"}
    assert [(t.step, t.status) for t in report.teardown] == [
        (n, "succeeded") for n in ("c", "b", "a")]
    with pytest.raises(LookupError, match="has not completed"):
        run.output("a")  # the output was released for teardown


def test_the_sequential_teardown_follows_completion_order_not_plan_order():
    # `a_slow` and `b_fast` are independent; `c_after_b` (requires b_fast) releases
    # a_slow, so b_fast has completed before a_slow completes.  Plan order is
    # a_slow, b_fast, c_after_b; completion order is b_fast, ..., a_slow.
    teardowns = TeardownLog()
    release = threading.Event()

    def slow(ctx):
        if not release.wait(WAIT):
            raise TimeoutError("never released")

    plan = plan_of([
        with_teardown(define("a_slow", slow), teardowns),
        with_teardown(define("b_fast", lambda ctx: "b"), teardowns),
        define("c_after_b", lambda ctx: release.set(), requires=["b_fast"]),
    ])
    run = Run(plan, executor="parallel", workers=2, teardown="sequential", diagnoses=DIAGNOSES)
    assert run.start().ok
    assert run.plan.order == ("a_slow", "b_fast", "c_after_b")
    run.teardown()
    assert teardowns.order == ["a_slow", "b_fast"]


@pytest.mark.parametrize("mode", TEARDOWN_MODES)
@pytest.mark.parametrize("executor", EXECUTORS)
def test_teardown_is_idempotent(executor, mode):
    teardowns = TeardownLog()
    run = Run(chain_plan(teardowns, last=lambda ctx: None), executor=executor, teardown=mode,
              diagnoses=DIAGNOSES)
    assert run.start().ok
    run.teardown()
    run.teardown()
    assert teardowns.order == ["last", "c", "b", "a"]


@pytest.mark.parametrize("mode", TEARDOWN_MODES)
def test_a_failing_teardown_is_logged_and_the_others_still_run(mode):
    teardowns = TeardownLog()
    run = Run(chain_plan(teardowns, teardown_of={"b": teardowns.failing}), teardown=mode,
              diagnoses=DIAGNOSES)
    with captured_records() as records:
        run.start()
    assert teardowns.order == ["c", "b", "a"]
    assert [(t.step, t.status, t.error) for t in run.report.teardown] == [
        ("c", "succeeded", None),
        ("b", "failed", "OSError: cannot release b"),
        ("a", "succeeded", None),
    ]
    [failed] = records.events("teardown_failed")
    assert (failed.step, failed.error_type, failed.error) == ("b", "OSError", "cannot release b")
    assert failed.levelname == "ERROR"
    assert [r.step for r in records.events("teardown_succeeded")] == ["c", "a"]
    assert [r.step for r in records.events("teardown_started")] == ["c", "b", "a"]


def test_steps_without_teardown_are_released_silently():
    plan = plan_of([define("plain", lambda ctx: object())])
    run = Run(plan, diagnoses=DIAGNOSES)
    with captured_records() as records:
        run.start()
        run.teardown()
    assert run.report.teardown == []
    assert not [r for r in records.records if r.event.startswith("teardown_")]


# -- the context manager ------------------------------------------------------------------------

def test_with_run_tears_down_on_exit():
    teardowns = TeardownLog()
    with Run(chain_plan(teardowns, last=lambda ctx: "served"), diagnoses=DIAGNOSES) as run:
        assert run.output("last") == "served"
        assert run.output("a") == "a-output"
        assert teardowns.order == []
    assert teardowns.order == ["last", "c", "b", "a"]


def test_with_run_tears_down_when_the_body_raises():
    teardowns = TeardownLog()
    with pytest.raises(KeyError, match="server crashed"), \
            Run(chain_plan(teardowns, last=lambda ctx: None), diagnoses=DIAGNOSES):
        raise KeyError("server crashed")
    assert teardowns.order == ["last", "c", "b", "a"]


def test_with_run_raises_step_failed_with_the_diagnosis(registry):
    def engine(ctx):
        acl = load_acl()
        acl.SimulatedAclRuntime(environ={}).get_device()  # no set_device on this thread

    teardowns = TeardownLog()
    plan = plan_of([with_teardown(define("import_backend", lambda ctx: "torch"), teardowns),
                    define("engine", engine, requires=["import_backend"])])
    with pytest.raises(StepFailedError) as caught, Run(plan, diagnoses=registry.diagnoses):
        pytest.fail("the body must not run when start-up failed")
    error = caught.value
    assert error.step == "engine"
    assert error.exit_code == EXIT_STEP_FAILED
    first_line, diagnosis = str(error).split("\n")
    assert first_line == ("step 'engine' failed: SimulatedAclError: "
                          "Call aclrtGetDevice failed, ret: 107002")
    assert diagnosis.startswith("diagnosis ascend-context-null: ")
    assert "(vendor code 107002)" in diagnosis
    assert error.report.outcomes["engine"].status == "failed"
    assert teardowns.order == ["import_backend"]  # torn down before raising


def test_step_failed_error_keeps_the_step_exception_as_its_cause(registry):
    class DriverError(RuntimeError):
        pass

    def load_weights(ctx):
        try:
            {}["model.safetensors"]
        except KeyError as missing:
            raise DriverError("weights not found") from missing

    plan = plan_of([define("load_weights", load_weights)])
    with pytest.raises(StepFailedError) as caught, Run(plan, diagnoses=registry.diagnoses):
        pass
    cause = caught.value.__cause__
    assert isinstance(cause, DriverError)
    assert cause is caught.value.report.outcomes["load_weights"].error
    assert isinstance(cause.__cause__, KeyError)  # the step's own chain is kept whole
    shown = "".join(traceback.format_exception(caught.value))
    assert "in load_weights" in shown
    assert "The above exception was the direct cause of the following exception" in shown


def test_with_run_an_unknown_failure_is_reported_as_it_is(registry):
    plan = plan_of([define("odd", lambda ctx: {}["missing"])])
    with pytest.raises(StepFailedError) as caught, Run(plan, diagnoses=registry.diagnoses):
        pass
    assert str(caught.value) == "step 'odd' failed: KeyError: 'missing'"


def test_output_of_a_step_that_did_not_complete_is_a_lookup_error():
    plan = plan_of([define("broken", fail), define("after_it", requires=["broken"])])
    run = Run(plan, diagnoses=DIAGNOSES)
    run.start()
    for name in ("broken", "after_it", "unknown"):
        with pytest.raises(LookupError, match=f"step '{name}' has no output"):
            run.output(name)


def test_a_run_is_single_use():
    run = Run(plan_of([define("once")]), diagnoses=DIAGNOSES)
    run.start()
    with pytest.raises(RuntimeError, match="single-use"):
        run.start()


def test_the_rank_comes_from_the_environment_by_default(monkeypatch):
    monkeypatch.setenv("RANK", "3")
    monkeypatch.setenv("LOCAL_RANK", "1")
    monkeypatch.setenv("WORLD_SIZE", "4")
    run = Run(plan_of([define("only", lambda ctx: ctx.rank)]), diagnoses=DIAGNOSES)
    run.start()
    assert run.output("only") == RankInfo(rank=3, local_rank=1, world_size=4, launcher="env")
    assert run.report.rank == 3



def test_the_launch_arguments_describe_the_job_with_the_launchers_variables(monkeypatch):
    monkeypatch.setenv("RANK", "3")
    monkeypatch.setenv("WORLD_SIZE", "4")  # restated by the arguments, not contradicted
    launch = LaunchArguments("10.0.0.1:5000", nnodes=2, node_rank=1, nproc_per_node=2,
                             local_rank=1)
    run = Run(plan_of([define("only", lambda ctx: ctx.rank)]), launch=launch,
              diagnoses=DIAGNOSES)
    assert run.state.rank == RankInfo(rank=3, local_rank=1, world_size=4, local_world_size=2,
                                      rendezvous="10.0.0.1:5000", launcher="args")


def test_a_rank_and_launch_arguments_are_refused_together():
    plan = plan_of([define("only")])
    with pytest.raises(TypeError, match="not both"):
        Run(plan, rank=RankInfo(), launch=LaunchArguments(nnodes=2), diagnoses=DIAGNOSES)
    run = Run(plan, rank=RankInfo(), launch=LaunchArguments(), diagnoses=DIAGNOSES)
    assert run.state.rank == RankInfo()


# -- interrupts, late completions, signals, atexit (fresh interpreters) ---------------------

BLOCKING_RUN = """
from initorch.reporting.logs import configure_logging
configure_logging("json")
signal.alarm(60)  # safety net: never outlive the test
release = threading.Event()

def teardown(ctx, output):
    print(f"teardown {{ctx.step}}", flush=True)
    {second_signal}

def block(ctx):
    print("BLOCKING", flush=True)
    release.wait()

steps = []
for name, requires in (("a", []), ("b", ["a"]), ("c", ["b"])):
    steps.append(define(name, lambda ctx: ctx.step, requires=requires))
    steps[-1].teardown(teardown)
steps.append(define("hang", block, requires=["c"]))
try:
    Run(plan_of(steps), executor={executor!r}, handle_signals=True, diagnoses=DIAGNOSES).start()
except RunInterrupted as interrupt:
    print(f"interrupted {{interrupt.signum}}", flush=True)
    sys.exit(interrupt.exit_code)
"""


def interrupt_blocked_run(executor: str, signum: int, second_signal: str = ""):
    proc = spawn_python(BLOCKING_RUN.format(executor=executor, second_signal=second_signal))
    assert proc.stdout is not None
    marker = proc.stdout.readline()
    assert marker == "BLOCKING\n", (marker, proc.stderr.read() if proc.stderr else "")
    proc.send_signal(signum)
    return finish(proc, timeout=10)


@pytest.mark.parametrize("executor", EXECUTORS)
@pytest.mark.parametrize(("signum", "code"), [(signal.SIGTERM, 143), (signal.SIGINT, 130)],
                         ids=["SIGTERM", "SIGINT"])
def test_a_signal_tears_down_in_reverse_order_and_exits_128_plus_signum(executor, signum, code):
    done = interrupt_blocked_run(executor, signum)
    assert not done.hung, ("the process did not exit after the signal (a worker thread "
                           f"still blocks interpreter exit); stdout: {done.stdout!r}")
    assert done.returncode == code, done.stderr
    assert done.stdout.splitlines() == ["teardown c", "teardown b", "teardown a",
                                        f"interrupted {int(signum)}"]
    events = json_lines(done.stderr)
    assert [e["step"] for e in events if e["event"] == "teardown_started"] == ["c", "b", "a"]
    assert [e["step"] for e in events if e["event"] == "teardown_succeeded"] == ["c", "b", "a"]
    [received] = [e for e in events if e["event"] == "signal_received"]
    assert received["signal"] == signal.Signals(signum).name
    assert all(e["profile"] == "synthetic" and e["rank"] == 0 for e in events)


def test_a_second_signal_during_teardown_does_not_stop_the_other_teardowns():
    # Operators press Ctrl-C twice and supervisors repeat SIGTERM: the second
    # signal arrives while teardown is under way, here from inside c's teardown.
    send_again = ("if ctx.step == 'c': os.kill(os.getpid(), signal.SIGTERM)")
    done = interrupt_blocked_run("sequential", signal.SIGTERM, second_signal=send_again)
    assert not done.hung
    assert [line for line in done.stdout.splitlines() if line.startswith("teardown")] == [
        "teardown c", "teardown b", "teardown a"]
    assert done.returncode == 143


LATE_COMPLETION = """
signal.alarm(60)
started, release, torn = threading.Event(), threading.Event(), threading.Event()

def slow(ctx):
    started.set()
    {trigger}
    release.wait()
    return "late"

def trigger(ctx):
    started.wait()
    os.kill(os.getpid(), signal.SIGTERM)

def teardown(ctx, output):
    print(f"teardown {{ctx.step}} {{output}}", flush=True)
    torn.set()

first = define("first", lambda ctx: "first")
first.teardown(lambda ctx, output: print("teardown first", flush=True))
late = define("slow", slow, requires=["first"], timeout={timeout})
late.teardown(teardown)
steps = [first, late]
{extra}
run = Run(plan_of(steps), executor={executor!r}, workers=2, handle_signals=True,
          diagnoses=DIAGNOSES)
try:
    run.start()
except RunInterrupted:
    print("interrupted", flush=True)
release.set()
print("late teardown" if torn.wait(5) else "late result leaked", flush=True)
print([entry.step for entry in run.report.teardown], flush=True)
"""


@pytest.mark.parametrize("executor", EXECUTORS)
def test_a_step_completing_after_an_interrupt_is_torn_down_late(executor):
    # parallel: `slow` runs on a worker while another worker delivers SIGTERM.
    # sequential: `slow` runs on its timeout helper and delivers SIGTERM itself.
    if executor == "parallel":
        script = LATE_COMPLETION.format(
            executor=executor, trigger="", timeout=None,
            extra='steps.append(define("trigger", trigger, requires=["first"]))')
    else:
        script = LATE_COMPLETION.format(
            executor=executor, trigger="os.kill(os.getpid(), signal.SIGTERM)",
            timeout=WAIT, extra="")
    done = finish(spawn_python(script))
    assert not done.hung, done.stdout
    assert done.stdout.splitlines() == ["teardown first", "interrupted", "teardown slow late",
                                        "late teardown", "['first', 'slow']"], done.stderr


ATEXIT_RUN = """
td = lambda ctx, output: print(f"teardown {{ctx.step}}", flush=True)
a = define("a", lambda ctx: 1); a.teardown(td)
b = define("b", lambda ctx: 2, requires=["a"]); b.teardown(td)
run = Run(plan_of([a, b]), teardown_at_exit={at_exit}, diagnoses=DIAGNOSES)
run.start()
print("started", flush=True)
{then}
"""


@pytest.mark.parametrize(("at_exit", "then", "expected"), [
    (True, "", ["started", "teardown b", "teardown a"]),
    (True, "run.teardown(); print('explicit', flush=True)",
     ["started", "teardown b", "teardown a", "explicit"]),
    (False, "", ["started"]),
], ids=["at-exit", "explicit-then-exit", "option-off"])
def test_teardown_at_interpreter_exit_is_optional_and_happens_once(at_exit, then, expected):
    done = finish(spawn_python(ATEXIT_RUN.format(at_exit=at_exit, then=then)))
    assert done.returncode == 0, done.stderr
    assert done.stdout.splitlines() == expected


def test_a_run_on_a_non_main_thread_leaves_signal_handlers_alone():
    before = {s: signal.getsignal(s) for s in (signal.SIGINT, signal.SIGTERM)}
    seen: dict[int, object] = {}

    def peek(ctx):
        seen.update({s: signal.getsignal(s) for s in before})

    worker = threading.Thread(
        target=lambda: Run(plan_of([define("peek", peek)]), handle_signals=True,
                           diagnoses=DIAGNOSES).start())
    worker.start()
    worker.join(WAIT)
    assert seen == before


def test_signal_handlers_are_installed_while_alive_and_restored_by_teardown():
    before = {s: signal.getsignal(s) for s in (signal.SIGINT, signal.SIGTERM)}
    run = Run(plan_of([define("only")]), handle_signals=True, diagnoses=DIAGNOSES)
    try:
        run.start()
        assert all(signal.getsignal(s) is not before[s] for s in before)
    finally:
        run.teardown()
    assert {s: signal.getsignal(s) for s in before} == before


def test_run_interrupted_carries_the_exit_code():
    interrupt = RunInterrupted(signal.SIGTERM)
    assert (interrupt.signum, interrupt.exit_code, str(interrupt)) == (
        signal.SIGTERM, 143, "interrupted by SIGTERM")
    assert not isinstance(interrupt, Exception)  # `except Exception` in steps cannot eat it


def test_step_error_attributes_survive_into_the_report():
    def register(ctx):
        raise StepError("cudaHostRegister(ptr=0x1, nbytes=4) failed with error 712",
                        vendor_code=712)

    report = Run(plan_of([define("register", register)]), diagnoses=DIAGNOSES).start()
    assert report.outcomes["register"].error.vendor_code == 712


# -- random DAGs with failures and timeouts (issue 10, beyond the list) ------------------------

@pytest.mark.parametrize("executor", EXECUTORS)
@settings(max_examples=30, deadline=None, derandomize=True,
          suppress_health_check=[HealthCheck.too_slow])
@given(dag=dags(), data=st.data())
def test_random_dags_with_failures_and_timeouts_keep_every_promise(executor, dag: Dag, data):
    """Never an order constraint violated, never a step run twice, and exactly the
    steps that completed torn down, once each -- whatever fails or times out."""
    fates = data.draw(st.dictionaries(st.sampled_from(dag.names), st.sampled_from(["fail", "hang"]),
                                      max_size=dag.n), label="fates")
    release = threading.Event()

    def hang(ctx):
        release.wait(WAIT)
        raise Boom(f"{ctx.step} gave up")

    recorder, torn = Recorder(), TeardownLog()
    bodies = {"fail": fail, "hang": hang}
    steps = dag.definitions(lambda name: recorder.action(name, bodies.get(fates.get(name, ""))),
                            timeout=lambda name: 0.05 if fates.get(name) == "hang" else None)
    for definition in steps:
        definition.teardown(torn)
    run = Run(plan_of(steps), executor=executor, workers=3, diagnoses=DIAGNOSES)
    try:
        report = run.start()
        run.teardown()
        finished = {name: ticks[0] for name, ticks in recorder.finishes.items()}
    finally:
        release.set()

    assert all(len(ticks) == 1 for ticks in recorder.starts.values()), recorder.starts
    for first, then, kind in dag.name_edges():
        if then not in recorder.starts:
            continue
        assert first in recorder.starts or kind != "requires", (first, then, kind)
        if first in finished:  # a hung step's thread finishes only after the release
            assert finished[first] < recorder.starts[then][0], (first, then, kind)
        if kind == "requires":
            assert report.outcomes[first].status == "succeeded", (first, then)
    for name in run.plan.order:
        status = report.outcomes[name].status
        if fates.get(name) == "hang" and name in recorder.starts:
            assert status == "failed" and "Timeout" in type(report.outcomes[name].error).__name__
    succeeded = {n for n, o in report.outcomes.items() if o.status == "succeeded"}
    assert sorted(torn.order) == sorted(succeeded)
