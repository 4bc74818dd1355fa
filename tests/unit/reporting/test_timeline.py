"""The start-up timeline: the model (gaps, critical chain, merge, JSON form), the run's
own timeline from a real run, the text, the trace and ``initorch timeline``."""

from __future__ import annotations

import itertools
import json
import os
import subprocess
import sys
import time

import pytest
from hypothesis import given
from hypothesis import strategies as st

from initorch import InitorchError
from initorch.cli import main
from initorch.execution.run import Run
from initorch.reporting.process_marks import MARKS, Marks, process_start
from initorch.reporting.run_timeline import run_timeline
from initorch.reporting.timeline import (
    MIN_GAP_S,
    NOT_MEASURED,
    Phase,
    Process,
    Timeline,
    merge,
    read_timeline,
    timeline_from_dict,
)
from initorch.reporting.timeline_text import compare_text, timeline_text
from initorch.reporting.timeline_trace import timeline_trace
from tests.support.runs import DIAGNOSES, plan_of, with_teardown
from tests.support.synthetic import define

T0 = 1_800_000_000.0


def phase(name: str, start: float, end: float, *, pid: int = 1, thread: str = "main",
          kind: str = "process", after: tuple[str, ...] = ()) -> Phase:
    return Phase(name, pid, thread, T0 + start, T0 + end, kind=kind, after=after)


def two_processes() -> Timeline:
    """A launcher (pid 1) that starts a worker (pid 2); the worker is ready last."""
    return Timeline(
        [Process(1, "launcher"), Process(2, "worker", ready=T0 + 5.0)],
        [phase("imports", 0.0, 1.0), phase("spawn", 1.0, 1.2),
         phase("imports", 1.3, 2.0, pid=2), phase("load weights", 2.0, 4.0, pid=2),
         phase("side work", 2.1, 2.5, pid=2, thread="helper"),
         phase("warm-up", 4.5, 5.0, pid=2, kind="engine")])


def test_gaps_become_not_measured_phases_and_nothing_else_does():
    filled = two_processes().with_gaps()
    gaps = [(p.process, round(p.start - T0, 3), round(p.end - T0, 3))
            for p in filled.phases if p.kind == NOT_MEASURED]
    assert gaps == [(2, 4.0, 4.5)]  # a thread's phase covers 2.1-2.5 inside load weights
    tiny = Timeline([Process(1, "p")], [phase("a", 0, 1), phase("b", 1 + MIN_GAP_S / 2, 2)])
    assert [p.name for p in tiny.with_gaps().phases] == ["a", "b"]


def test_the_critical_chain_goes_back_by_time_across_processes():
    chain = two_processes().with_gaps().critical_chain()
    assert [(p.process, p.name) for p in chain] == [
        (2, "warm-up"), (2, NOT_MEASURED), (2, "load weights"), (2, "imports"),
        (1, "spawn"), (1, "imports")]


def test_declared_edges_win_over_time():
    timeline = Timeline([Process(1, "p")], [
        phase("a", 0, 3, kind="step"), phase("b", 0, 1, kind="step"),
        phase("c", 3.5, 4, kind="step", after=("b",))])
    assert [p.name for p in timeline.critical_chain()] == ["c", "b"]


def test_the_json_form_round_trips_and_bad_files_are_refused(tmp_path):
    timeline = two_processes()
    again = timeline_from_dict(json.loads(json.dumps(timeline.to_dict())), "t.json")
    assert again.to_dict() == timeline.to_dict()
    broken = tmp_path / "broken.json"
    broken.write_text(json.dumps({"format": "initorch-timeline/1", "processes": [{}]}))
    with pytest.raises(InitorchError, match=r"broken\.json: a broken initorch timeline"):
        read_timeline(str(broken))
    other = tmp_path / "other.json"
    other.write_text("[1, 2]")
    with pytest.raises(InitorchError, match=r"other\.json: not an initorch timeline"):
        read_timeline(str(other))


