"""This host's CPU topology and memory, read from sysfs, procfs and cgroups.

Plain file reads, no torch and no psutil: ``initorch plan`` uses them to show
which cores each local rank will get.  Every reader takes ``root`` (default
``/``) so that tests can point it at a synthetic tree of another machine: that
is the only seam, the parsing is the real one.

Upstream (SGLang 0.5.23): ``utils/common.py`` ``get_physical_cpus_by_numa``
keeps one CPU per physical core (``core_id`` and socket) of each NUMA node,
intersected with the process's affinity mask, and ``get_free_cpu_memory``
takes the smaller of ``MemAvailable`` and the cgroup v2 limit minus usage.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Mapping
from pathlib import Path

from initorch.plugin import record

NODE_DIR = "sys/devices/system/node"
CPU_DIR = "sys/devices/system/cpu"
_NODE_NAME = re.compile(r"^node(\d+)$")


@record
class Core:
    """One physical core: the logical CPUs (hyper-thread siblings) it runs."""

    cpus: tuple[int, ...]


@record
class NumaNode:
    """A NUMA node with the physical cores of it this process may use."""

    node: int
    cores: tuple[Core, ...]

    @property
    def cpus(self) -> tuple[int, ...]:
        return tuple(sorted(cpu for core in self.cores for cpu in core.cpus))


@record
class RankShare:
    """The cores one local rank is pinned to; ``shared`` when ranks outnumber cores."""

    local_rank: int
    node: int
    cores: tuple[Core, ...]
    shared: bool = False

    @property
    def cpus(self) -> tuple[int, ...]:
        return tuple(sorted(cpu for core in self.cores for cpu in core.cpus))


def parse_cpu_list(text: str) -> list[int]:
    """``"0-3,8,10-11"`` (the kernel's cpulist format) -> ``[0, 1, 2, 3, 8, 10, 11]``."""
    cpus: list[int] = []
    for part in text.strip().split(","):
        if not part:
            continue
        first, _, last = part.partition("-")
        cpus.extend(range(int(first), int(last or first) + 1))
    return cpus


def format_cpu_list(cpus: Iterable[int]) -> str:
    """The inverse of :func:`parse_cpu_list`: ranges for runs of consecutive CPUs."""
    runs: list[list[int]] = []
    for cpu in sorted(set(cpus)):
        if runs and cpu == runs[-1][-1] + 1:
            runs[-1].append(cpu)
        else:
            runs.append([cpu])
    return ",".join(str(run[0]) if len(run) == 1 else f"{run[0]}-{run[-1]}" for run in runs)


def _read(path: Path) -> str | None:
    try:
        return path.read_text(encoding="ascii").strip()
    except (OSError, UnicodeDecodeError):
        return None


def _physical_cores(cpus: Iterable[int], root: Path) -> tuple[Core, ...]:
    """Group logical CPUs by (socket, core id); a CPU without topology files is a core."""
    by_core: dict[tuple[str, str] | int, list[int]] = {}
    for cpu in sorted(cpus):
        topology = root / CPU_DIR / f"cpu{cpu}" / "topology"
        core_id = _read(topology / "core_id")
        socket = _read(topology / "physical_package_id")
        key: tuple[str, str] | int = (socket or "", core_id) if core_id is not None else cpu
        by_core.setdefault(key, []).append(cpu)
    return tuple(sorted((Core(tuple(c)) for c in by_core.values()), key=lambda c: c.cpus))


def read_numa_nodes(allowed: Iterable[int], root: Path = Path("/")) -> tuple[NumaNode, ...]:
    """NUMA nodes with the physical cores of ``allowed`` CPUs (the affinity mask).

    Without NUMA information in sysfs (some containers, non-Linux kernels) every
    allowed CPU is on one node 0.  Nodes with no allowed CPU are left out.
    """
    allowed_set = set(allowed)
    node_cpus: dict[int, list[int]] = {}
    node_root = root / NODE_DIR
    if node_root.is_dir():
        for entry in node_root.iterdir():
            match = _NODE_NAME.match(entry.name)
            text = _read(entry / "cpulist") if match else None
            if match and text is not None:
                node_cpus[int(match.group(1))] = parse_cpu_list(text)
    if not node_cpus:
        node_cpus = {0: sorted(allowed_set)}
    nodes = []
    for node, cpus in sorted(node_cpus.items()):
        usable = [cpu for cpu in cpus if cpu in allowed_set]
        if usable:
            nodes.append(NumaNode(node, _physical_cores(usable, root)))
    return tuple(nodes)


def split_cores(nodes: tuple[NumaNode, ...], local_world_size: int) -> tuple[RankShare, ...]:
    """Each local rank's share of ``nodes``.

    With at most one rank per node, rank ``i`` gets node ``i`` whole (SGLang's
    default binding, ``utils/numa_utils.py`` ``init_threads_binding``: one rank
    per NUMA node).  With more ranks than nodes, consecutive ranks fill a node
    and split its physical cores into contiguous, near-equal parts, siblings
    together.  With more ranks on a node than it has cores, ranks share cores
    round-robin and are marked ``shared``.
    """
    if local_world_size < 1:
        raise ValueError(f"local world size must be at least 1, got {local_world_size}")
    if not nodes:
        raise ValueError("no usable CPU: the affinity mask and the NUMA nodes do not overlap")
    spread = local_world_size > len(nodes)
    ranks_on: dict[int, list[int]] = {}
    for rank in range(local_world_size):
        index = rank * len(nodes) // local_world_size if spread else rank
        ranks_on.setdefault(index, []).append(rank)
    shares: list[RankShare] = []
    for index, ranks in sorted(ranks_on.items()):
        node = nodes[index]
        cores = node.cores
        if len(ranks) > len(cores):
            shares += [RankShare(rank, node.node, (cores[i % len(cores)],), shared=True)
                       for i, rank in enumerate(ranks)]
            continue
        base, extra = divmod(len(cores), len(ranks))
        start = 0
        for i, rank in enumerate(ranks):
            size = base + (1 if i < extra else 0)
            shares.append(RankShare(rank, node.node, cores[start:start + size]))
            start += size
    return tuple(sorted(shares, key=lambda share: share.local_rank))


def local_world_size(environ: Mapping[str, str]) -> int | None:
    """How many ranks share this host, as the launcher says.

    ``LOCAL_WORLD_SIZE`` (torchrun) when set; a lone process (no ``WORLD_SIZE``,
    or 1) is a world of one; otherwise it is unknown (``None``).
    """
    raw = environ.get("LOCAL_WORLD_SIZE", "").strip()
    if raw:
        if not raw.isdigit() or int(raw) < 1:
            raise ValueError(f"LOCAL_WORLD_SIZE={raw!r} is not a whole number >= 1")
        return int(raw)
    world = environ.get("WORLD_SIZE", "").strip()
    return 1 if world in ("", "1") else None


def host_available_bytes(root: Path = Path("/")) -> int:
    """Host memory available to this process: ``MemAvailable``, capped by the
    cgroup v2 limit minus current usage when a limit is set."""
    meminfo = _read(root / "proc" / "meminfo") or ""
    match = re.search(r"^MemAvailable:\s+(\d+)\s*kB", meminfo, re.MULTILINE)
    if match is None:
        raise OSError(f"cannot read MemAvailable from {root / 'proc' / 'meminfo'}")
    available = int(match.group(1)) * 1024
    limit = _read(root / "sys" / "fs" / "cgroup" / "memory.max")
    usage = _read(root / "sys" / "fs" / "cgroup" / "memory.current")
    if limit is not None and usage is not None and limit.isdigit() and usage.isdigit():
        available = min(available, max(0, int(limit) - int(usage)))
    return available
