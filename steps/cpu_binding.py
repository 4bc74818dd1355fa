"""``bind_cpu_threads``: pin each local rank to its share of cores, size torch's pool.

Ranks on one host that all float over every core fight for them: OpenMP pools
of N threads per rank on N cores, and memory far from the NUMA node a rank's
device hangs off.  SGLang 0.5.23 binds each scheduler process before anything
else (``managers/scheduler.py`` ``configure_scheduler_process``:
``numa_bind_to_node``; ``distributed/bootstrap.py`` ``init_parallel_runtime``:
``_bind_threads_if_cpu`` before ``set_device``), one rank per NUMA node.

Here the share comes from :func:`~initorch.steps.topology.split_cores`: a whole
NUMA node per rank where there are enough nodes, else an equal part of a node's
physical cores, always within the process's current affinity mask (a container
or ``taskset`` limit is respected, never widened).  The mask is applied to every
thread of the process (``sched_setaffinity`` on Linux binds only the thread it
names), and torch gets one thread per physical core of the share, unless
``cpu_binding.threads`` says otherwise.  Teardown restores both.

Where SGLang binds differs per device (0.5.23 ``utils/numa_utils.py:454-497``,
``distributed/bootstrap.py:75-87``): only on device ``cpu`` does it bind each rank's
threads, to one NUMA node per rank, or to the rank's entry of
``SGLANG_CPU_OMP_THREADS_BIND`` (``"0-31|32-63"``, indexed by the rank's device id),
which initorch reads the same way.  On CUDA and XPU it binds the process to the
GPU's NUMA node when it spawns the rank (numactl); initorch cannot act before its
process exists and splits cores by local rank instead (``cpu_binding.policy:
split``, a deliberate difference).  On NPU, MUSA and ROCm SGLang binds nothing, so
those profiles set ``cpu_binding.policy: none``.  Where SGLang would refuse more cpu
ranks than NUMA nodes without ``SGLANG_CPU_OMP_THREADS_BIND``, initorch splits the
nodes' cores instead (also deliberate: one-node hosts run several ranks).

How many ranks share the host is the launcher's ``LOCAL_WORLD_SIZE`` (torchrun);
a lone process is a world of one.  ``initorch plan`` shows each local rank's
cores for the environment it runs in: under torchrun, or with
``LOCAL_WORLD_SIZE=N`` exported to preview a launch, one line per local rank.
"""

from __future__ import annotations

import os
from collections.abc import Iterable, Mapping

from initorch.plugin import PreviewContext, StepContext, StepError, record, setting, step
from initorch.steps.topology import (
    RankShare,
    format_cpu_list,
    local_world_size,
    parse_cpu_list,
    read_numa_nodes,
    split_cores,
)

# macOS (the mps profile) has no CPU affinity API: only the thread count is set there.
CAN_PIN = hasattr(os, "sched_setaffinity") and hasattr(os, "sched_getaffinity")

THREADS = setting("cpu_binding.threads", int, default=0, minimum=0, maximum=4096,
                  description="torch threads per rank; 0 is one per physical core of the "
                              "rank's share")


POLICY = setting(
    "cpu_binding.policy", str, default="split", choices=("split", "none"),
    description="split: pin each local rank to its share of cores (SGLANG_CPU_OMP_THREADS_BIND "
                "wins on cpu); none: leave affinity and torch threads alone, as SGLang does "
                "on npu, musa and rocm")
OMP_THREADS_BIND = "SGLANG_CPU_OMP_THREADS_BIND"


@record
class CpuBinding:
    """What this rank was bound to, and what to restore on teardown."""

    share: RankShare | None
    threads: int
    previous_mask: frozenset[int] | None
    previous_threads: int

    @property
    def cpus(self) -> tuple[int, ...]:
        return self.share.cpus if self.share is not None else ()


def plan_shares(local_world: int, allowed: Iterable[int]) -> tuple[RankShare, ...]:
    """Every local rank's share of this host's allowed CPUs."""
    return split_cores(read_numa_nodes(allowed), local_world)


def sglang_thread_bind(environ: Mapping[str, str], index: int,
                       allowed: Iterable[int]) -> RankShare | None:
    """The rank's entry of ``SGLANG_CPU_OMP_THREADS_BIND`` (``|``-separated cpu lists, one
    per rank, indexed by the device id: ``numa_utils.py:485-497``), or None when it is
    unset or ``all``.  Entries outside the process's allowed CPUs are refused."""
    raw = environ.get(OMP_THREADS_BIND, "all").strip()
    if raw == "all":
        return None
    entries = raw.split("|")
    if not 0 <= index < len(entries):
        raise StepError(f"NUMA index {index} is out of range for the {len(entries)} "
                        f"{OMP_THREADS_BIND} entries",
                        hint="give one '|'-separated cpu list per rank, as SGLang asks")
    try:
        cpus = set(parse_cpu_list(entries[index]))
    except ValueError as exc:
        raise StepError(f"{OMP_THREADS_BIND} entry {entries[index]!r}: {exc}",
                        hint="write cpu lists as the kernel does: 0-31|32-63") from None
    outside = cpus - set(allowed)
    if not cpus or outside:
        raise StepError(f"{OMP_THREADS_BIND} entry {entries[index]!r} names CPUs this process "
                        f"may not use ({format_cpu_list(sorted(outside))})",
                        hint="check taskset -p / the container's cpuset")
    nodes = read_numa_nodes(cpus)
    return RankShare(index, nodes[0].node, tuple(c for node in nodes for c in node.cores))


