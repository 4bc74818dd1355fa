"""The kit's start-up timeline of a server's processes: one process's recorder, its file,
what it sees of processes that record nothing, the readiness probe's first answer, and
the launch's files joined and rendered."""

from __future__ import annotations

import asyncio
import functools
import json
import os
import subprocess
import sys
import threading
import time
from pathlib import Path
from typing import Any

import pytest

from initorch import InitorchError, load_plan
from initorch.kit import Recorder
from initorch.kit.timeline import (
    FILE_PATTERN,
    FirstAnswer,
    ProcessRecorder,
    caller_outside,
    code_source,
    descendants,
    read_launch,
    recorded_calls,
    render_launch,
    unrecorded_processes,
    watch_first_answer,
    written_ready,
)
from initorch.reporting.redaction import REDACTED
from initorch.reporting.timeline import NOT_MEASURED, Phase, Process, Timeline, read_timeline
from initorch.reporting.timeline_text import timeline_text
from tests.unit.kit.toy_engine import TOY


def build_pools(size: int) -> int:
    time.sleep(0.01)
    return size


def test_a_hooked_call_is_a_phase_named_after_the_function_on_its_thread():
    recorder = ProcessRecorder()
    hook = recorder.around()
    done = []
    worker = threading.Thread(target=lambda: done.append(hook(build_pools, 3)), name="pools")
    worker.start()
    worker.join()
    [phase] = recorder.phases
    assert done == [3]
    assert (phase.name, phase.thread, phase.kind, phase.status) == \
        ("build_pools", "pools", "engine", None)
    assert phase.source == code_source(build_pools)
    assert phase.source.endswith(f"test_timeline.py:{build_pools.__code__.co_firstlineno}")
    assert phase.start <= phase.end
    assert recorder.overhead > 0  # its own bookkeeping, measured


def test_a_call_that_raises_is_a_failed_phase_and_the_error_goes_on():
    recorder = ProcessRecorder()

    def broken() -> None:
        raise ValueError("no pool")

    with pytest.raises(ValueError, match="no pool"):
        recorder.around("pools")(broken)
    assert [(p.name, p.status) for p in recorder.phases] == [("pools", "failed")]


def test_the_source_is_the_engines_function_under_a_hooks_wrapper():
    @functools.wraps(build_pools)
    def wrapper(*args: Any) -> Any:
        return build_pools(*args)

    assert code_source(wrapper) == code_source(build_pools)
    assert code_source(len) is None  # no Python code: no line to name


def test_the_caller_is_the_first_frame_outside_the_plugins_code():
    plugin: dict[str, Any] = {"caller_outside": caller_outside}
    exec(compile("def load():\n    return caller_outside('/a-plugin/')\n",
                 "/site/a-plugin/plugin.py", "exec"), plugin)
    function, where = plugin["load"]()  # as an engine's loader calls a plugin's entry point
    line = sys._getframe().f_lineno - 1
    assert function == "test_the_caller_is_the_first_frame_outside_the_plugins_code"
    assert where is not None and where.endswith(f"test_timeline.py:{line}")


def test_a_wrapper_between_the_loader_and_the_plugin_is_passed_over():
    code: dict[str, Any] = {"caller_outside": caller_outside}
    exec(compile("def load():\n    return caller_outside('/a-plugin/', '/engine/plugins/')\n",
                 "/site/a-plugin/plugin.py", "exec"), code)
    exec(compile("def wrapped():\n    return load()\n", "/probe/sitecustomize.py", "exec"),
         code)
    exec(compile("def load_plugins():\n    return wrapped()\n", "/site/engine/plugins/x.py",
                 "exec"), code)
    function, where = code["load_plugins"]()  # the engine's loader, a probe's wrapper
    line = sys._getframe().f_lineno - 1
    assert function == "test_a_wrapper_between_the_loader_and_the_plugin_is_passed_over"
    assert where is not None and where.endswith(f"test_timeline.py:{line}")


def test_a_phase_still_running_is_written_as_running_up_to_now():
    recorder = ProcessRecorder()
    with recorder.phase("serve"):
        timeline = recorder.snapshot(name="server", argv=["server"])
    [running] = [p for p in timeline.phases if p.name == "serve"]
    assert running.status == "running"
    assert [p.status for p in recorder.phases] == [None]


def test_the_interpreter_and_imports_run_from_the_kernels_start_to_the_plugin():
    recorder = ProcessRecorder()
    now = time.time()
    recorder.interpreter_and_imports(now, "server.py:79 (<module>: load_plugins)")
    [phase] = recorder.phases
    assert recorder.start is not None and phase.start == recorder.start.at < now == phase.end
    assert "/proc/" in (phase.detail or "") and phase.kind == "process"


