"""Faults in the real CPU start-up, one step at a time.

Each step is made to fail — by an injected exception in-process, and by a real
misconfiguration through the CLI — and the run must start no step after it
(or, with ``keep_going``, skip exactly the steps that need it), tear down what
completed in reverse order, print the diagnosis as its last line and exit 1.
"""

from __future__ import annotations

import contextlib
import dataclasses
import json
import socket
from collections.abc import Iterator
from pathlib import Path

import pytest

from initorch import Registry, load_plan
from initorch.execution.executors import TEARDOWN_MODES
from initorch.execution.run import Run
from initorch.plugin import StepContext
from initorch.resolution.plan import Plan
from tests.support.commands import initorch_command

CPU_STEPS = ("launch_mooncake_master", "import_backend", "rendezvous", "set_device",
             "alloc_host_mem_pool", "init_shared_mooncake_transfer_engine",
             "init_torch_distributed", "mooncake_master", "init_mooncake_store",
             "register_mem_pool_host", "verify_transfer")


class InjectedFault(RuntimeError):
    """Stands for any unexpected failure inside a step."""


def registry_failing_at(step_name: str) -> Registry:
    """The installed registry, with ``step_name``'s action replaced by one that raises."""
    real = Registry.with_plugins()
    faulty = Registry()
    faulty.profiles, faulty.diagnoses = real.profiles, real.diagnoses

    def explode(ctx: StepContext) -> None:
        raise InjectedFault(f"injected fault in {ctx.step}")

    for declared in real.steps:
        faulty.steps.add(dataclasses.replace(declared, action=explode)
                         if declared.name == step_name else declared)
    return faulty


def hard_dependents(plan: Plan, name: str) -> set[str]:
    """Every step that transitively requires ``name`` (or needs its device binding)."""
    found: set[str] = set()
    frontier = [name]
    while frontier:
        current = frontier.pop()
        for successor in plan.graph.successors(current):
            edges = plan.graph.edges_between(current, successor)
            if successor not in found and any(e.kind in ("requires", "device") for e in edges):
                found.add(successor)
                frontier.append(successor)
    return found


def expected_fates(plan: Plan, failing: str, keep_going: bool) -> dict[str, tuple[str, str]]:
    """Status and reason of every planned step after ``failing`` fails in a sequential
    run: what requires it is skipped as upstream failed; failing fast, everything later
    in plan order is not started; kept going, everything else runs."""
    dependents = hard_dependents(plan, failing)
    later = plan.order[plan.order.index(failing) + 1:]
    fates = {}
    for name in plan.order:
        if name == failing:
            fates[name] = ("failed", "")
        elif name in dependents:
            fates[name] = ("skipped", f"upstream failed: {failing}")
        elif name in later and not keep_going:
            fates[name] = ("skipped", f"not started: step '{failing}' failed (fail fast)")
        else:
            fates[name] = ("succeeded", "")
    return fates


@pytest.mark.parametrize("mode", TEARDOWN_MODES)
@pytest.mark.parametrize(("failing", "keep_going"),
                         [*((name, False) for name in CPU_STEPS),
                          ("import_backend", True), ("rendezvous", True)])
def test_injected_fault_stops_the_start_up_and_tears_down_in_reverse(failing: str,
                                                                     keep_going: bool,
                                                                     mode: str) -> None:
    registry = registry_failing_at(failing)
    plan = load_plan(["cpu"], settings={"checks.verify_transfer": True}, registry=registry)
    run = Run(plan, diagnoses=registry.diagnoses, keep_going=keep_going, teardown=mode)
    report = run.start()  # a failed run tears itself down before returning

    assert isinstance(report.outcomes[failing].error, InjectedFault)
    assert {name: (o.status, o.reason or "") for name, o in report.outcomes.items()
            if name in plan.order} == expected_fates(plan, failing, keep_going)
    completed = [o.name for o in sorted(report.outcomes.values(), key=lambda o: o.finished or 0)
                 if o.status == "succeeded"]
    with_teardown = [n for n in reversed(completed) if plan.step(n).step.teardown is not None]
    torn = [t.step for t in report.teardown]  # in the order they ended
    assert all(t.status == "succeeded" for t in report.teardown)
    if mode == "sequential":
        assert torn == with_teardown
        return
    assert sorted(torn) == sorted(with_teardown)
    for step in torn:  # side by side: after everything ordered after it
        for later in plan.graph.successors(step):
            assert later not in torn or torn.index(later) < torn.index(step), (later, step)


