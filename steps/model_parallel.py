"""``init_model_parallel``: tensor-, pipeline- and expert-parallel groups.

Follows SGLang 0.5.23 ``distributed/parallel_state.py``
``initialize_model_parallel``: the world is exactly ``tp_size x pp_size`` ranks;
tensor-parallel groups are consecutive ranks (``[0, 1], [2, 3]`` for TP=2 on 4
ranks), pipeline-parallel groups stride across them (``[0, 2], [1, 3]``), and
expert-parallel groups split each tensor-parallel group with stride
``tp_size / ep_size`` (``moe_dp_size`` 1).  Every group is a pair, as
``GroupCoordinator`` builds it: a *device* group on the profile's collective
backend (NCCL, HCCL, gloo on CPU) for tensors, and a *CPU* group on gloo for
coordination (``parallel.cpu_group_backend``; SGLang uses ``mooncake-cpu``
when Mooncake is the backend).  Upstream aliases the expert group to the
tensor group when their sizes match, except on NPU, which needs a group of its
own; here it is always a group of its own.

Data parallelism adds no group: SGLang's ordinary DP replicas are separate
worlds (``managers/scheduler.py`` ``run_scheduler_process``), each running its
own start-up.

The sizes are checked against ``WORLD_SIZE`` at plan time when the launcher has
exported it, and against the process group at run time.  ``new_group`` is
collective, so every rank creates every group in the same order and keeps the
pair it belongs to.
"""

from __future__ import annotations

import datetime
from collections.abc import Callable, Iterator
from typing import Any

from initorch.plugin import PreviewContext, StepContext, StepError, record, setting, step
from initorch.steps.distributed import COLLECTIVE_BACKEND
from initorch.steps.rendezvous import TIMEOUT_S

TP_SIZE = setting("parallel.tp_size", int, default=1, minimum=1, maximum=65536,
                  description="ranks per tensor-parallel group")
PP_SIZE = setting("parallel.pp_size", int, default=1, minimum=1, maximum=65536,
                  description="pipeline stages; the world is tp_size x pp_size ranks")
EP_SIZE = setting("parallel.ep_size", int, default=1, minimum=1, maximum=65536,
                  description="expert-parallel ranks within a tensor-parallel group (divides "
                              "tp_size)")
CPU_GROUP_BACKEND = setting(
    "parallel.cpu_group_backend", str, default="gloo", pattern=r"[a-z][a-z0-9_-]*",
    description="backend of each group's coordination (CPU) group (SGLang: gloo; "
                "mooncake-cpu with Mooncake as the backend)")


