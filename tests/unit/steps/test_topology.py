"""Host topology from sysfs/procfs/cgroups, and how cores are split among local ranks.

Machines other than this one are described as synthetic sysfs trees under
``tmp_path`` (the readers' ``root`` seam); the parsing is the real one.
"""

from __future__ import annotations

from pathlib import Path

import pytest
from hypothesis import given
from hypothesis import strategies as st

from initorch.steps.topology import (
    Core,
    NumaNode,
    format_cpu_list,
    host_available_bytes,
    local_world_size,
    parse_cpu_list,
    read_numa_nodes,
    split_cores,
)


def fake_sysfs(root: Path, nodes: dict[int, str], threads_per_core: int = 1,
               meminfo_kb: int = 8 << 20, cgroup: tuple[str, str] | None = None) -> Path:
    """A /sys and /proc tree: NUMA nodes with cpulists; CPUs numbered so that
    siblings are ``c`` and ``c + cores`` (Linux's usual enumeration)."""
    all_cpus = sorted(cpu for text in nodes.values() for cpu in parse_cpu_list(text))
    cores = len(all_cpus) // threads_per_core
    for node, text in nodes.items():
        folder = root / "sys/devices/system/node" / f"node{node}"
        folder.mkdir(parents=True)
        (folder / "cpulist").write_text(text + "\n")
    for cpu in all_cpus:
        topology = root / "sys/devices/system/cpu" / f"cpu{cpu}" / "topology"
        topology.mkdir(parents=True)
        (topology / "core_id").write_text(f"{cpu % cores}\n")
        (topology / "physical_package_id").write_text("0\n")
    (root / "proc").mkdir(parents=True, exist_ok=True)
    (root / "proc/meminfo").write_text(f"MemTotal: {2 * meminfo_kb} kB\n"
                                       f"MemAvailable:   {meminfo_kb} kB\n")
    if cgroup is not None:
        folder = root / "sys/fs/cgroup"
        folder.mkdir(parents=True, exist_ok=True)
        (folder / "memory.max").write_text(cgroup[0] + "\n")
        (folder / "memory.current").write_text(cgroup[1] + "\n")
    return root


@pytest.mark.parametrize(("text", "cpus"), [
    ("0", [0]), ("0-3", [0, 1, 2, 3]), ("0-1,4,6-7", [0, 1, 4, 6, 7]), ("", []), ("3\n", [3]),
])
def test_cpu_lists_round_trip(text: str, cpus: list[int]) -> None:
    assert parse_cpu_list(text) == cpus
    assert parse_cpu_list(format_cpu_list(cpus)) == cpus


@given(st.sets(st.integers(0, 300)))
def test_format_is_the_inverse_of_parse(cpus: set[int]) -> None:
    assert parse_cpu_list(format_cpu_list(cpus)) == sorted(cpus)


def test_two_numa_nodes_with_hyperthreads(tmp_path: Path) -> None:
    root = fake_sysfs(tmp_path, {0: "0-3,8-11", 1: "4-7,12-15"}, threads_per_core=2)
    nodes = read_numa_nodes(range(16), root)
    assert [n.node for n in nodes] == [0, 1]
    assert nodes[0].cores[0] == Core((0, 8))  # siblings stay together
    assert len(nodes[0].cores) == len(nodes[1].cores) == 4


def test_affinity_mask_is_respected(tmp_path: Path) -> None:
    root = fake_sysfs(tmp_path, {0: "0-3", 1: "4-7"})
    nodes = read_numa_nodes({2, 3, 4}, root)
    assert [(n.node, n.cpus) for n in nodes] == [(0, (2, 3)), (1, (4,))]
    assert read_numa_nodes({5, 6}, root)[0].node == 1  # node 0 has nothing allowed


def test_without_numa_sysfs_everything_is_node_0(tmp_path: Path) -> None:
    nodes = read_numa_nodes({0, 1, 5}, tmp_path)
    assert nodes == (NumaNode(0, (Core((0,)), Core((1,)), Core((5,)))),)


def test_one_rank_per_numa_node_as_sglang(tmp_path: Path) -> None:
    nodes = read_numa_nodes(range(16), fake_sysfs(tmp_path, {0: "0-7", 1: "8-15"}))
    shares = split_cores(nodes, 2)
    assert [(s.node, s.cpus) for s in shares] == [(0, tuple(range(8))), (1, tuple(range(8, 16)))]
    assert [s.node for s in split_cores(nodes, 1)] == [0]


