"""The real SGLang 0.5.23 server started through initorch on this CPU: tp=2, HiCache with
the Mooncake Store backend, a managed master, the tiny model (``tests/sglang/server.py``)."""

from __future__ import annotations

import json
import re
import socket
import subprocess
import sys
from pathlib import Path

import pytest

from tests.sglang.server import (
    BIND,
    REGRESSION_SITE,
    SITE,
    Master,
    assert_nothing_left,
    report_paths,
    running,
    stock_generation,
)

pytestmark = pytest.mark.e2e

# SGLang 0.5.23's start-up on a tp=2 CPU run, as initorch's step names
# (../shared/SGLANG.md: bootstrap.py init_parallel_runtime, model_runner.py, HiCache).
SGLANG_ORDER = ["bind_cpu_threads", "set_device", "init_shared_mooncake_transfer_engine",
                "init_torch_distributed", "init_model_parallel", "set_device",
                "memory_baseline", "sglang_load_model", "sglang_alloc_kv_pool",
                "alloc_host_mem_pool", "init_mooncake_store", "register_mem_pool_host"]


def reports(tmp_path: Path) -> list[dict]:
    return [json.loads((tmp_path / f"report-{rank}.json").read_text()) for rank in (0, 1)]


@pytest.fixture(scope="module")
def stock_tokens(tiny_model: Path, master: Master,
                 tmp_path_factory: pytest.TempPathFactory) -> list[int]:
    """Stock SGLang's greedy tokens on this launch line."""
    return stock_generation(tiny_model, master, tmp_path_factory.mktemp("stock") / "stock.log")[0]


def test_verify_mode_records_and_checks_a_real_start_that_serves(
        tiny_model: Path, master: Master, tmp_path: Path, stock_tokens: list[int]) -> None:
    statuses = [str(tmp_path / f"status-{rank}.json") for rank in range(2)]
    environ = {"INITORCH_SGLANG": "verify", **BIND, **report_paths(tmp_path),
               "INITORCH_SGLANG_STATUS": str(tmp_path / "status-{rank}.json")}
    with running(tiny_model, master, environ, tmp_path / "server.log") as server:
        server.wait_ready()
        tokens = server.generate()
        # Each rank's status file, read as a probe reads it while the server serves.
        probe = [sys.executable, "-m", "initorch", "status", "--ready", *statuses]
        assert subprocess.run(probe, check=False, capture_output=True).returncode == 0
    assert tokens == stock_tokens
    assert_nothing_left(server)
    for rank, status in enumerate(statuses):
        doc = json.loads(Path(status).read_text())
        assert (doc["rank"], doc["state"], doc["steps_done"]) == (rank, "ready",
                                                                  len(set(SGLANG_ORDER)))
    gone = subprocess.run(probe, check=False, capture_output=True)
    assert gone.returncode == 3, gone.stdout  # stale: its processes are gone
    log = server.text()
    assert len(re.findall(r"initorch-sglang: verify ok: 11 of \d+ planned steps", log)) == 2
    assert "installed the profile's plain (SGLang's ALLOC_MEMORY_FUNCS has no cpu entry" in log
    for rank, report in enumerate(reports(tmp_path)):
        assert report["rank"] == rank and report["ok"] and report["executor"] == "sglang-verify"
        calls = report["sglang"]["calls"]
        assert [call["step"] for call in calls] == SGLANG_ORDER
        assert {call["thread"] for call in calls} == {"MainThread"}
        # The device of a thread is what set_device was seen to bind there (no query).
        assert [call["device"] for call in calls] == [None] + [f"cpu:{rank}"] * (len(calls) - 1)
        # The vendor calls, where they are made: the shared engine on run_with_deadline's
        # daemon thread, where set_device never ran (no hazard on a CPU: its context is
        # not per thread), then the host pool and the store on the main thread.
        vendor = report["sglang"]["vendor_calls"]
        assert [made["call"] for made in vendor] == [
            "Mooncake TransferEngine.initialize", "host registration alloc_without_pinning",
            "Mooncake MooncakeDistributedStore.setup",
            *["Mooncake MooncakeDistributedStore.register_buffer"] * (len(vendor) - 3)]
        engine, *rest = vendor
        assert (engine["device"], engine["daemon"], engine["returned"]) == (None, True, 0)
        assert engine["thread_entry"] == ("run_with_deadline.<locals>._target "
                                          "(srt/utils/common.py:3759)")
        assert {(made["thread"], made["device"]) for made in rest} == {
            ("MainThread", f"cpu:{rank}")}
        assert rest[1]["called_from"].startswith(
            "srt/mem_cache/storage/mooncake_store/mooncake_store.py:")
        steps = {step["step"]: step for step in report["steps"]}
        assert all(steps[name]["status"] == "succeeded" for name in SGLANG_ORDER)
        assert steps["rendezvous"]["status"] == "skipped"  # SGLang has no such call
        assert report["sglang"]["violations"] == []
        assert report["sglang"]["host_allocator"] == {
            "device": "cpu", "allocator": "plain", "installed_by_initorch": True}
        assert report["critical_chain"][0] == "register_mem_pool_host"
    merged = tmp_path / "merged.json"
    subprocess.run([sys.executable, "-m", "initorch", "trace", "merge", "-o", str(merged),
                    str(tmp_path / "trace-0.json"), str(tmp_path / "trace-1.json")], check=True)
    names = {event["args"]["name"] for event in json.loads(merged.read_text())["traceEvents"]
             if event.get("name") == "process_name"}
    assert len(names) == 2


