"""The start-up timeline of a real SGLang 0.5.23 launch (verify mode, tp=2, HiCache with
the Mooncake Store), every process, from its start to the first 200 of
``/health_generate``: one launch for the whole module, read back as the files each
process wrote, as ``initorch sglang timeline`` prints and draws it, and in chromium."""

from __future__ import annotations

import json
import logging
import os
import subprocess
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

from initorch.kit import ProcessRecorder, read_launch, written_ready
from initorch.reporting.redaction import REDACTED
from initorch.reporting.timeline import NOT_MEASURED, Phase, Timeline
from tests.e2e.test_timeline_browser import assert_launch_drawn
from tests.sglang.server import (
    BIND,
    Master,
    Server,
    assert_nothing_left,
    free_port,
    initorch_in_sglang,
    launch_arguments,
    report_paths,
    server_environment,
    sglang_venv,
)

TOKEN = "sk-initorch-test-0123456789"
"""An API key on the launch line (SGLang's ``--api-key``): it must be in no file."""
STEPS = ["bind_cpu_threads", "set_device", "init_shared_mooncake_transfer_engine",
         "init_torch_distributed", "init_model_parallel", "memory_baseline", "sglang_load_model",
         "sglang_alloc_kv_pool", "alloc_host_mem_pool", "init_mooncake_store",
         "register_mem_pool_host"]
"""What verify mode observes in every rank of this launch (its recorder's calls, reused)."""


@dataclass
class Launch:
    server: Server
    folder: Path  # the timeline directory
    timeline: Timeline


@pytest.fixture(scope="module")
def launch(tiny_model: Path, master: Master, tmp_path_factory: pytest.TempPathFactory,
           sglang_python: Path) -> Iterator[Launch]:
    """One verify-mode launch with a timeline, stopped once the launcher wrote the ready
    moment (its file is rewritten at the first 200 of the probe)."""
    work = tmp_path_factory.mktemp("sglang-timeline")
    folder = work / "timeline"
    port = free_port()
    environ = server_environment(master, {"INITORCH_SGLANG": "verify",
                                          "INITORCH_SGLANG_TIMELINE": str(folder),
                                          **report_paths(work), **BIND})
    log = work / "server.log"
    with log.open("wb") as out:
        process = subprocess.Popen(
            [str(sglang_venv() / "bin" / "python"), "-m", "sglang.launch_server",
             *launch_arguments(tiny_model, port), "--api-key", TOKEN],
            env=environ, cwd=work, stdout=out, stderr=subprocess.STDOUT, start_new_session=True)
    server = Server(process, port, log, time.monotonic())
    try:
        server.wait_ready()
        deadline = time.monotonic() + 60
        while time.monotonic() < deadline and written_ready(folder, process.pid) is None:
            time.sleep(0.2)
    finally:
        server.stop()
    assert_nothing_left(server)
    yield Launch(server, folder, read_launch(folder))


def own(timeline: Timeline, name: str) -> list[int]:
    return [p.pid for p in timeline.processes if p.name.startswith(name)]


def phase(timeline: Timeline, pid: int, name: str) -> Phase:
    [found] = [p for p in timeline.phases if p.process == pid and p.name == name]
    return found


def inside(inner: Phase, outer: Phase) -> bool:
    return outer.start <= inner.start <= inner.end <= outer.end


def test_every_process_of_the_launch_recorded_itself(launch: Launch) -> None:
    timeline = launch.timeline
    launcher, = own(timeline, "SGLang launcher")
    assert launcher == launch.server.process.pid
    assert len(own(timeline, "SGLang scheduler, rank")) == 2
    assert len(own(timeline, "SGLang detokenizer")) == 1
    for pid in own(timeline, "SGLang"):
        first, loaded = (phase(timeline, pid, name)
                         for name in ("interpreter start and imports", "plugin load"))
        assert first.end <= loaded.start < loaded.end  # from /proc to the plugin, then it
        assert first.source and "load_plugins" in first.source
        process = timeline.process(pid)
        assert process.overhead is not None and process.overhead > 0  # measured in it
        assert process.ready is not None


def test_a_rank_is_sglangs_own_functions_and_the_steps_verify_observed(launch: Launch) -> None:
    timeline = launch.timeline
    for pid in own(timeline, "SGLang scheduler, rank"):
        names = [p.name for p in timeline.phases if p.process == pid]
        for step in STEPS:
            assert names.count(step) == 1, step  # reused from verify, not recorded twice
        constructor = phase(timeline, pid, "Scheduler.__init__")
        assert constructor.source and \
            constructor.source.endswith("sglang/srt/managers/scheduler.py:465")
        worker = phase(timeline, pid, "Scheduler.init_model_worker")
        pools = phase(timeline, pid, "build_kv_cache")
        assert inside(worker, constructor) and inside(pools, constructor)
        assert worker.end <= pools.start
        for step in ("sglang_load_model", "sglang_alloc_kv_pool"):  # weights, KV pools
            assert inside(phase(timeline, pid, step), worker)
        for step in ("alloc_host_mem_pool", "init_mooncake_store", "register_mem_pool_host"):
            assert inside(phase(timeline, pid, step), pools)  # HiCache and the store
        store = phase(timeline, pid, "init_mooncake_store")
        assert store.after and store.kind == "step"  # the plan's edges, for the chain
        first_batch = phase(timeline, pid, "Scheduler.run_batch (first batch)")
        assert constructor.end <= first_batch.start  # the warm-up, after the rank was up
        assert timeline.process(pid).ready == pytest.approx(constructor.end, abs=0.05)


