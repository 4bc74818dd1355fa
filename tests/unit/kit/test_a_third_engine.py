"""The kit serves an engine it has never heard of: a toy engine, written here as a real
package, is read as a release (layout, chains, drift, support), hooked at run time and
observed as a rank's session, with nothing but the kit and one Engine value: a rank that
starts in its constructor (framed), and one that starts in several calls that the
engine makes into its worker (the begin/end pair)."""

from __future__ import annotations

import json
import logging
import sys
import textwrap
import zipfile
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest

from initorch import Registry, load_plan
from initorch.kit import (
    MOONCAKE_CALLS,
    EngineCall,
    HookError,
    Hop,
    Idle,
    Marker,
    OrderViolation,
    Outputs,
    RankSession,
    Recorder,
    SourceTree,
    active,
    apply_hooks,
    begin_hook,
    check_drift,
    engine_performed,
    observer,
    recognise,
    run_framed,
    set_device_observer,
    support,
)
from tests.unit.kit.toy_engine import TOY

SERVER = "core/server.py"

DEVICE = "def set_device(index):\n    return index\n"
BOOT = "def start_engine():\n    return 'engine'\n\n\ndef init_group():\n    return 'group'\n"
WORKER = textwrap.dedent('''
    from toyengine.core.boot import init_group, start_engine
    from toyengine.core.device import set_device


    class Worker:
        def __init__(self, device):
            self.bind(device)
            {first}
            {second}

        def bind(self, device):
            set_device(device)


    class StepWorker:
        """Started by the engine in calls one after another, none framing the rest."""

        def __init__(self, config, rank):
            self.config, self.rank = config, rank

        def init_device(self):
            set_device(self.rank)
            {first}

        def load(self):
            {second}

        def serve(self):
            return "served"
''')


@dataclass(frozen=True, slots=True)
class ToyLayout:
    """A toy call map: what a third engine's layout module would hold."""

    name: str
    markers: tuple[Marker, ...]
    absent: tuple[Marker, ...]
    calls: tuple[EngineCall, ...]

    def call_for(self, step: str) -> EngineCall | None:
        return next((call for call in self.calls if call.step == step), None)

    def hook_targets(self) -> tuple[str, ...]:
        return tuple(call.target for call in self.calls)


_INIT = Hop(SERVER, "Worker.__init__", "bind")
LAYOUT = ToyLayout(
    "worker", (Marker(SERVER, "Worker.bind"),), (Marker("core/legacy.py"),), (
        EngineCall("set_device", "toyengine.core.device.set_device",
                   (_INIT, Hop(SERVER, "Worker.bind", "set_device"))),
        EngineCall("init_shared_mooncake_transfer_engine", "toyengine.core.boot.start_engine",
                   (Hop(SERVER, "Worker.__init__", "start_engine"),)),
        EngineCall("init_torch_distributed", "toyengine.core.boot.init_group",
                   (Hop(SERVER, "Worker.__init__", "init_group"),)),
    ))
LEGACY = ToyLayout("legacy", (Marker("core/legacy.py"),), (), ())


def write_toy(root: Path, *, first: str = "start_engine()",
              second: str = "init_group()") -> Path:
    package = root / "toyengine"
    (package / "core").mkdir(parents=True)
    for name, text in {"__init__.py": "", "core/__init__.py": "", "core/device.py": DEVICE,
                       "core/boot.py": BOOT,
                       SERVER: WORKER.format(first=first, second=second)}.items():
        (package / name).write_text(text)
    return package


