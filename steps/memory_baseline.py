"""``memory_baseline``: each rank's available memory before weights, and a balance check.

SGLang 0.5.23 measures this once the groups exist and before the weights load
(``distributed/bootstrap.py`` ``measure_pre_model_load_memory``): every rank
queries its device, the figures are reduced over the world's CPU (gloo) group,
and the smallest is what the KV cache is later sized from
(``mem_cache/kv_cache_configurator.py`` ``_profile_available_bytes``).  When a
rank has clearly less than the others, something else holds memory on its
device, and SGLang stops with "The memory capacity is unbalanced"
(``_check_tp_memory_balance``: the minimum below 0.9 of the local figure).

Here every figure is gathered (not only the minimum), so the error names the
rank that is short, and every rank reaches the same verdict: unbalanced when
the smallest figure is below ``memory.balance_threshold`` times the largest,
which is exactly when SGLang's check fails on some rank.

How a device reports its free memory is device knowledge, chosen by the
profile setting ``memory.query``, declared with its table of queries (no branch
on device strings; a name is checked at plan time).  The table is also the seam
a plugin (or a test) uses to add a query,
``registry.settings.extend_choices("memory.query", {name: MemoryQuerySpec(...)})``:
a test fakes one rank's figure by registering a query, while the gather, the
check and the diagnosis run for real.
"""

from __future__ import annotations

import os
from collections.abc import Callable
from types import ModuleType
from typing import Any

from initorch.plugin import PreviewContext, StepContext, StepError, record, setting, step
from initorch.steps.import_backend import TORCH_MODULE
from initorch.steps.set_device import HOST_DEVICE_TYPES, VISIBLE_DEVICES_ENV, device_index
from initorch.steps.topology import host_available_bytes, local_world_size

GIB = float(1 << 30)

MemoryQuery = Callable[[StepContext, ModuleType, int | None], int]
"""``(ctx, torch device module, device index or None) -> bytes available to this rank``."""


def query_host(ctx: StepContext, module: ModuleType, index: int | None) -> int:
    """CPU: this rank's share of the host's available memory.

    SGLang (``utils/common.py`` ``get_available_gpu_memory``, device cpu) divides
    the host figure by the NUMA node count, one rank per node; ranks here share
    the host, so it is divided by the ranks on this host.
    """
    return host_available_bytes() // (ctx.rank.local_world_size
                                     or local_world_size(os.environ) or 1)


def query_mem_get_info(ctx: StepContext, module: ModuleType, index: int | None) -> int:
    """CUDA, ROCm, NPU, MUSA: free bytes from ``<module>.mem_get_info``, after
    ``empty_cache`` so that cached blocks count as free (as SGLang does).  An integrated
    CUDA GPU uses host memory, and ``mem_get_info`` leaves out the page cache there, so
    SGLang takes the host's available memory instead (0.5.23 ``utils/common.py:448-456``,
    ``props.is_integrated``); so does this query."""
    empty_cache = getattr(module, "empty_cache", None)
    if empty_cache is not None:
        empty_cache()
    if ctx.device.type in ("cuda", "rocm") and getattr(
            module.get_device_properties(index or 0), "is_integrated", False):
        return host_available_bytes()
    free, _total = module.mem_get_info(index) if index is not None else module.mem_get_info()
    return int(free)


def query_total_minus_allocated(ctx: StepContext, module: ModuleType, index: int | None) -> int:
    """XPU: total memory of the device minus what torch has allocated on it."""
    device = index if index is not None else 0
    return int(module.get_device_properties(device).total_memory
               - module.memory_allocated(device))


def query_mps_working_set(ctx: StepContext, module: ModuleType, index: int | None) -> int:
    """MPS: Metal's working-set headroom, bounded by the host's available memory."""
    headroom = max(0, int(module.recommended_max_memory())
                   - int(module.driver_allocated_memory()))
    return min(host_available_bytes(), headroom)


@record
class MemoryQuerySpec:
    """A named way to ask a device for its free memory; ``summary`` is what the
    dry run shows (``{module}`` is the profile's device module)."""

    query: MemoryQuery
    summary: str


QUERY = setting(
    "memory.query", str, required=True,
    choices={
        "host": MemoryQuerySpec(query_host, "host MemAvailable (capped by the cgroup limit) "
                                            "divided by the ranks on this host"),
        "mem_get_info": MemoryQuerySpec(query_mem_get_info,
                                        "free bytes of {module}.mem_get_info after "
                                        "{module}.empty_cache()"),
        "total_minus_allocated": MemoryQuerySpec(query_total_minus_allocated,
                                                 "{module} total_memory - memory_allocated"),
        "mps_working_set": MemoryQuerySpec(query_mps_working_set,
                                           "Metal recommended_max_memory - "
                                           "driver_allocated_memory, at most the host's "
                                           "available memory"),
    },
    description="how the device reports its free memory: host, mem_get_info, "
                "total_minus_allocated, mps_working_set; plugins add theirs")