def _pin_every_thread(cpus: Iterable[int]) -> None:
    """Apply ``cpus`` to every thread of this process (threads started later inherit it)."""
    mask = set(cpus)
    for task in os.listdir("/proc/self/task"):
        try:
            os.sched_setaffinity(int(task), mask)
        except ProcessLookupError:
            continue  # the thread ended between listing and binding


def _local_world(ctx: StepContext) -> int:
    """The ranks on this host: as the launcher described the job (torchrun, SLURM,
    ``--nproc-per-node``), else ``LOCAL_WORLD_SIZE`` in the environment."""
    if ctx.rank.local_world_size is not None:
        return ctx.rank.local_world_size
    environ = os.environ
    try:
        size = local_world_size(environ)
    except ValueError as exc:
        raise StepError(str(exc), hint="check the variables the launcher exports") from None
    if size is None:
        raise StepError(
            f"WORLD_SIZE={environ.get('WORLD_SIZE')} but LOCAL_WORLD_SIZE is not set: cannot "
            "tell how many ranks share this host",
            hint="start the ranks with torchrun, or export LOCAL_WORLD_SIZE",
        )
    return size


@step(
    "bind_cpu_threads",
    description="Pin this local rank to its share of cores (its NUMA node) and size torch's "
                "thread pool",
    requires=["import_backend"],
    before=["set_device"],
    settings=(THREADS, POLICY),
)
def bind_cpu_threads(ctx: StepContext) -> CpuBinding:
    import torch

    configured = int(ctx.setting("cpu_binding.threads"))
    previous_threads = torch.get_num_threads()
    if ctx.setting("cpu_binding.policy") == "none":
        ctx.log.info("cpu_binding_skipped", threads=previous_threads,
                     reason="cpu_binding.policy is none: SGLang binds no threads on this device")
        return CpuBinding(None, previous_threads, None, previous_threads)
    if not CAN_PIN:
        threads = configured or previous_threads
        torch.set_num_threads(threads)
        ctx.log.info("cpu_threads_set", threads=threads, pinned=False,
                     reason="this platform has no CPU affinity API")
        return CpuBinding(None, threads, None, previous_threads)
    local_world = _local_world(ctx)
    if ctx.rank.local_rank >= local_world:
        raise StepError(f"LOCAL_RANK={ctx.rank.local_rank} is outside "
                        f"LOCAL_WORLD_SIZE={local_world}",
                        hint="check the variables the launcher exports")
    previous_mask = frozenset(os.sched_getaffinity(0))
    given = sglang_thread_bind(os.environ, ctx.rank.local_rank, previous_mask) \
        if ctx.device.type == "cpu" else None
    try:
        share = given or plan_shares(local_world, previous_mask)[ctx.rank.local_rank]
    except ValueError as exc:
        raise StepError(str(exc), hint="check the process's CPU affinity (taskset -p)") from None
    threads = configured or len(share.cores)
    _pin_every_thread(share.cpus)
    torch.set_num_threads(threads)
    ctx.log.info("cpu_threads_bound", cpus=format_cpu_list(share.cpus), node=share.node,
                 threads=threads, shared=share.shared, local_world_size=local_world)
    return CpuBinding(share, threads, previous_mask, previous_threads)


@bind_cpu_threads.teardown
def unbind_cpu_threads(ctx: StepContext, binding: CpuBinding) -> None:
    import torch

    if binding.previous_mask is not None:
        _pin_every_thread(binding.previous_mask)
    torch.set_num_threads(binding.previous_threads)


@bind_cpu_threads.preview
def preview_cpu_binding(ctx: PreviewContext) -> list[str]:
    if ctx.setting("cpu_binding.policy") == "none":
        return ["cpu_binding.policy none: affinity and torch threads left as they are"]
    if not CAN_PIN:
        return ["this platform has no CPU affinity API: only torch's thread count is set"]
    try:
        local_world = local_world_size(ctx.environ)
    except ValueError as exc:
        ctx.reject(str(exc), hint="export a whole number, as torchrun does")
    if local_world is None:
        return [f"WORLD_SIZE={ctx.environ.get('WORLD_SIZE')} without LOCAL_WORLD_SIZE: the "
                "split is unknown (the run fails unless LOCAL_WORLD_SIZE is set)"]
    configured = int(ctx.setting("cpu_binding.threads"))
    allowed = os.sched_getaffinity(0)
    try:
        shares = plan_shares(local_world, allowed)
    except ValueError as exc:
        ctx.reject(str(exc), hint="check the process's CPU affinity (taskset -p)")
    source = ("LOCAL_WORLD_SIZE" if "LOCAL_WORLD_SIZE" in ctx.environ
              else "one process; export LOCAL_WORLD_SIZE=N to preview a torchrun launch")
    lines = [f"{local_world} local rank(s) ({source}); allowed cpus "
             f"{format_cpu_list(allowed)}"]
    for share in shares:
        shared = ", shared with other ranks" if share.shared else ""
        lines.append(f"local rank {share.local_rank}: cpus {format_cpu_list(share.cpus)} "
                     f"(node {share.node}, {len(share.cores)} core(s){shared}) -> "
                     f"{configured or len(share.cores)} torch thread(s)")
    return lines


STEPS = (bind_cpu_threads,)
