"""The start-up timeline of a real vLLM 0.32.0 server (verify mode, tp=1), every
process, from its start to the first 200 of ``/health``: one launch for the whole module,
read back as the files each process wrote, as ``initorch vllm timeline`` prints and
draws it, and in chromium."""

from __future__ import annotations

import json
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest

from initorch.kit import read_launch, written_ready
from initorch.reporting.redaction import REDACTED
from initorch.reporting.timeline import NOT_MEASURED, Phase, Timeline
from tests.e2e.test_timeline_browser import assert_launch_drawn
from tests.sglang.server import assert_nothing_left
from tests.vllm.server import (
    WORKER_STEPS,
    VllmServer,
    initorch_in_vllm,
    running,
    verify_environment,
)

pytestmark = pytest.mark.usefixtures("vllm_python")

TOKEN = "sk-initorch-test-0123456789"
"""An API key on the launch line (vLLM's ``--api-key``): it must be in no file."""
SOURCES = {"vllm_init_device": "vllm/v1/worker/cpu_worker.py:107",
           "init_torch_distributed": "vllm/distributed/parallel_state.py:1814",
           "vllm_load_model": "vllm/v1/worker/gpu_worker.py:587",
           "vllm_profile_memory": "vllm/v1/worker/cpu_worker.py:204",
           "vllm_warm_up": "vllm/v1/worker/cpu_worker.py:264"}
"""vLLM's own functions behind the worker's phases (0.32.0's lines)."""


@dataclass
class Launch:
    server: VllmServer
    folder: Path  # the timeline directory
    timeline: Timeline


@pytest.fixture(scope="module")
def launch(tiny_model: Path, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Launch]:
    """One verify-mode launch with a timeline, stopped once the API server wrote the
    ready moment (its file is rewritten at the first 200 of ``/health``)."""
    work = tmp_path_factory.mktemp("vllm-timeline")
    folder = work / "timeline"
    extra = verify_environment(work) | {"INITORCH_VLLM_TIMELINE": str(folder)}
    with running(tiny_model, extra, work / "vllm.log", more=["--api-key", TOKEN]) as server:
        server.wait_ready()
        deadline = time.monotonic() + 60
        while time.monotonic() < deadline and \
                written_ready(folder, server.process.pid) is None:
            time.sleep(0.2)
    assert_nothing_left(server)
    yield Launch(server, folder, read_launch(folder))


def own(timeline: Timeline, name: str) -> list[int]:
    return [p.pid for p in timeline.processes if name in p.name]


def phase(timeline: Timeline, pid: int, name: str) -> Phase:
    [found] = [p for p in timeline.phases if p.process == pid and p.name == name]
    return found


def test_every_process_of_the_launch_recorded_itself_at_a_small_cost(launch: Launch) -> None:
    timeline = launch.timeline
    api, = own(timeline, "vLLM API server")
    assert api == launch.server.process.pid
    assert len(own(timeline, "vLLM engine core")) == 1
    assert len(own(timeline, "worker, rank 0")) == 1  # its own process, or the core's
    for pid in own(timeline, "vLLM"):
        first, loaded = (phase(timeline, pid, name)
                         for name in ("interpreter start and imports", "plugin load"))
        assert first.end <= loaded.start < loaded.end  # from /proc to the plugin, then it
        assert first.source and "load_general_plugins" in first.source
        process = timeline.process(pid)
        assert process.ready is not None and process.overhead is not None
        assert 0 < process.overhead <= 0.01 * (process.ready - first.start), process


def test_a_worker_is_the_calls_verify_observed_named_after_vllms_functions(
        launch: Launch) -> None:
    timeline = launch.timeline
    worker, = own(timeline, "worker, rank 0")
    names = [p.name for p in timeline.phases if p.process == worker]
    for step in WORKER_STEPS:
        assert names.count(step) == 1, step  # reused from verify, not recorded twice
    for step, source in SOURCES.items():
        found = phase(timeline, worker, step).source
        assert found and found.endswith(source), (step, found)
    assert phase(timeline, worker, "vllm_load_model").kind == "step"
    assert phase(timeline, worker, "vllm_warm_up").end <= \
        (timeline.process(worker).ready or 0.0)  # up once its warm-up returned


