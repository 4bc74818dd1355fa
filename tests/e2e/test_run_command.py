"""``initorch run`` as a user runs it: exit codes, report and trace files, log formats."""

from __future__ import annotations

import json
import signal
from pathlib import Path

import pytest

from tests.support.commands import initorch_command, run_python
from tests.support.runs import json_lines

NO_MOONCAKE = ("--profile", "cpu", "--set", "mooncake.enabled=false")
CPU_STEPS = ["import_backend", "rendezvous", "set_device", "alloc_host_mem_pool",
             "init_torch_distributed"]


def run(*args: str, env: dict[str, str] | None = None, simulated: bool = False):
    return initorch_command("run", *args, env=env, simulated=simulated)


def statuses(report: dict) -> dict[str, str]:
    return {step["step"]: step["status"] for step in report["steps"]}


@pytest.mark.parametrize("executor", ["sequential", "parallel"])
def test_run_writes_a_valid_report_and_trace(tmp_path: Path, executor: str):
    report_path, trace_path = tmp_path / "run.json", tmp_path / "trace.json"
    result = run(*NO_MOONCAKE, "--executor", executor, "--report", str(report_path),
                 "--trace", str(trace_path))
    assert result.returncode == 0, result.stderr[-3000:]
    assert result.stdout.startswith("run: ok in ")
    assert f"({executor}, rank 0, device cpu" in result.stdout.splitlines()[0]

    report = json.loads(report_path.read_text())
    assert (report["ok"], report["executor"], report["profiles"]) == (True, executor,
                                                                     ["base", "cpu"])
    assert {name: statuses(report)[name] for name in CPU_STEPS} == dict.fromkeys(
        CPU_STEPS, "succeeded")
    assert statuses(report)["init_shared_mooncake_transfer_engine"] == "skipped"
    assert report["critical_chain"][-1] == "import_backend"
    assert {entry["status"] for entry in report["teardown"]} <= {"succeeded"}

    trace = json.loads(trace_path.read_text())
    slices = [e for e in trace["traceEvents"] if e["ph"] == "X"]
    assert sorted(e["name"] for e in slices if e["cat"] == "initorch.step") == sorted(CPU_STEPS)
    torn = [e["name"] for e in slices if e["cat"] == "initorch.teardown"]
    assert torn == [f"teardown {entry['step']}" for entry in report["teardown"]] and torn
    assert all({"ts", "dur", "pid", "tid"} <= set(e) for e in slices)
    named = {e["tid"] for e in trace["traceEvents"] if e["name"] == "thread_name"}
    assert {e["tid"] for e in slices} <= named
    if executor == "parallel":
        assert {s["thread"] for s in report["steps"] if s["thread"]} <= {
            f"initorch-worker-{i}" for i in range(4)}


def test_json_log_format_is_one_event_per_line_and_the_summary_is_one_too():
    result = run(*NO_MOONCAKE, "--log-format", "json")
    assert result.returncode == 0, result.stderr[-3000:]
    assert result.stdout == ""  # the run table is the run_summary event
    lines = result.stderr.splitlines()
    events = [json.loads(line) for line in lines]  # no line is anything but JSON
    names = [e["event"] for e in events]
    assert names[0] == "run_started"
    assert "run_finished" in names
    assert all(e["profile"] == "base+cpu" and e["rank"] == 0 for e in events)
    assert {e["step"] for e in events if e["event"] == "step_succeeded"} == set(CPU_STEPS)
    summary = events[-1]
    assert (summary["event"], summary["ok"], summary["executor"]) == (
        "run_summary", True, "sequential")
    assert {s["step"]: s["status"] for s in summary["steps"]}["set_device"] == "succeeded"
    assert summary["critical_chain"] and summary["blame"] and summary["teardown"]


