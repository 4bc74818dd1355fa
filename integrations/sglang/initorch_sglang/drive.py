"""Drive mode: initorch runs SGLang's ``init_parallel_runtime`` as steps.

SGLang 0.5.23 builds each rank's parallel runtime in one function
(``srt/distributed/bootstrap.py:90-190``): CPU binding (:130), ``set_device`` (:133),
the shared Mooncake engine (:143), then the process group and the model-parallel groups
(``_init_parallel_groups`` :152).  Drive mode replaces that function with a run of the
plan ``<device> + sglang + sglang-drive``, whose steps call SGLang's own functions, so
that the order is the profile's (and checked like any plan), the ranks agree on the plan
before any group forms, and a failure comes with initorch's diagnosis.

What is kept from SGLang as it is: the preamble that no step models (the backend and
init method SGLang resolves, its all-reduce flags, the NPU backend, the p2p check: the
same calls, in the same order) and every function the steps call.  What is initorch's:
the order, the rendezvous where the ranks agree (its own store, at the address the
launcher picked, never SGLang's port), filling in ``SGLANG_CPU_OMP_THREADS_BIND`` from
initorch's core split when it is unset, the diagnoses and the report.  What SGLang owns
(the engine, the groups) is never torn down by initorch: those steps have no teardown,
and only the rendezvous store is left when the run ends.
"""

from __future__ import annotations

import logging
import os
import time
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

from initorch import StepFailedError
from initorch.kit import COST, Action, active, engine_performed, record
from initorch_sglang.engine import SGLANG
from initorch_sglang.options import Options, read_options
from initorch_sglang.selection import DRIVE_OVERLAY, selection_for

if TYPE_CHECKING:
    from initorch import Run
    from initorch.plugin import StepContext

__all__ = ["DriveError", "bind_deadline_thread", "core_split",
           "drive_parallel_runtime", "indexed_split"]

logger = logging.getLogger("initorch_sglang")

OMP_BIND_ENV = "SGLANG_CPU_OMP_THREADS_BIND"


class DriveError(RuntimeError):
    """Drive mode cannot run this launch (it says why, and what to use instead)."""


@record
class DriveContext:
    """What SGLang passed to ``init_parallel_runtime``, and what its preamble resolved."""

    server_args: Any
    device: str
    gpu_id: int
    backend: str
    dist_init_method: str


class _Current:
    """SGLang's arguments while the replaced ``init_parallel_runtime`` runs, and the
    device binding its ``set_device`` step made."""

    context: DriveContext | None = None
    binding: Callable[[], None] | None = None


def _sglang() -> DriveContext:
    if _Current.context is None:
        raise DriveError("drive steps run only inside SGLang's init_parallel_runtime")
    return _Current.context


# -- the steps: SGLang's own functions under initorch's step names --------------------


def bind_cpu_threads(ctx: StepContext) -> Any:
    """SGLang's ``_bind_threads_if_cpu`` (bootstrap.py:75); on a CPU job with more ranks
    than NUMA nodes and no ``SGLANG_CPU_OMP_THREADS_BIND``, initorch's core split first
    fills it in (SGLang would assert, ``utils/numa_utils.py:463``)."""
    from sglang.srt.distributed import bootstrap

    sglang = _sglang()
    if sglang.device == "cpu" and OMP_BIND_ENV not in os.environ:
        split = core_split(ctx.rank.local_world_size or ctx.rank.world_size,
                           base_gpu_id=int(getattr(sglang.server_args, "base_gpu_id", 0) or 0),
                           gpu_id_step=int(getattr(sglang.server_args, "gpu_id_step", 1) or 1))
        if split is not None:
            os.environ[OMP_BIND_ENV] = split
            ctx.log.info("cpu_split_filled_in", variable=OMP_BIND_ENV, value=split)
    return bootstrap._bind_threads_if_cpu(device=sglang.device)


