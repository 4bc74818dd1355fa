"""The run report: JSON shape, critical chain, blame, Chrome trace events.

A fake clock that only moves when a step says so makes every offset and
duration exact, so nothing here depends on how fast the machine is.
"""

from __future__ import annotations

import datetime
import json
import re
import threading

from initorch import RankInfo
from initorch.errors import StepError
from initorch.execution.run import Run
from initorch.reporting.diagnosis import DiagnosisCatalog
from initorch.reporting.render import run_summary_text
from initorch.reporting.report import RunReport, StepOutcome
from tests.support.runs import DIAGNOSES, WAIT, FakeClock, plan_of, with_teardown
from tests.support.synthetic import FLAGS_ENABLED, define

RANK = RankInfo(rank=1, local_rank=1, world_size=2)


def timed_run(registry=None) -> tuple[Run, FakeClock]:
    """a(1.0) -> b(2.0) and c(0.5, after a) -> d(0.25); bad(0.125) fails; f needs bad;
    a's teardown takes 0.0625.  The run keeps going after ``bad`` fails, so that every
    kind of outcome shows.

    Sequential order a, b, bad, c, d; d's last-finished predecessor is c.  The teardown
    is sequential too: side by side, which thread undoes ``a`` (and so its track in the
    trace, and the shared fake clock's reading) depends on the threads' timing.
    """
    clock = FakeClock()

    def takes(seconds: float, error: Exception | None = None):
        def act(ctx):
            clock.advance(seconds)
            if error is not None:
                raise error
            return ctx.step

        return act

    register_error = StepError("cudaHostRegister(ptr=0x7f00, nbytes=4096) failed with error 712",
                               vendor_code=712)
    plan = plan_of([
        with_teardown(define("a", takes(1.0)), lambda ctx, output: clock.advance(0.0625)),
        define("b", takes(2.0), requires=["a"]),
        define("bad", takes(0.125, register_error), wants=["a"]),
        define("c", takes(0.5), after=["a"]),
        define("d", takes(0.25), requires=["b", "c"]),
        define("f", takes(9.0), requires=["bad"]),
        define("g", takes(9.0), when="flags.enabled", settings=FLAGS_ENABLED),
    ], extra_yaml="config:\n  flags:\n    enabled: false\n")
    diagnoses = registry.diagnoses if registry is not None else DiagnosisCatalog()
    return Run(plan, rank=RANK, clock=clock, diagnoses=diagnoses, keep_going=True,
               teardown="sequential"), clock


def test_report_json_shape(registry):
    run, _ = timed_run(registry)
    report = run.start()
    data = json.loads(json.dumps(report.to_dict()))
    assert set(data) == {"fingerprint", "profiles", "device", "rank", "executor", "started_at",
                         "wall_time_s", "teardown_time_s", "total_time_s", "ok", "interrupted",
                         "steps", "critical_chain", "blame", "teardown_mode", "teardown",
                         "environment", "peers_lost"}
    assert data["interrupted"] is None
    assert data["peers_lost"] == []
    assert data["fingerprint"] == run.plan.fingerprint
    assert (data["profiles"], data["device"], data["rank"], data["executor"], data["ok"]) == (
        ["synthetic"], "cpu", 1, "sequential", False)
    assert datetime.datetime.fromisoformat(data["started_at"]).tzinfo is not None
    assert data["wall_time_s"] == 3.875
    # A failed run tears itself down before returning: a's teardown is the only one.
    assert (data["teardown_time_s"], data["total_time_s"]) == (0.0625, 3.9375)
    main = threading.current_thread().name
    steps = {s["step"]: s for s in data["steps"]}
    assert [s["step"] for s in data["steps"]] == ["a", "b", "bad", "c", "d", "f", "g"]
    assert steps["a"] == {"step": "a", "status": "succeeded", "attempts": 1,
                          "start_offset_s": 0.0, "duration_s": 1.0, "thread": main}
    assert (steps["b"]["start_offset_s"], steps["b"]["duration_s"]) == (1.0, 2.0)
    assert (steps["c"]["start_offset_s"], steps["c"]["duration_s"]) == (3.125, 0.5)
    assert (steps["d"]["start_offset_s"], steps["d"]["duration_s"]) == (3.625, 0.25)
    bad = steps["bad"]
    assert (bad["status"], bad["attempts"], bad["start_offset_s"], bad["duration_s"]) == (
        "failed", 1, 3.0, 0.125)
    traceback_text = bad["error"].pop("traceback")
    assert bad["error"] == {
        "type": "StepError",
        "message": "cudaHostRegister(ptr=0x7f00, nbytes=4096) failed with error 712",
        "vendor_code": "712",
        "text": "StepError: cudaHostRegister(ptr=0x7f00, nbytes=4096) failed with error 712",
    }
    # The report carries the traceback: where the step raised, then the exception line.
    assert traceback_text.startswith("Traceback (most recent call last):\n")
    assert re.search(r'File ".*test_report\.py", line \d+, in act\n', traceback_text)
    assert traceback_text.endswith("StepError: cudaHostRegister(ptr=0x7f00, nbytes=4096) "
                                   "failed with error 712\n")
    assert bad["diagnosis"]["id"] == "cuda-host-register-already-registered"
    assert bad["diagnosis"]["vendor_code"] == "712"
    assert set(bad["diagnosis"]) == {"id", "title", "cause", "remedy", "prevention",
                                     "vendor_code", "matched"}
    assert steps["f"] == {"step": "f", "status": "skipped", "attempts": 0,
                          "start_offset_s": None, "duration_s": None, "thread": None,
                          "reason": "upstream failed: bad", "root_cause": "bad"}
    assert steps["g"]["status"] == "skipped"
    assert steps["g"]["reason"].startswith("condition 'flags.enabled' is false")
    assert data["critical_chain"] == ["d", "c", "a"]
    assert data["blame"] == [{"step": "b", "duration_s": 2.0}, {"step": "a", "duration_s": 1.0},
                             {"step": "c", "duration_s": 0.5}, {"step": "d", "duration_s": 0.25},
                             {"step": "bad", "duration_s": 0.125}]
    assert data["teardown"] == [{"step": "a", "status": "succeeded", "start_offset_s": 3.875,
                                 "duration_s": 0.0625, "thread": main}]