def test_merge_keeps_every_process_and_the_latest_ready():
    first = Timeline([Process(1, "a")], [phase("x", 0, 1)], ready=T0 + 1)
    second = Timeline([Process(2, "b")], [phase("y", 0.5, 3, pid=2)], ready=T0 + 3)
    merged = merge([first, second])
    assert [p.pid for p in merged.processes] == [1, 2]
    assert merged.ready == T0 + 3


def test_the_trace_has_a_process_per_process_and_a_track_per_thread():
    trace = timeline_trace(two_processes())
    names = {(e["pid"], e["tid"]): e["args"]["name"] for e in trace["traceEvents"]
             if e["name"] == "thread_name"}
    assert names == {(1, 1): "main", (2, 1): "main", (2, 2): "helper"}
    spans = [e for e in trace["traceEvents"] if e["ph"] == "X"]
    assert {e["name"] for e in spans if e["cat"] == "initorch.not measured"} == {NOT_MEASURED}
    assert min(e["ts"] for e in spans) == 0


def test_compare_puts_what_got_slower_first():
    before = two_processes()
    slower = [Phase(p.name, p.process, p.thread, p.start,
                    p.end + (1.0 if p.name == "load weights" else 0.0), p.kind)
              for p in before.phases]
    text = compare_text(before, Timeline(before.processes, slower, before.ready))
    rows = text.splitlines()[3:]
    assert "load weights" in rows[0] and "+1.000s" in rows[0]


def test_the_process_start_comes_from_proc(tmp_path):
    before = time.time()
    child = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(5)"])
    after = time.time()
    try:
        start = process_start(child.pid)
        assert start is not None
        assert before - 2 * start.resolution <= start.at <= after + 2 * start.resolution
    finally:
        child.kill()
        child.wait()
    assert process_start(2 ** 22 + 1) is None  # no such process: not measured, not guessed


def test_marks_are_kept_once_with_where_they_were_made():
    marks = Marks()
    marks.mark("x", 1.0)
    marks.mark("x", 2.0)
    [(name, moment)] = marks.snapshot().items()
    assert (name, moment.at) == ("x", 1.0)
    assert moment.where.path.endswith("test_timeline.py")
    assert "imports_began" in MARKS.snapshot()  # initorch/__init__ imports the marks first


def test_a_real_run_has_its_phases_from_the_interpreter_to_the_last_teardown():
    torn: list[str] = []
    plan = plan_of([with_teardown(define("a", lambda ctx: time.sleep(0.01)),
                                  lambda ctx, out: torn.append(ctx.step)),
                    define("b", requires=["a"])])
    run = Run(plan, diagnoses=DIAGNOSES)
    run.start()
    run.teardown()
    marks = Marks()
    for name in ("main_entered", "arguments_parsed", "plugins_loaded", "plan_began",
                 "plan_ready", "run_starting"):
        marks.mark(name, run.report.started_epoch - 0.1)
    marks.mark("imports_began", run.report.started_epoch - 0.5)
    timeline = run_timeline(run.report, marks.snapshot(), pid=os.getpid(),
                            argv=["initorch", "run"],
                            start=process_start())
    names = [p.name for p in timeline.phases]
    assert names[:2] == ["interpreter start", "imports"]
    assert {"a", "b", "teardown a"} <= set(names)
    [step_a] = [p for p in timeline.phases if p.name == "a"]
    assert step_a.kind == "step" and step_a.duration >= 0.01
    assert step_a.source and "test_timeline.py" in step_a.source
    assert timeline.processes[0].ready == run.report.started_epoch + run.report.wall_time
    assert [p.name for p in timeline.critical_chain()][:2] == ["b", "a"]


TINY_PLUGIN = """
import time
from initorch.plugin import step

@step("only", description="sleeps a little, undone at teardown")
def only(ctx):
    time.sleep(0.01)

only.teardown(lambda ctx, output: None)

def register(registry):
    registry.steps.add(only)
"""