def core_split(ranks: int, *, base_gpu_id: int = 0, gpu_id_step: int = 1) -> str | None:
    """``SGLANG_CPU_OMP_THREADS_BIND`` for ``ranks`` ranks on this host's allowed cores,
    split as initorch's ``bind_cpu_threads`` splits them and indexed as SGLang reads it;
    ``None`` when SGLang's own default (one rank per NUMA node) fits."""
    from sglang.srt.utils.numa_utils import get_cpu_ids_by_node

    if ranks <= len(get_cpu_ids_by_node()):
        return None
    return indexed_split(ranks, sorted(os.sched_getaffinity(0)), base_gpu_id=base_gpu_id,
                         gpu_id_step=gpu_id_step)


def indexed_split(ranks: int, cpus: list[int], *, base_gpu_id: int = 0,
                  gpu_id_step: int = 1) -> str:
    """The ``|``-separated groups SGLang indexes by a rank's ``gpu_id``
    (``numa_utils.init_threads_binding`` reads entry ``numa_index=gpu_id``,
    ``utils/numa_utils.py:484-492``), where local rank ``i`` has ``gpu_id = base_gpu_id +
    i * gpu_id_step`` (``compute_local_gpu_id``, ``weight_cache/protocol.py:276-297``):
    local rank ``i``'s cores sit at that index; an index no local rank has gets every
    allowed core (SGLang reads only its own)."""
    from initorch.steps import format_cpu_list, plan_shares

    step = max(gpu_id_step, 1)
    shares = plan_shares(ranks, cpus)
    groups = [format_cpu_list(cpus)] * (base_gpu_id + (ranks - 1) * step + 1)
    for index, share in enumerate(shares):
        groups[base_gpu_id + index * step] = format_cpu_list(share.cpus)
    return "|".join(groups)


def set_device(ctx: StepContext) -> Callable[[], None]:
    """``torch.get_device_module(device).set_device(gpu_id)``, as bootstrap.py:133 calls
    it; the output sets it again on each thread that runs a device-bound step."""
    import torch

    sglang = _sglang()

    def bind() -> None:
        torch.get_device_module(sglang.device).set_device(sglang.gpu_id)

    bind()
    _Current.binding = bind
    return bind


def bind_deadline_thread(original: Callable[..., Any], fn: Callable[[], Any], *args: Any,
                         **kwargs: Any) -> Any:
    """The ``around`` hook on SGLang's ``run_with_deadline``: while drive mode runs the
    parallel runtime, the helper's daemon thread first sets this rank's device, then runs
    ``fn``.  SGLang's deadline is kept (the same helper, the same timeout); only the
    device context that SGLang forgot to give the thread is added.  Outside drive mode's
    run the helper is SGLang's own."""
    binding = _Current.binding if _Current.context is not None else None
    if binding is None:
        return original(fn, *args, **kwargs)

    def bound() -> Any:
        binding()
        return fn()

    return original(bound, *args, **kwargs)


def init_shared_mooncake_transfer_engine(ctx: StepContext) -> Any:
    """SGLang's ``maybe_init_shared_mooncake_transfer_engine`` (bootstrap.py:143), which
    builds the engine only where SGLang needs one; the output is SGLang's engine (or
    ``None``)."""
    from sglang.srt.distributed import bootstrap
    from sglang.srt.distributed.device_communicators import mooncake_transfer_engine

    bootstrap.maybe_init_shared_mooncake_transfer_engine(gpu_id=_sglang().gpu_id)
    return mooncake_transfer_engine.get_mooncake_transfer_engine()


def init_torch_distributed(ctx: StepContext) -> Any:
    """SGLang's ``_init_parallel_groups`` (bootstrap.py:303): the world group, then the
    model-parallel groups and DP attention, with SGLang's backend and init method; on
    CPU first its ``_init_cpu_threads_env`` (bootstrap.py:146-150)."""
    import torch.distributed as dist
    from sglang.srt.distributed import bootstrap

    sglang = _sglang()
    if sglang.device == "cpu":
        bound = ctx.output("bind_cpu_threads") if ctx.has_output("bind_cpu_threads") else None
        bootstrap._init_cpu_threads_env(local_omp_cpuid=bound,
                                        dist_init_method=sglang.dist_init_method)
    bootstrap._init_parallel_groups(backend=sglang.backend,
                                    dist_init_method=sglang.dist_init_method,
                                    server_args=sglang.server_args, gpu_id=sglang.gpu_id)
    return dist.group.WORLD


