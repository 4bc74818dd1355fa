"""``initorch run`` as a user runs it: exit codes, report and trace files, log formats."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from tests.conftest import initorch_command, run_python
from tests.helpers_run import json_lines

NO_MOONCAKE = ("--profile", "cpu", "--set", "mooncake.enabled=false")
CPU_STEPS = ["import_backend", "set_device", "alloc_host_mem_pool", "init_torch_distributed"]


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
    assert sorted(e["name"] for e in slices) == sorted(CPU_STEPS)
    assert all({"ts", "dur", "pid", "tid"} <= set(e) for e in slices)
    named = {e["tid"] for e in trace["traceEvents"] if e["name"] == "thread_name"}
    assert {e["tid"] for e in slices} <= named
    if executor == "parallel":
        assert {s["thread"] for s in report["steps"] if s["thread"]} <= {
            f"initorch-worker-{i}" for i in range(4)}


def test_json_log_format_is_one_event_per_line():
    result = run(*NO_MOONCAKE, "--log-format", "json")
    assert result.returncode == 0, result.stderr[-3000:]
    lines = result.stderr.splitlines()
    events = [json.loads(line) for line in lines]  # no line is anything but JSON
    names = [e["event"] for e in events]
    assert names[0] == "run_started"
    assert "run_finished" in names
    assert all(e["profile"] == "base+cpu" and e["rank"] == 0 for e in events)
    assert {e["step"] for e in events if e["event"] == "step_succeeded"} == set(CPU_STEPS)


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
    assert table.count("would_run") == 6  # every planned step; verify_transfer is off


def test_a_diagnosed_failure_exits_1_with_the_diagnosis_as_the_last_line(tmp_path: Path):
    # Rank 1 of 2 pointed at a rendezvous nobody hosts: the process group cannot form.
    report_path = tmp_path / "run.json"
    result = run(*NO_MOONCAKE, "--set", "distributed.timeout_s=2", "--report", str(report_path),
                 env={"WORLD_SIZE": "2", "RANK": "1", "LOCAL_RANK": "1",
                      "MASTER_ADDR": "127.0.0.1", "MASTER_PORT": "1"})
    assert result.returncode == 1, result.stderr[-3000:]
    last = result.stderr.rstrip("\n").splitlines()[-1]
    assert last.startswith("diagnosis process-group-timeout: ")
    assert "Cause: " in last and "Remedy: " in last
    report = json.loads(report_path.read_text())
    assert report["ok"] is False and report["rank"] == 1
    failed = next(s for s in report["steps"] if s["status"] == "failed")
    assert failed["step"] == "init_torch_distributed"
    assert failed["diagnosis"]["id"] == "process-group-timeout"
    assert "FAILED (1 step(s))" in result.stdout.splitlines()[0]


def test_an_unknown_failure_is_printed_as_it_is():
    # A rendezvous host that does not resolve: valid as a setting, fails only at run time.
    result = run(*NO_MOONCAKE, "--set", "distributed.master_addr=no-such-host.invalid",
                 "--log-format", "json")
    assert result.returncode == 1, result.stderr[-3000:]
    lines = result.stderr.rstrip("\n").splitlines()
    assert lines[-1].startswith("initorch: step 'init_torch_distributed' failed: gaierror: ")
    assert lines[-1].endswith(" (no known diagnosis)")
    events = [json.loads(line) for line in lines[:-1]]
    [failed] = [e for e in events if e["event"] == "step_failed"]
    assert (failed["step"], failed["diagnosis"]) == ("init_torch_distributed", None)
    torn = [e["step"] for e in events if e["event"] == "teardown_started"]
    assert torn == ["alloc_host_mem_pool"]  # the failed step has nothing to tear down


def test_debug_prints_the_traceback_of_the_failed_step():
    # A rendezvous host that does not resolve: valid as a setting, fails only at run time
    # (an unknown allocator is refused at plan time now).
    result = run(*NO_MOONCAKE, "--set", "distributed.master_addr=no-such-host.invalid",
                 "--debug")
    assert result.returncode == 1, result.stderr[-3000:]
    step = "init_torch_distributed"
    shown = result.stderr[result.stderr.index(f"initorch: step '{step}' failed with:"):]
    _, traceback_line, *rest = shown.splitlines()
    assert traceback_line == "Traceback (most recent call last):"
    assert any(line.strip().startswith('File "') and "distributed.py" in line for line in rest)
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
    assert result.stderr.strip() == ("initorch: error: environment variable RANK='first' is not "
                                     "a whole number >= 0 (check the variables torchrun "
                                     "exports)")


def test_a_report_in_a_missing_folder_is_refused_before_running(tmp_path):
    result = run(*NO_MOONCAKE, "--report", str(tmp_path / "missing" / "run.json"))
    assert result.returncode == 2
    assert result.stderr.strip().endswith(
        "the folder does not exist (create it first, or write the file elsewhere)")
    assert "run_started" not in result.stderr  # nothing ran