def test_json_log_format_turns_python_warnings_into_events(tmp_path: Path):
    # A sitecustomize that warns once the run has begun (when the first step starts).
    (tmp_path / "sitecustomize.py").write_text(
        "import logging, warnings\n"
        "class Warn(logging.Handler):\n"
        "    def emit(self, record):\n"
        "        if getattr(record, 'event', None) == 'step_started':\n"
        "            warnings.warn('probe warning', DeprecationWarning, stacklevel=1)\n"
        "logging.getLogger('initorch').addHandler(Warn())\n"
        "warnings.simplefilter('always')\n", encoding="utf-8")
    result = run(*NO_MOONCAKE, "--log-format", "json", env={"PYTHONPATH": str(tmp_path)})
    assert result.returncode == 0, result.stderr[-3000:]
    events = [json.loads(line) for line in result.stderr.splitlines()]
    warned = [e for e in events if e["event"] == "python_warning"]
    assert warned and warned[0]["text"] == "probe warning"
    assert (warned[0]["level"], warned[0]["category"]) == ("warning", "DeprecationWarning")
    assert warned[0]["source"].endswith("sitecustomize.py:5")
    assert warned[0]["source"].startswith(("./", "/"))


def test_json_log_format_reports_bad_input_as_an_event():
    result = run("--profile", "nope", "--log-format", "json")
    assert (result.returncode, result.stdout) == (2, "")
    [error] = [json.loads(line) for line in result.stderr.splitlines()]
    assert (error["event"], error["level"], error["exit_code"]) == ("error", "error", 2)
    assert "unknown profile 'nope'" in error["text"]


def test_console_log_format_is_the_default():
    result = run(*NO_MOONCAKE)
    assert result.returncode == 0, result.stderr[-3000:]
    assert "run_started" in result.stderr
    assert not json_lines(result.stderr)
    assert "\x1b[" not in result.stderr  # not a terminal: no colours


def test_dry_run_runs_and_imports_nothing():
    result = run_python("""
        import sys
        from initorch.cli import main
        code = main(["run", "--profile", "cpu", "--executor", "dry-run"])
        heavy = sorted(m for m in ("torch", "mooncake", "mooncake.engine") if m in sys.modules)
        print("RESULT", code, heavy)
    """)
    assert result.returncode == 0, result.stderr[-3000:]
    assert result.stdout.splitlines()[-1] == "RESULT 0 []"
    table = result.stdout.split("\n\n")[0]
    assert "(dry-run, rank 0, device cpu" in table
    assert table.count("would_run") == 10  # every planned step; verify_transfer is off


def test_a_diagnosed_failure_exits_1_with_the_diagnosis_as_the_last_line(tmp_path: Path):
    # Rank 1 of 2 pointed at a rendezvous nobody hosts: the job's store cannot be reached.
    report_path = tmp_path / "run-1.json"
    result = run(*NO_MOONCAKE, "--set", "distributed.join_timeout_s=2",
                 "--report", str(tmp_path / "run-{rank}.json"),
                 env={"WORLD_SIZE": "2", "RANK": "1", "LOCAL_RANK": "1",
                      "MASTER_ADDR": "127.0.0.1", "MASTER_PORT": "1"})
    assert result.returncode == 1, result.stderr[-3000:]
    last = result.stderr.rstrip("\n").splitlines()[-1]
    assert last.startswith("diagnosis process-group-timeout: ")
    assert "Cause: " in last and "Remedy: " in last
    report = json.loads(report_path.read_text())
    assert report["ok"] is False and report["rank"] == 1
    failed = next(s for s in report["steps"] if s["status"] == "failed")
    assert failed["step"] == "rendezvous"
    assert failed["diagnosis"]["id"] == "process-group-timeout"
    assert "FAILED (1 step(s))" in result.stdout.splitlines()[0]


@pytest.mark.parametrize(("options", "torn"), [((), []),
                                               (("--keep-going",), ["alloc_host_mem_pool"])],
                         ids=["fail-fast", "keep-going"])
def test_an_unknown_failure_is_printed_as_it_is(options: tuple[str, ...], torn: list[str]):
    # A rendezvous host that does not resolve: valid as a setting, fails only at run time.
    result = run(*NO_MOONCAKE, "--set", "distributed.master_addr=no-such-host.invalid",
                 "--log-format", "json", *options)
    assert result.returncode == 1, result.stderr[-3000:]
    events = [json.loads(line) for line in result.stderr.splitlines()]
    last = events[-1]
    assert (last["event"], last["level"], last["step"]) == ("run_failed", "error", "rendezvous")
    assert last["text"].startswith("initorch: step 'rendezvous' failed: gaierror: ")
    assert last["text"].endswith(" (no known diagnosis)")
    assert events[-2]["event"] == "run_summary" and events[-2]["ok"] is False
    [failed] = [e for e in events if e["event"] == "step_failed"]
    assert (failed["step"], failed["diagnosis"]) == ("rendezvous", None)
    # The failed step has nothing to tear down; failing fast, the pool never started.
    assert [e["step"] for e in events if e["event"] == "teardown_started"] == torn