@pytest.fixture
def toy(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[Path]:
    """The toy engine importable, and forgotten again after the test."""
    package = write_toy(tmp_path)
    monkeypatch.syspath_prepend(str(tmp_path))
    yield package
    for name in [name for name in sys.modules if TOY.owns(name)]:
        del sys.modules[name]


def test_a_wheel_of_the_engine_is_read_with_its_release_and_layout(tmp_path: Path) -> None:
    package = write_toy(tmp_path / "tree")
    wheel = tmp_path / "toy_engine-1.2.3-py3-none-any.whl"
    with zipfile.ZipFile(wheel, "w") as archive:
        for path in package.rglob("*.py"):
            archive.write(path, str(path.relative_to(package.parent)))
    tree = SourceTree.open(wheel, TOY)
    assert tree.version() == "1.2.3"
    assert recognise(tree, [LAYOUT, LEGACY]) is LAYOUT
    assert support(tree, LAYOUT, SERVER) == (True, "every hook target of layout worker resolves")
    assert support(tree, LAYOUT, "core/plugins.py")[1] == \
        "no Toy plugin system (core/plugins.py is missing)"


def test_drift_follows_the_toy_chains_and_finds_a_swapped_order(tmp_path: Path) -> None:
    plan = load_plan(["cpu"])
    good = check_drift(SourceTree.open(write_toy(tmp_path / "good"), TOY), plan, LAYOUT)
    assert not good.drifted and {check.verdict for check in good.checks} == {"ok"}
    assert len(good.checks) == 3  # device -> engine -> group, and device -> group
    swapped = SourceTree.open(write_toy(tmp_path / "bad", first="init_group()",
                                        second="start_engine()"), TOY)
    report = check_drift(swapped, plan, LAYOUT)
    assert report.drifted
    assert [f"{c.edge.source} {c.verdict}" for c in report.checks if c.verdict != "ok"] == \
        ["init_shared_mooncake_transfer_engine drift"]
    assert report.text(plan).splitlines()[-1] == \
        "drift: Toy's code no longer matches the profile"


def run_worker(report: Path, *, stop: bool = True) -> RankSession:
    """The toy Worker built as a rank's session, every call observed."""
    from toyengine.core.server import Worker

    plan = load_plan(["cpu"])
    hooks = {call.target: (observer(call.step), "around") for call in LAYOUT.calls
             if call.step != "set_device"}
    hooks["toyengine.core.device.set_device"] = (set_device_observer("toy.device"), "around")
    apply_hooks(hooks, TOY)
    session = RankSession(plan, Recorder(plan, TOY, stop_on_violation=stop), 0, "verify",
                          Outputs("toy", str(report), idle=Idle(vendor_calls=MOONCAKE_CALLS)))
    run_framed(lambda: session, lambda: Worker(0))
    return session


def test_the_toy_start_up_is_recorded_and_reported_as_initorch_steps(
        toy: Path, tmp_path: Path) -> None:
    report = tmp_path / "report-{rank}.json"
    session = run_worker(report)
    assert [(call.step, call.device) for call in session.recorder.calls] == [
        ("set_device", "device:0"), ("init_shared_mooncake_transfer_engine", "device:0"),
        ("init_torch_distributed", "device:0")]
    written = json.loads((tmp_path / "report-0.json").read_text())
    assert written["executor"] == "toyengine-verify" and written["toy"]["violations"] == []
    engine = next(step for step in written["steps"]
                  if step["step"] == "init_shared_mooncake_transfer_engine")
    assert engine["status"] == "skipped"  # the toy engine made no Mooncake call
    assert engine["reason"].startswith("called by Toy, did nothing: it made no Mooncake")


def test_a_toy_start_up_out_of_order_is_stopped_naming_the_edge(
        toy: Path, tmp_path: Path) -> None:
    (toy / SERVER).write_text(WORKER.format(first="init_group()", second="start_engine()"))
    with pytest.raises(OrderViolation, match=r"^Toy called init_shared_mooncake_transfer_engine "
                                             r"but init_torch_distributed had already run"):
        run_worker(tmp_path / "report.json")
    written = json.loads((tmp_path / "report.json").read_text())
    assert len(written["toy"]["violations"]) == 1


STEP_WORKER = "toyengine.core.server.StepWorker"
LOG = "toyengine.plugins.initorch"
"""The toy engine configures only its own logger (``toyengine``, not propagating, as an
engine that keeps its lines to itself): the integration logs under it."""


def step_worker_hooks(report: Path, began: list[dict[str, object]]) -> None:
    """The toy StepWorker hooked as a session of the begin/end pair: it begins in the
    constructor (planning from the engine's own arguments); ``load`` is the process
    group's step, and ``serve`` the last call of the start-up."""
    plan = load_plan(["cpu"])

    def make(given: dict[str, object]) -> RankSession:
        began.append(given)
        return RankSession(plan, Recorder(plan, TOY), int(str(given["rank"])), "verify",
                           Outputs("toy", str(report), log=LOG))

    apply_hooks({
        f"{STEP_WORKER}.__init__": (begin_hook(make), "around"),
        "toyengine.core.device.set_device": (set_device_observer("toy.device"), "around"),
        "toyengine.core.boot.start_engine": (
            observer("init_shared_mooncake_transfer_engine"), "around"),
        f"{STEP_WORKER}.load": (observer("init_torch_distributed"), "around"),
        f"{STEP_WORKER}.serve": (observer("toy_serve", last=True), "around")}, TOY)


@pytest.fixture
def toy_log() -> Iterator[list[logging.LogRecord]]:
    """The toy engine's own logging configuration: one handler on ``toyengine``, which
    does not propagate (an engine that keeps its lines to itself)."""
    records: list[logging.LogRecord] = []

    class Keep(logging.Handler):
        def emit(self, record: logging.LogRecord) -> None:
            records.append(record)

    engine_logger = logging.getLogger("toyengine")
    handler = Keep(logging.INFO)
    engine_logger.addHandler(handler)
    engine_logger.setLevel(logging.INFO)
    engine_logger.propagate = False
    yield records
    engine_logger.removeHandler(handler)
    engine_logger.propagate = True
    engine_logger.setLevel(logging.NOTSET)


def test_a_start_up_in_several_calls_is_one_session_from_begin_to_the_last_call(
        toy: Path, tmp_path: Path, toy_log: list[logging.LogRecord]) -> None:
    began: list[dict[str, object]] = []
    step_worker_hooks(tmp_path / "report-{rank}.json", began)
    from toyengine.core.server import StepWorker

    worker = StepWorker({"device": "cpu"}, rank=1)  # the engine's own arguments, by name
    session = active()
    assert session is not None and session.rank == 1
    assert [sorted(given) for given in began] == [["config", "rank", "self"]]
    worker.init_device()
    worker.load()
    assert active() is session and not (tmp_path / "report-1.json").exists()
    assert worker.serve() == "served"  # the last call: the session ends when it returns
    assert active() is None
    worker.load()  # after the start-up: straight through, unrecorded
    assert active() is None and len(began) == 1
    assert [call.step for call in session.recorder.calls] == [
        "set_device", "init_shared_mooncake_transfer_engine", "init_torch_distributed",
        "toy_serve"]
    written = json.loads((tmp_path / "report-1.json").read_text())
    assert written["toy"]["error"] is None and written["toy"]["violations"] == []
    assert {record.name for record in toy_log} == {LOG}
    assert toy_log[-1].getMessage().startswith("initorch-toy: verify ok: 3 of ")


def test_a_call_that_raises_ends_a_session_of_several_calls_with_its_error(
        toy: Path, tmp_path: Path, toy_log: list[logging.LogRecord]) -> None:
    (toy / SERVER).write_text(WORKER.format(first="start_engine()",
                                            second="raise MemoryError('no room')"))
    step_worker_hooks(tmp_path / "report.json", [])
    from toyengine.core.server import StepWorker

    worker = StepWorker({}, rank=0)
    worker.init_device()
    with pytest.raises(MemoryError):
        worker.load()
    assert active() is None
    written = json.loads((tmp_path / "report.json").read_text())
    assert written["toy"]["error"] == "MemoryError: no room"
    assert [call["step"] for call in written["toy"]["calls"]] == [
        "set_device", "init_shared_mooncake_transfer_engine", "init_torch_distributed"]


def test_an_order_violation_in_a_later_call_ends_the_session_once(
        toy: Path, tmp_path: Path, toy_log: list[logging.LogRecord]) -> None:
    (toy / SERVER).write_text(WORKER.format(first="pass", second="start_engine()"))
    step_worker_hooks(tmp_path / "report.json", [])
    from toyengine.core.server import StepWorker

    worker = StepWorker({}, rank=0)
    worker.init_device()
    with pytest.raises(OrderViolation, match=r"^Toy called init_shared_mooncake_transfer_"
                                             r"engine but init_torch_distributed had already"):
        worker.load()  # the group's call makes the engine's: out of the plan's order
    assert active() is None
    written = json.loads((tmp_path / "report.json").read_text())
    assert len(written["toy"]["violations"]) == 1
    assert written["toy"]["error"].startswith("OrderViolation: Toy called init_shared_")
    assert [record.levelname for record in toy_log
            if "order violation" in record.getMessage()] == ["ERROR"]


def test_a_missing_toy_hook_target_names_the_integration(toy: Path) -> None:
    with pytest.raises(HookError, match=r"^initorch-toy: hook target toyengine\.core\.boot\.gone "
                                        r"is missing: toyengine\.core\.boot has no attribute"):
        apply_hooks({"toyengine.core.boot.gone": (observer("x"), "around")}, TOY)
        import toyengine.core.boot  # noqa: F401  (the hook applies when its module loads)


def test_drive_mode_registry_keeps_each_step_with_its_plugin() -> None:
    def bind(ctx: object) -> str:
        """The toy engine's own set_device; the rest is detail."""
        return "bound"

    registry = engine_performed({"set_device": bind}, engine="Toy",
                                installed=Registry.with_plugins())
    step = registry.steps.get("set_device")
    assert (step.action, step.teardown, step.description) == (
        bind, None, "Toy: The toy engine's own set_device")
    assert registry.steps.plugin_of("set_device") == "builtin"
    assert registry.steps.get("init_torch_distributed").action is \
        Registry.with_plugins().steps.get("init_torch_distributed").action