def init_model_parallel(ctx: StepContext) -> Any:
    """SGLang builds the model-parallel groups inside ``_init_parallel_groups``
    (bootstrap.py:333), right after the world group; this step checks that its tensor-
    parallel group exists with the planned size, and hands it on."""
    from sglang.srt.distributed.parallel_state import get_tp_group

    group = get_tp_group()
    expected = int(ctx.setting("parallel.tp_size"))
    if group.world_size != expected:
        from initorch.plugin import StepError

        raise StepError(f"SGLang's tensor-parallel group has {group.world_size} ranks, the "
                        f"plan {expected}", hint="check --tp against the plan's parallel.tp_size")
    return group


_ACTIONS: dict[str, Action] = {
    "bind_cpu_threads": bind_cpu_threads,
    "set_device": set_device,
    "init_shared_mooncake_transfer_engine": init_shared_mooncake_transfer_engine,
    "init_torch_distributed": init_torch_distributed,
    "init_model_parallel": init_model_parallel,
}


# -- the replacement of init_parallel_runtime --------------------------------------------


def drive_parallel_runtime(*, server_args: Any, device: str, dist_port: int) -> None:
    """Replaces ``bootstrap.init_parallel_runtime`` (same keyword-only signature)."""
    from sglang.srt.distributed import bootstrap
    from sglang.srt.runtime_context import get_device, get_exec, get_parallel

    if bootstrap._PARALLEL_INITIALISED:  # SGLang's own guard (bootstrap.py:101-111)
        raise RuntimeError("init_parallel_runtime() ran twice in this process")
    bootstrap._PARALLEL_INITIALISED = True
    _refuse_unmodelled(device, get_exec(), get_parallel())
    _sglang_preamble(bootstrap, device, get_parallel())
    _Current.context = DriveContext(
        server_args, device, int(get_device().gpu_id),
        bootstrap._resolve_backend(device=device),
        bootstrap._resolve_dist_init_method(dist_port=dist_port))
    session = active()
    try:
        with COST.timed("drive plan"):
            run = _run(read_options(), server_args, get_parallel())
        offset = session.recorder.elapsed() if session is not None else 0.0
        entered = time.perf_counter()
        try:
            with run:
                binding = run.outputs.get("set_device")
        finally:
            _account_run(run.report, time.perf_counter() - entered)
            if session is not None:
                with COST.timed("drive report"):
                    session.adopt_drive(run.report, offset)
    except StepFailedError as failure:  # the diagnosis first; SGLang's error path follows
        logger.error("initorch-sglang drive: %s", failure)
        raise
    finally:
        _Current.context, _Current.binding = None, None
    if callable(binding):
        binding()  # SGLang goes on on this thread: give it the device context


def _account_run(report: Any, seconds: float) -> None:
    """initorch's own time in the driven run, which took ``seconds`` from entering it to
    leaving it: each step that is initorch's work, not SGLang's function under a step
    name (``drive import_backend``, ``drive rendezvous``: the rendezvous includes the wait
    for the other ranks to arrive and agree on the plan), and the run's own bookkeeping
    around the steps (starting and ending it, invoking and logging each step, leaving the
    job: ``drive run``).  The steps run one after another (``Run``'s sequential
    executor, which :func:`_run` keeps), so the bookkeeping is what the run took beyond
    its steps' durations."""
    steps = 0.0
    for name, outcome in report.outcomes.items():
        steps += outcome.duration  # 0 for a step that never started
        if name not in _ACTIONS and outcome.started is not None:
            COST.add(f"drive {name}", outcome.duration)
    COST.add("drive run", max(seconds - steps, 0.0))


