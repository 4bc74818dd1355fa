"""The kit serves an engine it has never heard of: a toy engine, written here as a real
package, is read as a release (layout, chains, drift, support), hooked at run time and
observed as a rank's session, with nothing but the kit and one Engine value."""

from __future__ import annotations

import json
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
    Engine,
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
    apply_hooks,
    check_drift,
    engine_performed,
    observer,
    recognise,
    run_framed,
    set_device_observer,
    support,
)

TOY = Engine(name="Toy", package="toyengine", distributions=("toy-engine",),
             marker="core/server.py", command="toy", integration="initorch-toy")
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