def test_drive_mode_runs_the_parallel_runtime_and_gives_stock_tokens(
        tiny_model: Path, master: Master, tmp_path: Path, stock_tokens: list[int]) -> None:
    # No SGLANG_CPU_OMP_THREADS_BIND: drive mode fills it in from initorch's core split.
    with running(tiny_model, master, {"INITORCH_SGLANG": "drive", **report_paths(tmp_path)},
                 tmp_path / "drive.log") as driven:
        driven.wait_ready()
        drive_tokens = driven.generate()
    assert_nothing_left(driven)
    assert drive_tokens == stock_tokens
    log = driven.text()
    assert log.count("cpu_split_filled_in") == 2 and log.count("plan_agreed") == 2
    assert log.count("initorch-sglang: drive ok") == 2
    for report in reports(tmp_path):
        assert report["ok"] and report["executor"] == "sglang-drive"
        drive = report["sglang"]["drive"]
        ran = {step["step"]: step["status"] for step in drive["steps"]}
        assert ran["rendezvous"] == ran["init_torch_distributed"] == "succeeded"
        assert ran["sglang_load_model"] == "skipped"  # SGLang's own, observed
        assert [call["step"] for call in report["sglang"]["calls"]
                if call["step"] != "set_device"] == [s for s in SGLANG_ORDER
                                                      if s != "set_device"]
        assert not [td for td in drive["teardown"] if td["step"] != "rendezvous"]


def test_verify_mode_stops_an_engine_built_after_the_process_group(
        tiny_model: Path, master: Master, tmp_path: Path) -> None:
    environ = {"INITORCH_SGLANG": "verify", **BIND, **report_paths(tmp_path)}
    with running(tiny_model, master, environ, tmp_path / "server.log",
                 site=(SITE, REGRESSION_SITE)) as server:
        code = server.wait_exit()
    assert code != 0
    assert_nothing_left(server)
    log = server.text()
    assert ("order violation: SGLang 0.5.23 called init_shared_mooncake_transfer_engine but "
            "init_torch_distributed had already run") in log
    assert ("the shared Mooncake engine, then _init_parallel_groups "
            "(init_distributed_environment)") in log  # the profile's reason
    # The first rank to see it stops; SGLang then ends the other, which may not get as far.
    written = [json.loads(path.read_text()) for path in sorted(tmp_path.glob("report-*.json"))]
    assert written
    for report in written:
        assert not report["ok"]
        assert report["sglang"]["violations"]
        failed = [step["step"] for step in report["steps"] if step["status"] == "failed"]
        assert failed == ["init_shared_mooncake_transfer_engine"]


def test_drive_mode_ends_a_failing_step_with_its_diagnosis(
        tiny_model: Path, master: Master, tmp_path: Path) -> None:
    with socket.socket() as taken:  # the rendezvous address is someone else's
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        address = f"127.0.0.1:{taken.getsockname()[1]}"
        environ = {"INITORCH_SGLANG": "drive", "INITORCH_SGLANG_RENDEZVOUS": address,
                   "INITORCH_SGLANG_SET": "distributed.join_timeout_s=20",
                   **report_paths(tmp_path)}
        with running(tiny_model, master, environ, tmp_path / "server.log") as server:
            code = server.wait_exit()
    assert code != 0
    assert_nothing_left(server)
    log = server.text()
    assert "initorch-sglang drive: step 'rendezvous' failed" in log
    assert "Scheduler hit an exception" in log  # then SGLang's own error path