@pytest.fixture
def occupied_port() -> Iterator[int]:
    """A loopback port some other program is already listening on."""
    with socket.socket() as holder:
        holder.bind(("127.0.0.1", 0))
        holder.listen()
        yield holder.getsockname()[1]


def run_failing(tmp_path: Path, profile: str, *settings: str, simulated: bool = False,
                env: dict[str, str] | None = None) -> tuple[list[str], dict[str, object]]:
    """Run ``profile`` (``a+b`` layers b over a) and expect a diagnosed failure."""
    report_path = tmp_path / "run.json"
    args = ["run", "--report", str(report_path)]
    for layer in profile.split("+"):
        args += ["--profile", layer]
    for setting in settings:
        args += ["--set", setting]
    result = initorch_command(*args, simulated=simulated, env=env)
    assert result.returncode == 1, result.stderr[-3000:]
    return result.stderr.strip().splitlines(), json.loads(report_path.read_text())


@pytest.mark.parametrize(
    ("failing", "profile", "settings", "simulated", "env", "diagnosis"),
    [
        ("import_backend", "npu", (), True, {"INITORCH_SIM_CANN_MISSING": "1"},
         "ascend-cann-not-loaded"),
        ("init_shared_mooncake_transfer_engine", "cpu",
         ("mooncake.metadata_server=http://127.0.0.1:1/metadata",), False, None,
         "mooncake-engine-init-failed"),
        ("alloc_host_mem_pool", "musa", ("device.host_allocator=cuda_host_register",), True,
         None, "cuda-host-register-on-non-cuda"),
        ("alloc_host_mem_pool", "npu", ("hicache.layout=layer_first",), True, None,
         "host-pool-layout-unsupported"),  # kernel_ascend io: SGLang's store would fail later
        ("alloc_host_mem_pool", "cpu", ("hicache.host_memory_reserve_mb=16777216",), False,
         None, "host-pool-over-budget"),  # SGLang's own message, on SGLang's rule
        ("init_shared_mooncake_transfer_engine", "cpu", ("device.mooncake_protocol=rdma",),
         False, None, "mooncake-transport-mismatch"),  # MC_FORCE_TCP: Mooncake installs tcp
        ("mooncake_master", "cpu", ("mooncake.master=127.0.0.1:1",), False, None,
         "mooncake-master-unreachable"),
        ("init_mooncake_store", "cpu", ("device.mooncake_protocol=ascend",
                                        "mooncake.transport_mismatch=warn"), False, None,
         "mooncake-unsupported-transport"),  # the CPU wheel's store has no ascend transport
        ("import_mooncake_pg", "cpu+mooncake-ep", (), False, None,
         "mooncake-pg-missing-build"),  # the non-CUDA wheel has no mooncake.pg for torch 2.13
    ],
)
def test_misconfiguration_fails_with_diagnosis_last(
        tmp_path: Path, failing: str, profile: str, settings: tuple[str, ...], simulated: bool,
        env: dict[str, str] | None, diagnosis: str) -> None:
    lines, report = run_failing(tmp_path, profile, *settings, simulated=simulated, env=env)
    assert lines[-1].startswith(f"diagnosis {diagnosis}:"), lines[-5:]
    steps = {s["step"]: s for s in report["steps"]}  # type: ignore[union-attr]
    assert steps[failing]["status"] == "failed"
    assert steps[failing]["diagnosis"]["id"] == diagnosis


def test_an_unsupported_layout_is_refused_before_anything_runs(tmp_path: Path) -> None:
    # It used to fail in register_mem_pool_host, after torch, the engine and the pool.
    report_path = tmp_path / "run.json"
    result = initorch_command("run", "--profile", "cpu", "--report", str(report_path),
                              "--set", "hicache.layout=page_frist")
    assert result.returncode == 2
    assert result.stderr.splitlines() == [
        "initorch: error: <command line>: hicache.layout must be one of layer_first, "
        "page_first, page_first_direct, page_first_kv_split, page_head, page_first_kv_spilt, "
        "got 'page_frist' (did you mean 'page_first'?)"]
    assert not report_path.exists()