def test_a_world_of_two_without_an_address_is_a_usage_error_in_initorchs_own_words():
    env = {"WORLD_SIZE": "2", "RANK": "0", "LOCAL_RANK": "0", "MASTER_ADDR": "",
           "MASTER_PORT": ""}
    result = run(*NO_MOONCAKE, env=env)
    assert result.returncode == 2, result.stderr[-3000:]
    last = result.stderr.rstrip("\n").splitlines()[-1]
    assert last == (
        "initorch: step 'rendezvous' failed: rank 0 of 2: no launcher says where the ranks "
        "meet, and distributed.master_port is 0 (pass --dist-init-addr HOST:PORT "
        "(in code: launch=LaunchArguments(...)), start the ranks with torchrun or srun, or "
        "set distributed.master_addr and distributed.master_port)")
    assert "no known diagnosis" not in result.stderr


def test_several_nodes_without_a_node_rank_are_refused_before_anything_runs():
    result = run(*NO_MOONCAKE, "--dist-init-addr", "127.0.0.1:29500", "--nnodes", "2")
    assert (result.returncode, result.stdout) == (2, ""), result.stderr[-3000:]
    assert result.stderr.splitlines() == [
        "initorch: error: --nnodes 2 needs --node-rank: which one of the 2 is this process? "
        "(pass --node-rank N (0 to 1), a different one to each process)"]


def test_master_addr_and_port_in_a_world_of_one_are_used():
    import socket

    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    result = run(*NO_MOONCAKE, "--log-format", "json",
                 env={"MASTER_ADDR": "127.0.0.1", "MASTER_PORT": str(port)})
    assert result.returncode == 0, result.stderr[-3000:]
    [joining] = [e for e in json_lines(result.stderr) if e["event"] == "job_store_joining"]
    assert (joining["address"], joining["world_size"]) == (f"127.0.0.1:{port}", 1)


def test_debug_prints_the_traceback_of_the_failed_step():
    # A rendezvous host that does not resolve: valid as a setting, fails only at run time
    # (an unknown allocator is refused at plan time now).
    result = run(*NO_MOONCAKE, "--set", "distributed.master_addr=no-such-host.invalid",
                 "--debug")
    assert result.returncode == 1, result.stderr[-3000:]
    step = "rendezvous"
    shown = result.stderr[result.stderr.index(f"initorch: step '{step}' failed with:"):]
    _, traceback_line, *rest = shown.splitlines()
    assert traceback_line == "Traceback (most recent call last):"
    assert any(line.strip().startswith('File "') and "rendezvous.py" in line for line in rest)
    assert rest[-2].startswith("socket.gaierror: ")
    assert rest[-1].startswith(f"initorch: step '{step}' failed: gaierror")


@pytest.mark.parametrize("workers", ["0", "-2"])
def test_a_bad_worker_count_is_a_usage_error(workers: str):
    result = run(*NO_MOONCAKE, "--executor", "parallel", "--workers", workers)
    assert result.returncode == 2, result.stderr[-3000:]
    assert "Traceback" not in result.stderr
    # argparse's usage error: the usage line, then one line naming the option.
    assert result.stderr.splitlines()[-1] == (
        f"initorch run: error: argument --workers: must be at least 1, got {workers}")


def test_a_bad_rank_variable_is_a_usage_error():
    result = run(*NO_MOONCAKE, env={"RANK": "first"})
    assert result.returncode == 2
    assert result.stderr.strip() == ("initorch: error: environment variable RANK 'first' is not "
                                     "a whole number (ASCII digits 0-9 only) (check the "
                                     "variables torchrun exports)")


