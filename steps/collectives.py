"""``warmup_collectives``: one small all-reduce on every group, before the first request.

NCCL, HCCL and friends build a communicator lazily, on a group's first
collective, which otherwise lands on the first request (seconds on large
worlds) and allocates device memory after the memory baseline was taken.
SGLang 0.5.23 therefore pre-warms with one all-reduce of a one-element tensor
on the tensor-parallel group (``distributed/bootstrap.py`` ``_prewarm_nccl``),
before ``measure_pre_model_load_memory``.

SGLang does so only with ``--pre-warm-nccl``, off by default (0.5.23
``arg_groups/fields/exec_.py:744-747``; ``bootstrap.py:161-164`` also needs a
group larger than one), so here too it runs only with ``parallel.pre_warm``.

Here every group this rank belongs to is warmed, on its device group and its
CPU group, and the tensor is a one-hot vector of the world's ranks: after the
sum, the non-zero entries are exactly the group's members, so the warm-up also
proves that each group contains whom the layout says.
"""

from __future__ import annotations

from typing import Any

from initorch.plugin import StepContext, StepError, setting, step
from initorch.steps.model_parallel import ModelParallel
from initorch.steps.set_device import VISIBLE_DEVICES_ENV, tensor_device


def members_seen(group: Any, rank: int, world_size: int, device: Any) -> tuple[int, ...]:
    """All-reduce a one-hot vector of ``rank`` over ``group``; the ranks that answered."""
    import torch
    import torch.distributed as dist

    one_hot = torch.zeros(world_size, dtype=torch.int32, device=device)
    one_hot[rank] = 1
    dist.all_reduce(one_hot, group=group)
    return tuple(int(r) for r in torch.nonzero(one_hot.cpu()).flatten().tolist())


PRE_WARM = setting(
    "parallel.pre_warm", bool, default=False,
    description="SGLang's --pre-warm-nccl (off by default): one all-reduce on every group "
                "before the memory baseline, so communicators are built at start-up")


@step(
    "warmup_collectives",
    description="One small all-reduce on every model-parallel group (device and CPU), "
                "proving who is in it",
    requires=["import_backend", "init_model_parallel"],
    reads=["import_backend", "init_model_parallel"],
    device_bound=True,
    when="parallel.pre_warm",
    settings=(PRE_WARM, VISIBLE_DEVICES_ENV),
)
def warmup_collectives(ctx: StepContext) -> dict[str, tuple[int, ...]]:
    parallel: ModelParallel = ctx.output("init_model_parallel")
    device = tensor_device(ctx)
    world, rank = parallel.world.size, parallel.world.rank_in_group
    seen: dict[str, tuple[int, ...]] = {}
    for group in parallel:
        for kind, handle, where in (("device", group.device_group, device),
                                    ("cpu", group.cpu_group, "cpu")):
            members = members_seen(handle, rank, world, where)
            if members != group.ranks:
                raise StepError(f"{group.name} {kind} group: the all-reduce reached ranks "
                                f"{list(members)}, but the layout says {list(group.ranks)}",
                                hint="every rank must use the same parallel.* settings")
        seen[group.name] = group.ranks
        ctx.log.info("group_warmed", group=group.name, ranks=list(group.ranks))
    synchronize = getattr(ctx.output("import_backend"), "synchronize", None)
    if synchronize is not None and device.type != "cpu":
        synchronize()
    return seen


STEPS = (warmup_collectives,)