def test_the_headline_shows_start_up_teardown_and_their_total():
    clock = FakeClock()
    plan = plan_of([with_teardown(define("a", lambda ctx: clock.advance(1.5)),
                                  lambda ctx, output: clock.advance(0.25))])
    run = Run(plan, clock=clock, diagnoses=DIAGNOSES)
    run.start()
    assert run_summary_text(run.report).startswith(
        "run: ok in 1.500s (start-up; not torn down yet) (sequential, rank 0, ")
    run.teardown()
    run.teardown()  # nothing left: adds nothing
    assert run_summary_text(run.report).startswith(
        "run: ok in 1.750s (start-up 1.500s + teardown 0.250s) (sequential, rank 0, ")
    data = run.report.to_dict()
    assert (data["wall_time_s"], data["teardown_time_s"], data["total_time_s"]) == (
        1.5, 0.25, 1.75)


def test_an_unknown_failure_has_no_diagnosis_in_the_report():
    run, _ = timed_run()  # an empty diagnosis book
    bad = run.start().outcomes["bad"].to_dict()
    assert bad["diagnosis"] is None
    assert bad["error"]["type"] == "StepError"


def outcome(name: str, started: float, finished: float) -> StepOutcome:
    return StepOutcome(name, "succeeded", 1, started, finished, "t", 1)


def test_critical_chain_follows_the_predecessor_that_finished_last():
    # `long` ran longest but finished early; `late` started late and finished
    # last, so it is what `top` waited for.
    plan = plan_of([define("long"), define("late"), define("base"),
                    define("top", requires=["long", "late"], after=["base"])])
    outcomes = {
        "base": outcome("base", 0.0, 0.5),
        "long": outcome("long", 0.0, 4.0),
        "late": outcome("late", 4.75, 5.0),
        "top": outcome("top", 5.0, 6.0),
    }
    report = RunReport(plan, "parallel", 0, outcomes, started_at="")
    assert [o.name for o in report.critical_chain()] == ["top", "late"]
    assert [o.name for o in report.blame()] == ["long", "top", "base", "late"]


def test_critical_chain_and_blame_ignore_steps_that_never_ran():
    plan = plan_of([define("first"), define("second", requires=["first"])])
    report = Run(plan, executor="dry-run", diagnoses=DIAGNOSES).start()
    assert report.critical_chain() == []
    assert report.blame() == []
    assert [s["status"] for s in report.to_dict()["steps"]] == ["would_run", "would_run"]


def test_chrome_trace_events():
    run, _ = timed_run()
    trace = json.loads(json.dumps(run.start().trace_events()))
    assert set(trace) == {"traceEvents", "displayTimeUnit", "otherData"}
    assert trace["otherData"] == {"fingerprint": run.plan.fingerprint, "rank": run.report.rank,
                                  "started_at": run.report.started_at}
    events = trace["traceEvents"]
    metadata = [e for e in events if e["ph"] == "M"]
    complete = {e["name"]: e for e in events if e["ph"] == "X"}
    assert {e["ph"] for e in events} == {"M", "X"}
    tid = threading.get_ident()
    assert metadata == [
        {"name": "process_name", "ph": "M", "pid": 1, "tid": 0,
         "args": {"name": "initorch rank 1 (synthetic)"}},
        {"name": "thread_name", "ph": "M", "pid": 1, "tid": tid,
         "args": {"name": threading.current_thread().name}},
    ]
    # skipped steps have no slice; teardowns have theirs, after the steps
    assert set(complete) == {"a", "b", "bad", "c", "d", "teardown a"}
    assert complete["teardown a"] == {"name": "teardown a", "cat": "initorch.teardown",
                                      "ph": "X", "ts": 3_875_000.0, "dur": 62_500.0, "pid": 1,
                                      "tid": tid, "args": {"status": "succeeded"}}
    assert complete["b"] == {"name": "b", "cat": "initorch.step", "ph": "X",
                             "ts": 1_000_000.0, "dur": 2_000_000.0, "pid": 1, "tid": tid,
                             "args": {"status": "succeeded", "attempts": 1,
                                      "wave": run.plan.step("b").wave}}
    assert (complete["bad"]["ts"], complete["bad"]["dur"]) == (3_000_000.0, 125_000.0)
    assert complete["bad"]["args"]["status"] == "failed"


def test_a_parallel_trace_has_one_named_track_per_worker_thread():
    barrier = threading.Barrier(2, timeout=WAIT)
    plan = plan_of([define("left", lambda ctx: barrier.wait()),
                    define("right", lambda ctx: barrier.wait())])
    report = Run(plan, executor="parallel", workers=2, diagnoses=DIAGNOSES).start()
    assert report.ok
    events = report.trace_events()["traceEvents"]
    tracks = {e["tid"]: e["args"]["name"] for e in events if e["name"] == "thread_name"}
    slices = {e["name"]: e["tid"] for e in events if e["ph"] == "X"}
    assert len(tracks) == 2
    assert set(slices.values()) == set(tracks)
    assert all(name.startswith("initorch-worker") for name in tracks.values())
    assert all(isinstance(e["ts"], float) and e["dur"] >= 0 for e in events if e["ph"] == "X")
