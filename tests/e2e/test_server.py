"""The server overlay's steps for real on CPU: 1, 2 and 4 ranks under torchrun.

CPU binding is read back from every thread of each rank, groups prove their
members with an all-reduce, memory figures are gathered over the CPU group,
and the unbalanced-memory diagnosis fires on a faked figure (the test seam of
``memory_baseline``) on every rank at once.
"""

from __future__ import annotations

import json
import os
import socket
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from initorch.steps.topology import format_cpu_list, parse_cpu_list

SCRIPT = Path(__file__).parents[1] / "support" / "torchrun_server_rank.py"
# Mooncake and the host pool are covered elsewhere; here they would only add time.
# parallel.pre_warm: the warm-up's one-hot all-reduce proves each group's members.
LEAN = {"mooncake.enabled": False, "hicache.enabled": False, "parallel.pre_warm": True}


def free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port: int = probe.getsockname()[1]
        return port


def run_ranks(out: Path, ranks: int, settings: dict[str, Any], *extra: str
              ) -> dict[int, dict[str, Any]]:
    """Start ``ranks`` ranks of the server script under torchrun; results by rank."""
    command = [str(Path(sys.executable).parent / "torchrun"), f"--nproc-per-node={ranks}",
               f"--master-port={free_port()}", str(SCRIPT), str(out),
               json.dumps({**LEAN, **settings}), *extra]
    result = subprocess.run(command, capture_output=True, text=True, timeout=300, check=False)
    assert result.returncode == 0, result.stdout[-3000:] + result.stderr[-4000:]
    found = [json.loads(path.read_text()) for path in sorted(out.glob("rank*.json"))]
    assert len(found) == ranks, result.stdout[-3000:] + result.stderr[-4000:]
    return {entry["rank"]: entry for entry in found}


def assert_bound_and_restored(entry: dict[str, Any]) -> None:
    """Every thread ran on the rank's share during the run and got its mask back after."""
    share = format_cpu_list(entry["cpus"])
    assert set(entry["masks_during"].values()) == {share}, entry["masks_during"]
    assert entry["torch_threads_during"] == entry["threads"]
    original = format_cpu_list(entry["before"]["mask"])
    assert set(entry["masks_after"].values()) == {original}
    assert entry["torch_threads_after"] == entry["before"]["threads"]


@pytest.mark.parametrize("executor", ["sequential", "parallel"])
def test_one_rank(executor: str, tmp_path: Path) -> None:
    result = run_ranks(tmp_path, 1, {}, "--executor", executor)[0]
    assert result["ok"], result
    assert result["cpus"] == result["before"]["mask"]  # a lone rank keeps every allowed core
    assert_bound_and_restored(result)
    assert result["groups"] == {"world": [0], "tp": [0], "pp": [0]}
    assert len(result["per_rank"]) == 1 and result["per_rank"][0] > 0
    # Side by side, the binding is undone once every step ordered after it is (the process
    # group and the model-parallel groups hang off set_device, which comes after it); the
    # rendezvous is independent of it and may be undone later.
    order = result["teardown"]
    assert order.index("bind_cpu_threads") > max(
        order.index("init_torch_distributed"), order.index("init_model_parallel")), order


def test_two_ranks_get_one_core_each_on_this_machine(tmp_path: Path) -> None:
    results = run_ranks(tmp_path, 2, {"parallel.tp_size": 2})
    allowed = results[0]["before"]["mask"]
    for entry in results.values():
        assert entry["ok"], entry
        assert_bound_and_restored(entry)
        assert entry["groups"]["tp"] == [0, 1]
        assert entry["warmed"]["tp"] == [0, 1]
        assert entry["per_rank"] == results[0]["per_rank"]  # gathered: the same everywhere
    cpus = [set(results[r]["cpus"]) for r in (0, 1)]
    assert cpus[0] | cpus[1] <= set(allowed)
    if len(allowed) >= 2:
        assert not cpus[0] & cpus[1], "two ranks on two or more cores do not share"
    if len(allowed) == 2:
        assert [len(c) for c in cpus] == [1, 1]


def test_four_ranks_tp2_pp2_groups_prove_their_members(tmp_path: Path) -> None:
    results = run_ranks(tmp_path, 4, {"parallel.tp_size": 2, "parallel.pp_size": 2})
    expected_tp = {0: [0, 1], 1: [0, 1], 2: [2, 3], 3: [2, 3]}
    expected_pp = {0: [0, 2], 1: [1, 3], 2: [0, 2], 3: [1, 3]}
    for rank, entry in results.items():
        assert entry["ok"], entry
        assert entry["groups"] == {"world": [0, 1, 2, 3], "tp": expected_tp[rank],
                                   "pp": expected_pp[rank]}
        assert entry["warmed"] == entry["groups"]  # the all-reduce reached exactly these
        assert_bound_and_restored(entry)
        assert len(entry["per_rank"]) == 4
    assert all(parse_cpu_list(format_cpu_list(e["cpus"])) for e in results.values())


def test_four_ranks_with_expert_groups(tmp_path: Path) -> None:
    results = run_ranks(tmp_path, 4, {"parallel.tp_size": 4, "parallel.ep_size": 2})
    for rank, entry in results.items():
        assert entry["ok"], entry
        assert entry["warmed"]["ep"] == [[0, 2], [1, 3]][rank % 2]


def test_unbalanced_memory_fails_every_rank_with_the_diagnosis(tmp_path: Path) -> None:
    results = run_ranks(tmp_path, 2, {"parallel.tp_size": 2}, "--short-rank", "1")
    for entry in results.values():
        assert not entry["ok"]
        assert entry["failed"] == "memory_baseline"
        assert entry["finding"] == "tp-memory-unbalanced"
        assert entry["error"].startswith("The memory capacity is unbalanced.")
        assert "rank 1 has 25% of rank 0's" in entry["error"] or \
            "rank 1 has 24% of rank 0's" in entry["error"]
        # Failed runs tear down what completed, groups and binding included.
        assert {"init_model_parallel", "bind_cpu_threads"} <= set(entry["teardown"])
        assert set(entry["masks_after"].values()) == {format_cpu_list(entry["before"]["mask"])}


def test_with_one_rank_per_tensor_group_the_balance_is_not_checked(tmp_path: Path) -> None:
    # SGLang 0.5.23 bootstrap.py:214 checks the balance only when tp_size > 1.
    results = run_ranks(tmp_path, 2, {"parallel.pp_size": 2}, "--short-rank", "1")
    for entry in results.values():
        assert entry["ok"], entry
        assert entry["per_rank"][1] < 0.5 * entry["per_rank"][0]  # unbalanced, yet accepted


def test_world_size_mismatch_fails_at_run_time_too(tmp_path: Path) -> None:
    command = [str(Path(sys.executable).parent / "initorch"), "run", "-p", "cpu", "-p", "server",
               "--set", "parallel.tp_size=2", "--set", "mooncake.enabled=false"]
    env = {k: v for k, v in os.environ.items() if k not in ("WORLD_SIZE", "LOCAL_WORLD_SIZE")}
    result = subprocess.run(command, capture_output=True, text=True, timeout=120, check=False,
                            env=env)
    assert result.returncode == 1, result.stderr[-3000:]
    assert "the process group has 1 rank(s), but parallel.tp_size (2) x parallel.pp_size (1)" \
        in result.stderr