def _keep_profile_environment(plan: Any) -> None:
    """Set the plan's ``env:`` variables the process lacks, for the rest of the process.

    A run restores its ``env:`` when it ends, but SGLang reads these variables after
    the parallel runtime: the store takes ``MOONCAKE_PROTOCOL`` when the cache controller
    builds it (``mooncake_store.py:219``), and it must agree with the engine's.  Set
    here, before the run, they are the process's own, which the run keeps (the process
    wins over profiles) and SGLang reads for as long as it lives."""
    for name, entry in plan.env.items():
        if entry.value is not None and name not in os.environ:
            os.environ[name] = entry.value
            logger.info("initorch-sglang drive: %s=%s from the profile, for SGLang's lifetime",
                        name, entry.value)


def _sglang_preamble(bootstrap: Any, device: str, parallel: Any) -> None:
    """SGLang's own first calls of ``init_parallel_runtime`` (bootstrap.py:116-127)."""
    from sglang.srt.utils import is_npu, monkey_patch_p2p_access_check

    if is_npu():
        from sglang.srt.hardware_backend.npu.utils import init_npu_backend

        init_npu_backend()
    if not parallel.enable_p2p_check:
        monkey_patch_p2p_access_check()
    bootstrap._set_all_reduce_flags()


def _refuse_unmodelled(device: str, exec_args: Any, parallel: Any) -> None:
    """Drive mode runs only what its steps model: one tp x pp world per launch (data-
    parallel replicas each have a world of their own), without SGLang's CUDA warm-ups
    (bootstrap.py:159-188).  The warm-ups are refused on the conditions SGLang would run
    them under (wider ones for EPLB: refusing a launch SGLang would not warm is cheaper
    than a plan that silently lacks a warm-up)."""
    if int(getattr(parallel, "dp_size", 1) or 1) > 1:
        raise DriveError("initorch-sglang drive mode runs one tp x pp world; with --dp-size "
                         "> 1 use INITORCH_SGLANG=verify")
    if exec_args.comm.pre_warm_nccl and device != "cpu":
        raise DriveError("initorch-sglang drive mode does not run SGLang's collective "
                         "pre-warm (--pre-warm-nccl, bootstrap.py:161-164); use "
                         "INITORCH_SGLANG=verify for this launch")
    tp = int(parallel.tp_size)
    if device == "cuda" and getattr(parallel, "enable_tp_lm_head_all_to_all", False) and tp > 1:
        raise DriveError("initorch-sglang drive mode does not run SGLang's TP LM-head "
                         "all-to-all warm-up (--enable-tp-lm-head-all-to-all, bootstrap.py:"
                         "170-175), which SGLang measures before the memory baseline; use "
                         "INITORCH_SGLANG=verify for this launch")
    moe = exec_args.moe
    if device == "cuda" and getattr(moe, "enable_eplb", False) \
            and getattr(moe, "elastic_ep_backend", None) is None:
        raise DriveError("initorch-sglang drive mode does not run SGLang's EPLB peer-to-peer "
                         "warm-up (--enable-eplb, bootstrap.py:179-188); use "
                         "INITORCH_SGLANG=verify for this launch")


def _run(options: Options, server_args: Any, parallel: Any) -> Run:
    from initorch import RankInfo, Run
    from initorch_sglang.verify import installed_registry

    registry = engine_performed(_ACTIONS, engine=SGLANG.name, installed=installed_registry())
    plan = selection_for(server_args, options).with_overlay(DRIVE_OVERLAY).plan(registry)
    _keep_profile_environment(plan)
    world = int(parallel.tp_size * parallel.pp_size)
    rank = RankInfo(rank=int(parallel.tp_size * parallel.pp_rank + parallel.tp_rank),
                    local_rank=int(parallel.tp_rank), world_size=world,
                    local_world_size=world if int(server_args.nnodes) == 1 else None,
                    rendezvous=options.rendezvous, launcher="sglang")
    return Run(plan, diagnoses=registry.diagnoses, rank=rank, heartbeat=None)