def test_initorch_run_reports_its_timeline_and_initorch_timeline_reads_it(tmp_path, capsys):
    (tmp_path / "tiny.py").write_text(TINY_PLUGIN)
    profile = tmp_path / "tiny.yaml"
    profile.write_text("device:\n  type: cpu\nsteps:\n  only: {}\n")
    secret = "hunter2-secret-value"
    report = tmp_path / f"{secret}.json"  # the command line carries the secret
    env = {**os.environ, "PYTHONPATH": str(tmp_path), "HF_TOKEN": secret}
    done = subprocess.run([sys.executable, "-m", "initorch", "--plugin", "tiny", "run",
                           "--profile", str(profile), "--report", str(report)],
                          capture_output=True, text=True, cwd=tmp_path, env=env, check=False)
    assert done.returncode == 0, done.stderr
    data = json.loads(report.read_text())
    names = [p["name"] for p in data["timeline"]["phases"]]
    assert names == ["interpreter start", "imports", "parse arguments", "plugins",
                     "logging and rank", "plan", "prepare run", "run set-up", "only",
                     "teardown only"]
    assert secret not in report.read_text()
    plot, trace = tmp_path / "plot.html", tmp_path / "trace.json"
    assert main(["timeline", str(report), "--plot", str(plot), "--trace", str(trace)]) == 0
    out = capsys.readouterr().out
    assert "critical chain" in out and "interpreter start" in out
    assert plot.read_text().startswith("<!DOCTYPE html>")
    assert json.loads(trace.read_text())["traceEvents"]
    assert main(["timeline", "--compare", str(report), str(report)]) == 0
    assert "+0.000s" in capsys.readouterr().out


def test_compare_takes_two_files(tmp_path, capsys):
    path = tmp_path / "t.json"
    path.write_text(json.dumps(two_processes().to_dict()))
    assert main(["timeline", "--compare", str(path)]) == 2
    assert "--compare takes exactly two files" in capsys.readouterr().err
    assert main(["timeline", str(path)]) == 0
    assert "ready after 5.000s" in timeline_text(two_processes())


@given(spans=st.lists(st.tuples(st.integers(0, 20), st.integers(0, 5), st.integers(1, 3)),
                      min_size=1, max_size=12))
def test_every_chain_ends_and_goes_back_in_time(spans):
    # Zero-length phases at one moment included (marks recorded together).
    timeline = Timeline([Process(pid, f"p{pid}") for pid in (1, 2, 3)],
                        [phase(f"x{index}", start, start + length, pid=pid)
                         for index, (start, length, pid) in enumerate(spans)])
    chain = timeline.with_gaps().critical_chain()
    assert len(chain) == len({id(p) for p in chain})
    for later, earlier in itertools.pairwise(chain):
        assert earlier.end <= later.start + 1e-9


def test_the_outputs_are_redacted_as_data_and_stay_well_formed(tmp_path, capsys):
    import xml.etree.ElementTree as ElementTree

    secret = "sk-live-0123456789"
    timeline = two_processes()
    timeline.processes[0] = Process(1, "launcher", ("server", "--api-key", secret))
    timeline.phases.append(phase(f"connect with {secret}", 1.2, 1.3))
    path = tmp_path / "t.json"
    path.write_text(json.dumps(timeline.to_dict()))
    svg, page, trace = tmp_path / "t.svg", tmp_path / "t.html", tmp_path / "trace.json"
    for plot in (svg, page):
        assert main(["timeline", str(path), "--plot", str(plot), "--trace", str(trace)]) == 0
    out = capsys.readouterr().out
    for text in (out, svg.read_text(), page.read_text(), trace.read_text()):
        assert secret not in text
    ElementTree.fromstring(svg.read_text())  # the marker is escaped like any text
    assert "connect with &lt;redacted&gt;" in svg.read_text()