def test_more_ranks_than_nodes_split_each_node(tmp_path: Path) -> None:
    nodes = read_numa_nodes(range(16), fake_sysfs(tmp_path, {0: "0-7", 1: "8-15"}))
    shares = split_cores(nodes, 4)
    assert [(s.node, s.cpus) for s in shares] == [
        (0, (0, 1, 2, 3)), (0, (4, 5, 6, 7)), (1, (8, 9, 10, 11)), (1, (12, 13, 14, 15))]


def test_more_ranks_than_cores_share_round_robin() -> None:
    nodes = (NumaNode(0, (Core((0,)), Core((1,)))),)
    shares = split_cores(nodes, 4)
    assert [s.cpus for s in shares] == [(0,), (1,), (0,), (1,)]
    assert all(s.shared for s in shares)


@given(cores=st.integers(1, 64), nodes=st.integers(1, 8), ranks=st.integers(1, 64))
def test_split_properties(cores: int, nodes: int, ranks: int) -> None:
    machine = tuple(NumaNode(n, tuple(Core((n * cores + c,)) for c in range(cores)))
                    for n in range(nodes))
    shares = split_cores(machine, ranks)
    assert [s.local_rank for s in shares] == list(range(ranks))
    every_cpu = {cpu for node in machine for cpu in node.cpus}
    for share in shares:
        assert share.cpus, "every rank gets at least one core"
        assert set(share.cpus) <= set(machine[[n.node for n in machine].index(share.node)].cpus)
    if not any(s.shared for s in shares):
        used = [cpu for s in shares for cpu in s.cpus]
        assert len(used) == len(set(used)), "ranks that do not share get disjoint cores"
        sizes_by_node: dict[int, list[int]] = {}
        for share in shares:
            sizes_by_node.setdefault(share.node, []).append(len(share.cores))
        assert all(max(s) - min(s) <= 1 for s in sizes_by_node.values()), "near-equal parts"
    assert {cpu for s in shares for cpu in s.cpus} <= every_cpu


def test_split_refuses_nothing_to_split() -> None:
    with pytest.raises(ValueError, match="no usable CPU"):
        split_cores((), 1)
    with pytest.raises(ValueError, match="at least 1"):
        split_cores((NumaNode(0, (Core((0,)),)),), 0)


@pytest.mark.parametrize(("env", "size"), [
    ({}, 1), ({"WORLD_SIZE": "1"}, 1), ({"WORLD_SIZE": "4"}, None),
    ({"WORLD_SIZE": "4", "LOCAL_WORLD_SIZE": "2"}, 2), ({"LOCAL_WORLD_SIZE": "3"}, 3),
])
def test_local_world_size_from_the_launcher(env: dict[str, str], size: int | None) -> None:
    assert local_world_size(env) == size


@pytest.mark.parametrize("raw", ["0", "-1", "two", "1.5"])
def test_local_world_size_rejects_garbage(raw: str) -> None:
    with pytest.raises(ValueError, match="LOCAL_WORLD_SIZE"):
        local_world_size({"LOCAL_WORLD_SIZE": raw})


def test_host_memory_is_capped_by_the_cgroup(tmp_path: Path) -> None:
    free = fake_sysfs(tmp_path / "a", {0: "0"}, meminfo_kb=1 << 20)
    assert host_available_bytes(free) == 1 << 30
    capped = fake_sysfs(tmp_path / "b", {0: "0"}, meminfo_kb=1 << 20,
                        cgroup=(str(600 << 20), str(100 << 20)))
    assert host_available_bytes(capped) == 500 << 20
    unlimited = fake_sysfs(tmp_path / "c", {0: "0"}, meminfo_kb=1 << 20, cgroup=("max", "5"))
    assert host_available_bytes(unlimited) == 1 << 30


def test_this_machine_is_readable() -> None:
    import os

    nodes = read_numa_nodes(os.sched_getaffinity(0))
    assert {cpu for n in nodes for cpu in n.cpus} == os.sched_getaffinity(0)
    assert host_available_bytes() > 0