def test_the_engine_core_builds_the_worker_then_the_kv_cache(launch: Launch) -> None:
    timeline = launch.timeline
    core, = own(timeline, "vLLM engine core")
    worker, = own(timeline, "worker, rank 0")
    [executor] = [p for p in timeline.phases
                  if p.process == core and p.name.endswith("Executor._init_executor")]
    caches = phase(timeline, core, "EngineCore._initialize_kv_caches")
    assert caches.source and caches.source.endswith("vllm/v1/engine/core.py:260")
    assert executor.start <= phase(timeline, worker, "vllm_load_model").end <= executor.end
    warm_up = phase(timeline, worker, "vllm_warm_up")
    assert executor.end <= caches.start <= warm_up.start <= warm_up.end <= caches.end
    assert caches.end <= (timeline.process(core).ready or 0.0)  # then its busy loop


def test_the_api_server_waits_for_the_engine_and_is_ready_at_the_probes_first_200(
        launch: Launch) -> None:
    timeline = launch.timeline
    api, = own(timeline, "vLLM API server")
    core, = own(timeline, "vLLM engine core")
    client = phase(timeline, api, "AsyncLLM.__init__")
    assert phase(timeline, core, "EngineCore._initialize_kv_caches").end <= client.end
    app = phase(timeline, api, "build_app")
    probe = phase(timeline, api, "health (first 200)")
    assert client.end <= app.start <= app.end <= probe.start
    assert probe.source and \
        probe.source.endswith("vllm/entrypoints/serve/instrumentator/health.py:22")
    assert timeline.ready == probe.end == timeline.ready_at()
    assert timeline.process(api).ready == probe.end


def test_what_no_plugin_records_is_labelled_not_measured(launch: Launch) -> None:
    timeline = launch.timeline
    recorded = set(own(timeline, "vLLM"))
    for process in [p for p in timeline.processes if p.pid not in recorded]:
        [unseen] = [p for p in timeline.phases if p.process == process.pid]
        assert unseen.kind == NOT_MEASURED and unseen.source == \
            f"/proc/{process.pid}/stat starttime"
    api, = own(timeline, "vLLM API server")
    gaps = [p for p in timeline.with_gaps().phases if p.process == api and not p.measured]
    assert gaps and all(p.name == NOT_MEASURED for p in gaps)  # labelled, never a hole


def test_the_token_on_the_launch_line_is_in_no_file(launch: Launch) -> None:
    api = launch.timeline.process(launch.server.process.pid)
    assert api.argv[api.argv.index("--api-key") + 1] == REDACTED
    for path in launch.folder.iterdir():
        assert TOKEN not in path.read_text(), path


def test_initorch_vllm_timeline_prints_the_chain_and_draws_the_launch(
        launch: Launch, tmp_path: Path) -> None:
    done = initorch_in_vllm("vllm", "timeline", str(launch.folder), "--trace",
                            str(tmp_path / "trace.json"), "--plot", str(tmp_path / "launch.html"))
    assert done.returncode == 0, done.stderr
    text = done.stdout
    assert text.startswith("ready after ")
    chain = text.split("critical chain (what the ready moment waited for):\n")[1]
    assert chain.splitlines()[0].strip().startswith("health (first 200)")
    assert "blame (longest first):" in text and "AsyncLLM.__init__" in text
    events = json.loads((tmp_path / "trace.json").read_text())["traceEvents"]
    assert {event["pid"] for event in events if event.get("ph") == "X"} == \
        {process.pid for process in launch.timeline.processes}
    for path in (tmp_path / "trace.json", tmp_path / "launch.html", tmp_path / "launch.svg"):
        assert TOKEN not in path.read_text()
    compared = initorch_in_vllm("vllm", "timeline", str(launch.folder), "--compare",
                                str(launch.folder))
    assert compared.returncode == 0 and "AsyncLLM.__init__" in compared.stdout
    assert_launch_drawn(tmp_path / "launch.html", launch.timeline,
                        {"AsyncLLM.__init__", "health (first 200)", "vllm_load_model",
                         NOT_MEASURED})

