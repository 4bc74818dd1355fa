"""The managed master launched early (``launch_mooncake_master``, before ``import_backend``)
and adopted by ``mooncake_master``: with the real ``mooncake_master`` of the CPU wheel.

The two steps are called here as an executor calls them (same context, outputs recorded),
so that no torch is imported; the failed run between them is a real ``initorch run``."""

from __future__ import annotations

import json
import socket
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import structlog

from initorch import load_plan
from initorch.errors import StepError
from initorch.execution.context import RunState, RunStepContext
from initorch.execution.launchers import RankInfo
from initorch.resolution.plan import Plan
from initorch.steps import mooncake_master as module
from initorch.steps.mooncake_master import LAUNCH_STEP, ManagedMaster, MasterEndpoint
from tests.support.commands import initorch_command
from tests.support.processes import alive, listening, wait_for

MASTER = "mooncake_master"


class Steps:
    """Runs planned steps by name on one rank's state, and tears them down in reverse."""

    def __init__(self, plan: Plan, rank: RankInfo | None = None) -> None:
        self.state = RunState(plan, rank or RankInfo())
        self.done: list[str] = []

    def context(self, name: str) -> RunStepContext:
        return RunStepContext(self.state, name, structlog.get_logger())

    def run(self, name: str) -> Any:
        output = self.state.plan.step(name).step.action(self.context(name))
        self.state.record_output(name, output, binds_device=False)
        self.done.append(name)
        return output

    def teardown(self) -> None:
        while self.done:
            self.teardown_last()

    def teardown_last(self) -> None:
        name = self.done.pop()
        teardown = self.state.plan.step(name).step.teardown
        if teardown is not None:
            teardown(self.context(name), self.state.forget(name))


@pytest.fixture
def steps() -> Iterator[Steps]:
    runner = Steps(load_plan(["cpu"]))
    try:
        yield runner
    finally:
        runner.teardown()


def assert_gone(master: ManagedMaster) -> None:
    assert master.stopped
    assert wait_for(lambda: not alive(master.pid) and not alive(master.watchdog.pid)), \
        f"mooncake_master {master.pid} orphaned"
    assert not any(listening(port) for port in master.ports.values())


def test_the_launch_step_is_planned_first_where_the_master_is_local() -> None:
    plan = load_plan(["cpu"])
    assert plan.order[:2] == (LAUNCH_STEP, "import_backend")
    [edge] = plan.explain(LAUNCH_STEP, "import_backend")
    assert (edge.kind, edge.declared_by) == ("before", "profile base")
    assert edge.reason is not None and "needs no torch" in edge.reason
    given = load_plan(["cpu"], settings={"mooncake.master": "127.0.0.1:50051"})
    assert LAUNCH_STEP not in given.order and MASTER in given.order


def test_the_launched_master_is_adopted_and_stopped_once(steps: Steps) -> None:
    launched = steps.run(LAUNCH_STEP)
    assert isinstance(launched, ManagedMaster)
    assert alive(launched.pid) and not launched.stopped  # not waited for: it boots meanwhile
    endpoint: MasterEndpoint = steps.run(MASTER)
    assert endpoint.managed is launched  # adopted, not a second master
    assert endpoint.address == f"127.0.0.1:{launched.ports['rpc']}"
    assert all(listening(port) for port in launched.ports.values())
    steps.teardown_last()  # mooncake_master's: asks it to stop, does not wait
    assert launched.stopping and not launched.stopped
    steps.teardown_last()  # the launch step's, the last of a run's: waits for it
    assert_gone(launched)
    assert launched.stop() == launched.status  # idempotent


def test_other_ranks_launch_nothing() -> None:
    runner = Steps(load_plan(["cpu"]), RankInfo(rank=1, local_rank=1, world_size=2,
                                                local_world_size=2))
    assert runner.run(LAUNCH_STEP) is None
    runner.teardown()


def test_without_the_launch_step_mooncake_master_starts_the_master(tmp_path: Path) -> None:
    profile = tmp_path / "no-launch.yaml"
    profile.write_text("extends: cpu\nsteps:\n  launch_mooncake_master:\n    enabled: false\n"
                       "    reason: the master starts in mooncake_master\n", encoding="utf-8")
    runner = Steps(load_plan([str(profile)]))
    assert LAUNCH_STEP not in runner.state.plan.order
    try:
        endpoint: MasterEndpoint = runner.run(MASTER)
        managed = endpoint.managed
        assert managed is not None and alive(managed.pid)
        assert all(listening(port) for port in managed.ports.values())
    finally:
        runner.teardown()
    assert_gone(managed)


@pytest.fixture
def taken_port(monkeypatch: pytest.MonkeyPatch) -> Iterator[int]:
    """The launch step is handed, for its metrics server, a port another program already
    listens on (the master then logs "Address already in use" and exits)."""
    with socket.socket() as holder:
        holder.bind(("127.0.0.1", 0))
        holder.listen()
        taken = holder.getsockname()[1]
        handed = iter([None, None, taken])  # rpc, metadata, metrics: master_command's order
        real_free_port = module.free_port
        monkeypatch.setattr(module, "free_port", lambda host: next(handed, None) or
                            real_free_port(host))
        yield taken


def test_a_launched_master_that_lost_a_port_is_started_anew(steps: Steps,
                                                            taken_port: int) -> None:
    launched = steps.run(LAUNCH_STEP)
    assert launched.ports["metrics"] == taken_port
    endpoint: MasterEndpoint = steps.run(MASTER)
    managed = endpoint.managed
    assert managed is not None and managed is not launched
    assert taken_port not in managed.ports.values()
    assert launched.stopped and not alive(launched.pid)
    steps.teardown()
    assert_gone(managed)


@pytest.mark.e2e
def test_a_run_failing_between_the_two_steps_stops_the_launched_master(tmp_path: Path) -> None:
    with socket.socket() as holder:  # the process group's port is taken: rendezvous fails
        holder.bind(("127.0.0.1", 0))
        holder.listen()
        result = initorch_command(
            "run", "--profile", "cpu", "--set", f"distributed.master_port="
            f"{holder.getsockname()[1]}", "--log-format", "json",
            "--report", str(tmp_path / "run.json"))
    assert result.returncode == 1, result.stderr[-3000:]
    events = [json.loads(line) for line in result.stderr.splitlines() if line.startswith("{")]
    [started] = [e for e in events if e["event"] == "mooncake_master_starting"]
    [stopped] = [e for e in events if e["event"] == "mooncake_master_stopped"]
    assert (stopped["step"], stopped["pid"]) == (LAUNCH_STEP, started["pid"])
    assert wait_for(lambda: not alive(int(started["pid"]))), "the launched master orphaned"
    report = json.loads((tmp_path / "run.json").read_text(encoding="utf-8"))
    steps = {s["step"]: s["status"] for s in report["steps"]}
    assert (steps[LAUNCH_STEP], steps[MASTER]) == ("succeeded", "skipped")


def test_without_mooncake_installed_the_master_step_names_the_extras(monkeypatch):
    """A core-only install has no mooncake package at all: say so, with the extras."""
    import importlib.util

    from initorch.steps import mooncake_master

    real = importlib.util.find_spec
    monkeypatch.setattr(importlib.util, "find_spec",
                        lambda name, *a: None if name == "mooncake" else real(name, *a))
    with pytest.raises(StepError) as caught:
        mooncake_master.master_binary()
    assert str(caught.value).startswith("Mooncake is not installed (no mooncake package)")
    assert "initorch[mooncake-cpu]" in (caught.value.hint or "")