BALANCE_CHECK = setting("memory.balance_check", bool, default=True,
                        description="fail when ranks start with unbalanced memory")
BALANCE_THRESHOLD = setting(
    "memory.balance_threshold", float, default=0.9, exclusive_minimum=0, maximum=1,
    description="every rank needs at least this share of the best rank's memory (SGLang: "
                "0.9)")


@record
class MemoryBaseline:
    """Bytes available to every rank before the weights load."""

    query: str
    rank: int
    per_rank: tuple[int, ...]

    @property
    def local_bytes(self) -> int:
        return self.per_rank[self.rank]

    @property
    def available_bytes(self) -> int:
        """The smallest rank's figure: what pools are sized from, on every rank."""
        return min(self.per_rank)

    def balanced(self, threshold: float) -> bool:
        return self.available_bytes >= threshold * max(self.per_rank)

    def pool_budget(self, mem_fraction_static: float, used_bytes: int) -> int:
        """Bytes left for a pool: SGLang's ``rest_memory``, free memory after
        ``used_bytes`` (the weights) minus the slack
        ``baseline x (1 - mem_fraction_static)`` kept for activations."""
        slack = self.available_bytes * (1.0 - mem_fraction_static)
        return max(0, int(self.available_bytes - used_bytes - slack))

    def unbalanced_message(self, threshold: float) -> str:
        """SGLang's message, with every rank's figure and the rank that is short."""
        figures = ", ".join(f"rank {r} {b / GIB:.2f}" for r, b in enumerate(self.per_rank))
        low = self.per_rank.index(min(self.per_rank))
        high = self.per_rank.index(max(self.per_rank))
        share = self.per_rank[low] / self.per_rank[high] if self.per_rank[high] else 0.0
        return (f"The memory capacity is unbalanced. Some GPUs may be occupied by other "
                f"processes. Available memory per rank (GiB, {self.query}): {figures}; rank "
                f"{low} has {share:.0%} of rank {high}'s, below memory.balance_threshold "
                f"{threshold:g}")


def gather_figures(local: int, group: Any) -> tuple[int, ...]:
    """Every rank's figure, gathered over ``group`` (the world's CPU group)."""
    import torch
    import torch.distributed as dist

    size = dist.get_world_size(group)
    mine = torch.tensor([local], dtype=torch.int64)
    gathered = [torch.zeros(1, dtype=torch.int64) for _ in range(size)]
    dist.all_gather(gathered, mine, group=group)
    return tuple(int(t.item()) for t in gathered)


@step(
    "memory_baseline",
    description="Measure each rank's available memory before the weights; fail when ranks "
                "are unbalanced",
    requires=["import_backend", "init_model_parallel"],
    reads=["import_backend", "init_model_parallel"],
    after=["warmup_collectives"],
    device_bound=True,
    # device.torch_module: the preview names the module the query calls.
    settings=(QUERY, BALANCE_CHECK, BALANCE_THRESHOLD, VISIBLE_DEVICES_ENV, TORCH_MODULE),
)
def memory_baseline(ctx: StepContext) -> MemoryBaseline:
    query: MemoryQuerySpec = ctx.implementation("memory.query")
    threshold = float(ctx.setting("memory.balance_threshold"))
    module: ModuleType = ctx.output("import_backend")
    index = None if ctx.device.type in HOST_DEVICE_TYPES else device_index(ctx)
    parallel = ctx.output("init_model_parallel")
    local = int(query.query(ctx, module, index))
    baseline = MemoryBaseline(str(ctx.setting("memory.query")), parallel.world.rank_in_group,
                              gather_figures(local, parallel.world.cpu_group))
    ctx.log.info("memory_baseline", local_gib=round(baseline.local_bytes / GIB, 3),
                 available_gib=round(baseline.available_bytes / GIB, 3),
                 per_rank_gib=[round(b / GIB, 3) for b in baseline.per_rank])
    # SGLang 0.5.23 bootstrap.py:214 checks the balance only with tp_size > 1: with one
    # rank per tensor group there is nothing to balance a rank's KV pool against.
    if ctx.setting("memory.balance_check") and parallel.layout.tp_size > 1 \
            and not baseline.balanced(threshold):
        raise StepError(baseline.unbalanced_message(threshold),
                        hint="free the device memory held on the short rank, or relax "
                             "memory.balance_threshold")
    return baseline


@memory_baseline.preview
def preview_memory_baseline(ctx: PreviewContext) -> list[str]:
    name = ctx.setting("memory.query")
    query: MemoryQuerySpec = ctx.implementation("memory.query")
    threshold = float(ctx.setting("memory.balance_threshold"))
    summary = query.summary.format(module=ctx.setting("device.torch_module"))
    check = (f"fail when a rank has < {threshold:.0%} of the best rank's memory (only with "
             "parallel.tp_size > 1, as SGLang)"
             if ctx.setting("memory.balance_check") else "balance check off")
    return [f"query {name}: {summary}", check]


STEPS = (memory_baseline,)