def test_master_port_in_use_is_diagnosed(tmp_path: Path, occupied_port: int) -> None:
    lines, report = run_failing(tmp_path, "cpu", f"distributed.master_port={occupied_port}")
    assert lines[-1].startswith("diagnosis master-port-in-use:"), lines[-5:]
    steps = {s["step"]: s for s in report["steps"]}  # type: ignore[union-attr]
    assert steps["rendezvous"]["status"] == "failed"  # rank 0 serves the job's store there
    assert steps["init_torch_distributed"]["reason"] == "upstream failed: rendezvous"
    # Failing fast, nothing starts after the failed rendezvous, whether it needs the
    # process group (the store path) or not (the engine, the pool).
    for name in ("set_device", "init_shared_mooncake_transfer_engine", "alloc_host_mem_pool"):
        assert steps[name]["reason"] == "not started: step 'rendezvous' failed (fail fast)"
    for name in ("mooncake_master", "init_mooncake_store", "register_mem_pool_host"):
        assert steps[name]["reason"] == "upstream failed: rendezvous"  # via the process group
    torn = [t["step"] for t in report["teardown"]]  # type: ignore[union-attr]
    assert torn == ["launch_mooncake_master"]  # the master launched early is stopped


@pytest.fixture
def held_rpc_ports() -> Iterator[tuple[int, int]]:
    """Three consecutive ports, listened on by another program, in the range Mooncake
    accepts for MC_MIN_RPC_PORT..MC_MAX_RPC_PORT (it replaces one from 41000 up here)."""
    for attempt in range(20):
        low = 20000 + attempt * 467
        with contextlib.ExitStack() as held:
            try:
                for port in range(low, low + 3):
                    sock = held.enter_context(socket.socket())
                    sock.bind(("0.0.0.0", port))
                    sock.listen()
            except OSError:
                continue  # one is in use already: try the next range
            yield low, low + 2
            return
    pytest.skip("no three consecutive free ports from 20000")


def test_an_exhausted_rpc_port_range_says_no_port_was_free(
        held_rpc_ports: tuple[int, int]) -> None:
    low, high = held_rpc_ports
    result = initorch_command("run", "--profile", "cpu",
                              env={"MC_MIN_RPC_PORT": str(low), "MC_MAX_RPC_PORT": str(high)})
    assert result.returncode == 1, result.stderr[-3000:]
    last = result.stderr.rstrip("\n").splitlines()[-1]
    assert last.startswith("initorch: step 'init_shared_mooncake_transfer_engine' failed: the "
                           "transfer engine found no free port for its RPC service: every port "
                           f"from MC_MIN_RPC_PORT={low} to MC_MAX_RPC_PORT={high} is taken")
    assert "P2P: No valid port found for local TCP service." in last  # Mooncake's own line
    assert "RDMA" not in last and "no known diagnosis" not in last


def test_unknown_failure_is_reported_as_it_is(tmp_path: Path) -> None:
    lines, _ = run_failing(tmp_path, "cpu", "device.collective_backend=nccl")
    assert lines[-1].startswith("initorch: step 'init_torch_distributed' failed: ")
    assert "NCCL" in lines[-1] and lines[-1].endswith("(no known diagnosis)")


def test_missing_numpy_is_diagnosed(tmp_path: Path) -> None:
    """torch installed without NumPy (what 'pip install torch' gives) fails where ranks
    exchange objects: rank 1 receives the managed master's address with
    broadcast_object_list, which needs Tensor.numpy(); the diagnosis says to install it.
    (A world of one exchanges nothing and needs no NumPy.)"""
    import subprocess
    import sys

    shim = tmp_path / "no-numpy" / "numpy"
    shim.mkdir(parents=True)
    # What Python raises for a package that is not installed; torch checks exactly this type.
    (shim / "__init__.py").write_text(
        "raise ModuleNotFoundError(\"No module named 'numpy'\", name='numpy')\n",
        encoding="utf-8")
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    bin_dir = Path(sys.executable).parent
    result = subprocess.run(
        [str(bin_dir / "torchrun"), "--nproc-per-node=2", f"--master-port={port}",
         "--no-python", str(bin_dir / "initorch"), "run", "--profile", "cpu",
         "--set", "hicache.host_pool_mb=4"],
        env={**__import__("os").environ, "PYTHONPATH": str(shim.parent),
             "TMPDIR": str(tmp_path)},
        capture_output=True, text=True, timeout=300, check=False)
    assert result.returncode != 0
    # torchrun ends rank 0 and the master's watchdog with it: no master log is left.
    assert not list(tmp_path.glob("initorch-mooncake-master-*.log"))
    diagnosed = [line for line in result.stderr.splitlines()
                 if line.startswith("diagnosis numpy-missing:")]
    assert diagnosed, result.stderr[-3000:]