@record
class ParallelLayout:
    """Group sizes and the rank lists they give."""

    tp_size: int = 1
    pp_size: int = 1
    ep_size: int = 1

    @property
    def world_size(self) -> int:
        return self.tp_size * self.pp_size

    def problems(self) -> list[tuple[str, str]]:
        """``(setting, what is wrong)`` for sizes that cannot work together (each size
        alone is checked by its declaration)."""
        if self.tp_size % self.ep_size:
            return [("parallel.ep_size", f"parallel.ep_size ({self.ep_size}) must divide "
                     f"parallel.tp_size ({self.tp_size}): experts are split within a "
                     "tensor-parallel group")]
        return []

    def groups(self) -> dict[str, tuple[tuple[int, ...], ...]]:
        """Rank lists by group kind, in the order every rank creates them."""
        world, tp, pp = self.world_size, self.tp_size, self.pp_size
        moe_tp = tp // self.ep_size
        layout = {
            "tp": tuple(tuple(range(i * tp, (i + 1) * tp)) for i in range(world // tp)),
            "pp": tuple(tuple(range(i, world, world // pp)) for i in range(world // pp)),
        }
        if self.ep_size > 1:
            layout["ep"] = tuple(
                tuple(range(i * tp + j, i * tp + j + self.ep_size * moe_tp, moe_tp))
                for i in range(world // tp) for j in range(moe_tp))
        return layout


@record
class ParallelGroup:
    """This rank's group of one kind: a device group and a CPU (gloo) group."""

    name: str
    ranks: tuple[int, ...]
    rank_in_group: int
    device_group: Any
    cpu_group: Any

    @property
    def size(self) -> int:
        return len(self.ranks)


@record
class ModelParallel:
    """The output of ``init_model_parallel``: the world group and this rank's groups."""

    layout: ParallelLayout
    world: ParallelGroup
    groups: dict[str, ParallelGroup]
    owned: tuple[Any, ...]  # process groups this step created, destroyed on teardown

    def __getitem__(self, name: str) -> ParallelGroup:
        return self.world if name == "world" else self.groups[name]

    def __iter__(self) -> Iterator[ParallelGroup]:
        yield self.world
        yield from self.groups.values()


def layout_from(read: Callable[[str], Any]) -> ParallelLayout:
    """The layout the ``parallel.*`` settings describe (unchecked)."""
    return ParallelLayout(read("parallel.tp_size"), read("parallel.pp_size"),
                          read("parallel.ep_size"))


def checked_layout(ctx: StepContext) -> ParallelLayout:
    layout = layout_from(ctx.setting)
    problems = layout.problems()
    if problems:
        raise StepError("; ".join(message for _, message in problems),
                        hint="fix the parallel.* settings")
    return layout


@step(
    "init_model_parallel",
    description="Build tensor-, pipeline- and expert-parallel groups: a device group and a "
                "gloo CPU group each",
    requires=["init_torch_distributed"],
    device_bound=True,
    settings=(TP_SIZE, PP_SIZE, EP_SIZE, CPU_GROUP_BACKEND, COLLECTIVE_BACKEND, TIMEOUT_S),
)
def init_model_parallel(ctx: StepContext) -> ModelParallel:
    import torch.distributed as dist

    layout = checked_layout(ctx)
    world, rank = dist.get_world_size(), dist.get_rank()
    if world != layout.world_size:
        raise StepError(
            f"the process group has {world} rank(s), but parallel.tp_size ({layout.tp_size}) x "
            f"parallel.pp_size ({layout.pp_size}) = {layout.world_size}",
            hint=f"start {layout.world_size} ranks, or change the parallel sizes",
        )
    backend = str(ctx.setting("device.collective_backend"))
    cpu_backend = str(ctx.setting("parallel.cpu_group_backend"))
    timeout = datetime.timedelta(seconds=float(ctx.setting("distributed.timeout_s")))
    owned: list[Any] = []

    def pair(name: str, ranks: tuple[int, ...], device_group: Any | None) -> ParallelGroup:
        if device_group is None:
            device_group = dist.new_group(list(ranks), backend=backend, timeout=timeout,
                                          group_desc=f"{name}:device")
            if rank in ranks:
                owned.append(device_group)
        cpu_group = dist.new_group(list(ranks), backend=cpu_backend, timeout=timeout,
                                   group_desc=f"{name}:cpu")
        if rank in ranks:
            owned.append(cpu_group)
        return ParallelGroup(name, ranks, ranks.index(rank) if rank in ranks else -1,
                             device_group, cpu_group)

    # The world's device group is the default group; it gets its own CPU group
    # (SGLang's init_world_group), over which memory figures are gathered.
    world_group = pair("world", tuple(range(world)), dist.group.WORLD)
    mine: dict[str, ParallelGroup] = {}
    for name, rank_lists in layout.groups().items():
        for ranks in rank_lists:
            group = pair(name, ranks, None)
            if rank in ranks:
                mine[name] = group
    ctx.log.info("model_parallel_ready", **{f"{name}_ranks": list(group.ranks)
                                            for name, group in mine.items()})
    return ModelParallel(layout, world_group, mine, tuple(owned))


@init_model_parallel.teardown
def destroy_model_parallel(ctx: StepContext, parallel: ModelParallel) -> None:
    import torch.distributed as dist

    if dist.is_initialized():
        for group in reversed(parallel.owned):
            dist.destroy_process_group(group)


@init_model_parallel.preview
def preview_model_parallel(ctx: PreviewContext) -> list[str]:
    layout = layout_from(ctx.setting)
    problems = layout.problems()
    if problems:
        setting, message = problems[0]
        ctx.reject(message, setting=setting, hint="fix the parallel.* settings")
    raw = ctx.environ.get("WORLD_SIZE", "").strip()
    if raw and raw != str(layout.world_size):
        ctx.reject(f"WORLD_SIZE={raw}, but parallel.tp_size ({layout.tp_size}) x "
                   f"parallel.pp_size ({layout.pp_size}) = {layout.world_size}",
                   setting="parallel.tp_size",
                   hint=f"start {layout.world_size} ranks, or change the parallel sizes")
    checked = (f"matches WORLD_SIZE={raw}" if raw
               else "WORLD_SIZE not set here: checked at run time")
    lines = [f"world of {layout.world_size} rank(s) = tp {layout.tp_size} x pp "
             f"{layout.pp_size} ({checked})"]
    for name, rank_lists in layout.groups().items():
        lines.append(f"{name} groups: {' '.join(str(list(r)) for r in rank_lists)}")
    return lines


STEPS = (init_model_parallel,)