def test_the_file_is_this_process_redacted_with_the_recordings_cost(tmp_path):
    recorder = ProcessRecorder()
    with recorder.phase("load"):
        pass
    timeline = recorder.snapshot(name="launcher", argv=["serve", "--api-key", "sk-12345678"],
                                 process_ready=time.time(), labels={"engine": "Toy 1"})
    path = recorder.write(tmp_path, timeline)
    assert path.name == FILE_PATTERN.format(pid=os.getpid())
    assert "sk-12345678" not in path.read_text()
    [process] = read_timeline(str(path)).processes
    assert process.argv == ("serve", "--api-key", REDACTED)
    assert process.overhead is not None and process.overhead > 0
    assert list(tmp_path.iterdir()) == [path]  # nothing left beside it


def test_the_steps_verify_observed_are_phases_with_the_plans_edges():
    plan = load_plan(["cpu"])
    recorder = Recorder(plan, TOY)
    with recorder.observe("set_device", binds="cpu:0"):
        pass
    with recorder.observe("init_torch_distributed"):
        time.sleep(0.005)
    with recorder.observe("set_device", binds="cpu:0"):
        pass
    phases = recorded_calls(recorder, {"set_device": "torch/cpu/__init__.py:1"})
    assert [p.name for p in phases] == ["set_device", "init_torch_distributed",
                                        "set_device (call 2)"]
    first, group, again = phases
    assert first.source == "torch/cpu/__init__.py:1" and group.source is None
    assert group.after == plan.graph.predecessors("init_torch_distributed")
    assert again.after == ()
    assert first.start <= first.end <= group.start < group.end <= again.start <= time.time()
    assert {p.kind for p in phases} == {"step"}


def test_a_child_that_records_nothing_is_seen_from_proc_and_not_measured():
    child = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(30)"])
    try:
        assert child.pid in descendants(os.getpid())
        processes, phases = unrecorded_processes(os.getpid(), time.time())
    finally:
        child.kill()
        child.wait()
    [process] = [p for p in processes if p.pid == child.pid]
    [phase] = [p for p in phases if p.process == child.pid]
    assert process.argv[1:] == ("-c", "import time; time.sleep(30)")
    assert process.name == f"{Path(sys.executable).name} (seen from /proc)"
    assert phase.kind == NOT_MEASURED and phase.source == f"/proc/{child.pid}/stat starttime"
    assert phase.start < phase.end


async def _probe(app: Any, path: str) -> int:
    sent: list[dict[str, Any]] = []

    async def receive() -> dict[str, Any]:
        return {"type": "http.request", "body": b""}

    async def send(message: dict[str, Any]) -> None:
        sent.append(message)

    await app({"type": "http", "path": path, "method": "GET"}, receive, send)
    return int(sent[0]["status"])


def test_the_first_200_of_the_probe_is_noted_once_and_every_answer_passes():
    ready = {"now": False}
    noted: list[tuple[float, float]] = []

    async def engine_app(scope: dict[str, Any], receive: Any, send: Any) -> None:
        status = 200 if ready["now"] or scope["path"] != "/health_generate" else 503
        await send({"type": "http.response.start", "status": status, "headers": []})
        await send({"type": "http.response.body", "body": b""})

    app = FirstAnswer(engine_app, path="/health_generate",
                      answered=lambda began, at: noted.append((began, at)))
    assert asyncio.run(_probe(app, "/health_generate")) == 503
    assert asyncio.run(_probe(app, "/model_info")) == 200
    assert noted == []
    ready["now"] = True
    assert asyncio.run(_probe(app, "/health_generate")) == 200
    assert asyncio.run(_probe(app, "/health_generate")) == 200
    [(began, answered)] = noted
    assert began <= answered


class BuiltApp:
    """A Starlette app whose middleware stack is built (as vLLM's ``build_app`` leaves
    it): ``add_middleware`` refuses, as Starlette's does then."""

    def __init__(self, stack: Any) -> None:
        self.middleware_stack = stack

    def add_middleware(self, *args: Any, **kwargs: Any) -> None:
        raise RuntimeError("Cannot add middleware after an application has started")