def test_a_report_in_a_missing_folder_is_refused_before_running(tmp_path):
    result = run(*NO_MOONCAKE, "--report", str(tmp_path / "missing" / "run.json"))
    assert result.returncode == 2
    assert result.stderr.strip().endswith(
        "the folder does not exist (create it first, or write the file elsewhere)")
    assert "run_started" not in result.stderr  # nothing ran


@pytest.mark.parametrize(("level", "shown"), [("warning", False), ("info", True),
                                              ("debug", True)])
def test_log_level_hides_less_severe_events(level: str, shown: bool):
    result = run("--profile", "cpu", "--executor", "dry-run", "--log-level", level)
    assert result.returncode == 0, result.stderr
    assert ("run_started" in result.stderr) is shown
    assert result.stdout.startswith("run: ok in ")


INTERRUPTED_CLI = """
from initorch.plugins import Registry
from initorch.cli import main

release = threading.Event()

def block(ctx):
    print("BLOCKING", flush=True)
    release.wait()

def registry(cls, *plugins, **options):
    found = Registry()
    found.steps.add(define("first"))
    found.steps.add(define("hang", block, requires=["first"]))
    found.steps.add(define("after_hang", requires=["hang"]))
    return found

Registry.with_plugins = classmethod(registry)
profile = {profile!r}
sys.exit(main(["run", "--profile", profile, "--log-format", {log_format!r}, *{extra!r}]))
"""
BLOCKING_PROFILE = "device: {type: cpu}\nsteps:\n  first: {}\n  hang: {}\n  after_hang: {}\n"


@pytest.mark.parametrize("log_format", ["console", "json"])
def test_an_interrupted_run_still_prints_its_table(tmp_path: Path, log_format: str):
    from tests.support.runs import finish, spawn_python

    profile = tmp_path / "blocking.yaml"
    profile.write_text(BLOCKING_PROFILE, encoding="utf-8")
    proc = spawn_python(INTERRUPTED_CLI.format(profile=str(profile), log_format=log_format,
                                               extra=[]))
    assert proc.stdout is not None
    assert proc.stdout.readline() == "BLOCKING\n"
    proc.send_signal(signal.SIGINT)
    done = finish(proc)
    assert done.returncode == 130, done.stderr
    if log_format == "console":
        lines = done.stdout.splitlines()
        assert lines[0].startswith("run: INTERRUPTED (interrupted by SIGINT) in ")
        rows = {line.split()[0]: line.split()[1] for line in lines[2:5]}
        assert rows == {"first": "succeeded", "hang": "interrupted", "after_hang": "skipped"}
        assert done.stderr.splitlines()[-1] == (
            "initorch: interrupted by SIGINT; completed steps were torn down")
    else:
        assert done.stdout == ""
        events = [json.loads(line) for line in done.stderr.splitlines()]
        summary, last = events[-2], events[-1]
        assert (summary["event"], summary["interrupted"]) == ("run_summary",
                                                               "interrupted by SIGINT")
        assert {s["step"]: s["status"] for s in summary["steps"]} == {
            "first": "succeeded", "hang": "interrupted", "after_hang": "skipped"}
        assert (last["event"], last["signal"], last["exit_code"]) == (
            "run_interrupted", "SIGINT", 130)


def test_an_interrupted_step_keeps_its_duration_in_the_table_report_trace_and_chain(
        tmp_path: Path):
    import time

    from tests.support.runs import finish, spawn_python

    profile, report, trace = (tmp_path / name for name in ("blocking.yaml", "run.json",
                                                           "trace.json"))
    profile.write_text(BLOCKING_PROFILE, encoding="utf-8")
    proc = spawn_python(INTERRUPTED_CLI.format(
        profile=str(profile), log_format="console",
        extra=["--report", str(report), "--trace", str(trace)]))
    assert proc.stdout is not None
    assert proc.stdout.readline() == "BLOCKING\n"
    time.sleep(0.5)  # the step hangs this long, at least, before Ctrl-C
    proc.send_signal(signal.SIGINT)
    done = finish(proc)
    assert done.returncode == 130, done.stderr
    table = done.stdout.split("\n\n")[0].splitlines()
    [row] = [line.split() for line in table if line.startswith("  hang ")]
    assert row[1] == "interrupted" and float(row[4].rstrip("s")) >= 0.5
    assert "  after_hang  skipped" in done.stdout
    assert "not started: interrupted by SIGINT" in done.stdout
    steps = {s["step"]: s for s in json.loads(report.read_text())["steps"]}
    assert steps["hang"]["status"] == "interrupted" and steps["hang"]["duration_s"] >= 0.5
    assert json.loads(report.read_text())["critical_chain"] == ["hang", "first"]
    [span] = [e for e in json.loads(trace.read_text())["traceEvents"] if e["name"] == "hang"]
    assert span["dur"] >= 0.5e6 and span["args"]["status"] == "interrupted"
    chain = done.stdout.split("critical chain:\n")[1]
    assert chain.splitlines()[0].strip().startswith("hang @")