def test_the_launcher_waits_for_the_ranks_and_is_ready_at_the_probes_first_200(
        launch: Launch) -> None:
    timeline = launch.timeline
    launcher, = own(timeline, "SGLang launcher")
    ranks = own(timeline, "SGLang scheduler, rank")
    waited = phase(timeline, launcher, "_wait_for_scheduler_ready")
    for pid in ranks:
        assert phase(timeline, pid, "Scheduler.__init__").end <= waited.end
    warmup = phase(timeline, launcher, "_wait_and_warmup")
    assert waited.end <= warmup.start and warmup.thread != "MainThread"
    probe = phase(timeline, launcher, "health_generate (first 200)")
    assert probe.source and probe.source.endswith("sglang/srt/entrypoints/http_server.py:721")
    for pid in ranks:
        assert phase(timeline, pid, "Scheduler.run_batch (first batch)").end <= probe.end
    assert timeline.ready == probe.end == timeline.ready_at()
    assert timeline.process(launcher).ready == probe.end
    serving = phase(timeline, launcher, "_setup_and_run_http_server")
    assert serving.status == "running"  # it serves on: open when the file was written


def test_what_no_plugin_records_is_labelled_not_measured(launch: Launch) -> None:
    timeline = launch.timeline
    recorded = set(own(timeline, "SGLang"))
    others = [p for p in timeline.processes if p.pid not in recorded]
    for process in others:  # seen from /proc only: its start, then nothing guessed
        [unseen] = [p for p in timeline.phases if p.process == process.pid]
        assert unseen.kind == NOT_MEASURED and unseen.source == \
            f"/proc/{process.pid}/stat starttime"
    filled = timeline.with_gaps()
    launcher, = own(timeline, "SGLang launcher")
    gaps = [p for p in filled.phases if p.process == launcher and not p.measured]
    assert gaps, "the launcher's stretches no hook covers (argument parsing) are labelled"
    assert all(p.name == NOT_MEASURED for p in gaps)


def test_the_token_on_the_launch_line_is_in_no_file(launch: Launch) -> None:
    launcher = launch.timeline.process(launch.server.process.pid)
    assert "--api-key" in launcher.argv
    assert launcher.argv[launcher.argv.index("--api-key") + 1] == REDACTED
    for path in launch.folder.iterdir():
        assert TOKEN not in path.read_text(), path


def test_initorch_sglang_timeline_prints_the_chain_and_draws_the_launch(
        launch: Launch, tmp_path: Path) -> None:
    done = initorch_in_sglang("sglang", "timeline", str(launch.folder), "--trace",
                              str(tmp_path / "trace.json"), "--plot",
                              str(tmp_path / "launch.html"))
    assert done.returncode == 0, done.stderr
    text = done.stdout
    assert text.startswith("ready after ")
    chain = text.split("critical chain (what the ready moment waited for):\n")[1]
    assert chain.splitlines()[0].strip().startswith("health_generate (first 200)")
    assert "blame (longest first):" in text and "recording 0.0" in text
    assert f"{NOT_MEASURED} (" in text
    events = json.loads((tmp_path / "trace.json").read_text())["traceEvents"]
    pids = {event["pid"] for event in events if event.get("ph") == "X"}
    assert pids == {process.pid for process in launch.timeline.processes}
    for path in (tmp_path / "trace.json", tmp_path / "launch.html", tmp_path / "launch.svg"):
        assert TOKEN not in path.read_text()
    assert_launch_drawn(tmp_path / "launch.html", launch.timeline,
                        {"Scheduler.__init__", "health_generate (first 200)",
                         "sglang_load_model", NOT_MEASURED})


def test_a_constructor_that_fails_is_written_failed_and_never_up(tmp_path: Path) -> None:
    from initorch_sglang.timeline import LaunchRecording

    recording = LaunchRecording(str(tmp_path), "scheduler", ProcessRecorder())

    def constructor(scheduler: object, server_args: object) -> None:
        raise RuntimeError("no memory for the KV pool")

    def verify_hook(original: Callable[..., Any], *args: Any) -> Any:
        return original(*args)

    with pytest.raises(RuntimeError, match="no memory"):
        recording.frame_scheduler(verify_hook)(constructor, object(), object())
    [written] = tmp_path.iterdir()
    timeline = read_launch(tmp_path)
    assert written.name == f"process-{os.getpid()}.json"
    [framed] = [p for p in timeline.phases if p.name == "Scheduler.__init__"]
    assert framed.status == "failed"
    assert timeline.processes[0].ready is None  # it never came up


def test_a_timeline_that_cannot_be_written_is_one_warning_and_sglang_goes_on(
        tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    from initorch_sglang.timeline import LaunchRecording

    blocked = tmp_path / "a-file"
    blocked.write_text("")
    recording = LaunchRecording(str(blocked / "timeline"), "detokenizer", ProcessRecorder())
    with caplog.at_level(logging.WARNING, logger="initorch_sglang"):
        recording.write_up()
    [line] = [r.getMessage() for r in caplog.records]
    assert line.startswith("initorch-sglang: cannot write the start-up timeline to ")