def test_an_app_whose_stack_is_built_is_watched_around_the_stack():
    noted: list[float] = []

    async def stack(scope: dict[str, Any], receive: Any, send: Any) -> None:
        await send({"type": "http.response.start", "status": 200, "headers": []})

    app = BuiltApp(stack)
    watch_first_answer(app, path="/health", answered=lambda began, at: noted.append(at))
    assert isinstance(app.middleware_stack, FirstAnswer) and app.middleware_stack.app is stack
    assert asyncio.run(_probe(app.middleware_stack, "/health")) == 200
    assert len(noted) == 1


def write(folder: Path, timeline: Timeline, recorded_in: int) -> None:
    timeline.labels["recorded_in"] = str(recorded_in)
    (folder / FILE_PATTERN.format(pid=recorded_in)).write_text(json.dumps(timeline.to_dict()))


def launch_files(folder: Path) -> None:
    """A launcher (pid 10) that saw its rank (11) and a helper (12) from /proc, and the
    rank's own file."""
    write(folder, Timeline(
        [Process(10, "launcher", ready=9.0, overhead=0.01), Process(11, "python (seen from /proc)"),
         Process(12, "tracker (seen from /proc)")],
        [Phase("interpreter start and imports", 10, "MainThread", 0.0, 2.0, kind="process"),
         Phase("health_generate (first 200)", 10, "MainThread", 8.0, 9.0),
         Phase(NOT_MEASURED, 11, "?", 2.5, 9.5, kind=NOT_MEASURED),
         Phase(NOT_MEASURED, 12, "?", 2.4, 9.5, kind=NOT_MEASURED)], ready=9.0), 10)
    write(folder, Timeline(
        [Process(11, "rank 0", ready=6.0, overhead=0.02)],
        [Phase("interpreter start and imports", 11, "MainThread", 2.5, 4.0, kind="process"),
         Phase("Scheduler.__init__", 11, "MainThread", 4.0, 6.0),
         Phase("sglang_load_model", 11, "MainThread", 4.5, 5.0, kind="step"),
         Phase("Scheduler.run_batch (first batch)", 11, "MainThread", 7.0, 7.5)]), 11)


def test_the_ready_moment_is_read_once_written(tmp_path):
    assert written_ready(tmp_path, 10) is None  # no file yet
    launch_files(tmp_path)
    assert written_ready(tmp_path, 10) == 9.0
    assert written_ready(tmp_path, 11) is None  # a rank's file: not the launch's ready


def test_the_launch_is_each_process_as_it_recorded_itself(tmp_path):
    launch_files(tmp_path)
    launch = read_launch(tmp_path)
    assert [p.name for p in launch.processes] == ["launcher", "tracker (seen from /proc)", "rank 0"]
    assert [p.name for p in launch.phases if p.process == 11] == [
        "interpreter start and imports", "Scheduler.__init__", "sglang_load_model",
        "Scheduler.run_batch (first batch)"]
    assert [p.kind for p in launch.phases if p.process == 12] == [NOT_MEASURED]
    assert launch.ready_at() == 9.0
    assert "recorded_in" not in launch.labels


def test_the_text_names_the_chain_to_ready_and_each_recordings_share(tmp_path):
    launch_files(tmp_path)
    text = timeline_text(read_launch(tmp_path))
    assert "ready after 9.000s (3 process(es)" in text
    assert "recording 0.0100s = 0.11% of its 9.000s start-up" in text
    assert "recording 0.0200s = 0.57% of its 3.500s start-up" in text
    chain = text.split("critical chain")[1].split("blame")[0].splitlines()[1:]
    assert chain[0].strip().startswith("health_generate (first 200) @8.000s")
    assert NOT_MEASURED in chain[1]  # the launcher's own stretch that no phase covers


def test_the_launch_is_rendered_as_text_trace_and_picture(tmp_path):
    launch_files(tmp_path)
    text = render_launch(read_launch(tmp_path), trace=tmp_path / "trace.json",
                         plot=tmp_path / "timeline.html", title="Toy start-up")
    assert text.startswith("ready after 9.000s")
    events = json.loads((tmp_path / "trace.json").read_text())["traceEvents"]
    assert {e["pid"] for e in events if e.get("ph") == "X"} == {10, 11, 12}
    page = (tmp_path / "timeline.html").read_text()
    assert "<title>Toy start-up</title>" in page and 'data-name="sglang_load_model"' in page
    assert (tmp_path / "timeline.svg").read_text().startswith("<svg")


def test_a_directory_without_process_files_is_refused(tmp_path):
    with pytest.raises(InitorchError, match="no process timelines") as caught:
        read_launch(tmp_path)
    assert caught.value.exit_code == 2