# A plugin that stops the CLI where it is told to and says so on stdout: while its
# plugins load (register), or while the plan is made (a device probe of --profile auto).
STALLING_PLUGIN = """
import time

class Stalling:
    device, priority = "stalling", -1000  # probed first

    def probe(self, machine, deep):
        stall("PLANNING")

def stall(where):
    print(where, flush=True)
    while True:
        time.sleep(1)

def register(registry):
    if {while_loading!r}:
        stall("LOADING")
    registry.probes.add(Stalling())
"""


def signalled_while_stalled(tmp_path: Path, stage: str, signum: int, *argv: str):
    """``initorch ARGV --plugin stalling_plugin``, sent ``signum`` once the plugin says it
    stalls at ``stage`` (never by timing luck); what it ended with."""
    import os
    import subprocess
    import sys

    from tests.support.runs import finish

    (tmp_path / "stalling_plugin.py").write_text(
        STALLING_PLUGIN.format(while_loading=stage == "LOADING"), encoding="utf-8")
    proc = subprocess.Popen(
        [str(Path(sys.executable).parent / "initorch"), *argv, "--plugin", "stalling_plugin"],
        cwd=tmp_path, env={**os.environ, "PYTHONPATH": str(tmp_path)}, text=True,
        stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    assert proc.stdout is not None
    assert proc.stdout.readline() == f"{stage}\n"
    proc.send_signal(signum)
    return finish(proc)


@pytest.mark.parametrize(("stage", "log_format", "signum"), [
    ("LOADING", "json", signal.SIGTERM),
    ("PLANNING", "json", signal.SIGTERM),
    ("LOADING", "console", signal.SIGINT),
    ("PLANNING", "console", signal.SIGTERM),
])
def test_a_signal_while_planning_ends_run_like_one_during_the_run(
        tmp_path: Path, stage: str, log_format: str, signum: int):
    # Issue 11: torchrun's SIGTERM can reach a rank before its run exists (a peer failed
    # at plan time).
    report = tmp_path / "run.json"
    done = signalled_while_stalled(tmp_path, stage, signum, "run", "--profile", "auto",
                                   "--log-format", log_format, "--report", str(report))
    name = signal.Signals(signum).name
    assert done.returncode == 128 + signum, done.stderr
    assert done.stdout == ""
    if log_format == "console":
        assert done.stderr == f"initorch: interrupted by {name}\n"
    else:
        [event] = json_lines(done.stderr)
        assert (event["event"], event["signal"], event["exit_code"]) == (
            "run_interrupted", name, 128 + signum)
        assert event["rank"] == 0  # as the run's own event does (torchrun's ranks)
    assert not report.exists()  # nothing ran, nothing is left behind


@pytest.mark.parametrize(("command", "signum"), [
    ("plan", signal.SIGINT), ("validate", signal.SIGINT), ("plan", signal.SIGTERM)])
def test_a_signal_while_plugins_load_ends_any_command_as_interrupted(
        tmp_path: Path, command: str, signum: int):
    # A plugin that raises KeyboardInterrupt itself is a failed plugin (exit 2); the user's
    # Ctrl-C while a slow plugin imports is not the plugin's failure: 128+N, one line.
    done = signalled_while_stalled(tmp_path, "LOADING", signum, command)
    assert (done.returncode, done.stdout) == (128 + signum, "")
    assert done.stderr == f"initorch: interrupted by {signal.Signals(signum).name}\n"
