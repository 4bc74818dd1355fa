"""One worker's start-up under verify mode: from its construction to its warm-up.

vLLM builds each worker in its own process after loading the plugins (``v1/worker/
worker_base.py:274-276``, :334-335); every worker class's constructor reaches
``WorkerBase.__init__`` with the rank and the whole ``VllmConfig``.  The session (the
kit's :class:`~initorch.kit.RankSession`: the plan for the worker's device, a recorder,
the report and trace) begins there.  Each hooked call of :mod:`initorch_vllm.layout` is
then one call of its step, checked against the plan by the kit's recorder as it starts.

An SGLang rank starts inside one constructor, which the kit frames (``run_framed``); a
vLLM worker starts in several calls that the engine core makes one after another (the
worker's ``init_device``, ``load_model``, then the KV cache's sizing, building and
warm-up, ``v1/engine/core.py:144-157``, :315-379).  So the session is held here from the
constructor on, and ends when the last returns (the warm-up) or when a recorded call
raises, writing the rank's report and trace.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from initorch_vllm.layout import ENGINE, LAYOUTS, LOGGER, SESSION_END, SESSION_START

if TYPE_CHECKING:
    from initorch import Plan
    from initorch.kit import Hook, RankSession
    from initorch_vllm.options import Options

__all__ = ["begin", "hooks", "plan_for"]

_SET_DEVICE = "set_device"


def begin(vllm_config: Any, options: Options, rank: int) -> RankSession | None:
    """The session of the worker ``vllm_config`` builds; ``None`` when no plan can be
    made for it (verify only observes: the problem is logged in one line and vLLM starts
    as it would without initorch)."""
    from initorch.kit import COST, Outputs, RankSession, Recorder, plan_or_off

    device = str(vllm_config.device_config.device_type)
    profiles = options.profiles or (device, "vllm")
    with COST.timed("plan"):
        plan = plan_or_off(lambda: plan_for(vllm_config, profiles), mode=options.mode,
                           integration=ENGINE.integration, log=LOGGER,
                           describe=f"initorch plan --device {device} "
                                    + " ".join(f"--profile {p}" for p in profiles))
    if plan is None:
        return None
    recorder = Recorder(plan, ENGINE, stop_on_violation=options.stop_on_violation,
                        label=ENGINE.label())
    return RankSession(plan, recorder, rank, options.mode,
                       Outputs("vllm", options.report, options.trace, log=LOGGER),
                       extra={"profiles": list(profiles), "device": device})


def plan_for(vllm_config: Any, profiles: tuple[str, ...] = ()) -> Plan:
    """The plan a worker of ``vllm_config`` is checked against: ``profiles`` (default: its
    device type, then ``vllm``), with the job's shape as vLLM resolved it."""
    from initorch import Registry, load_plan

    device = str(vllm_config.device_config.device_type)
    parallel = vllm_config.parallel_config
    return load_plan(list(profiles or (device, "vllm")), device=device,
                     settings={"parallel.tp_size": int(parallel.tensor_parallel_size),
                               "parallel.pp_size": int(parallel.pipeline_parallel_size)},
                     registry=Registry.with_plugins())


def _bound_device(session: RankSession, device: Any, *_args: Any, **_kwargs: Any) -> str:
    """What ``torch.accelerator.set_device_index(device)`` (the GPU worker's,
    ``gpu_worker.py:501``) binds, from its argument: no device query (asking can create
    a context)."""
    return f"{session.plan.device.type}:{getattr(device, 'index', device)}"


def hooks(options: Options) -> dict[str, Hook]:
    """Every hook of verify mode, by target: the session's begin on the worker's
    constructor (from its ``vllm_config`` and ``rank``), and each call of every worker's
    call map, the warm-up ending it (a worker imports only its own class's module, so
    only its hooks take effect)."""
    from initorch.kit import begin_hook, observer

    found: dict[str, Hook] = {SESSION_START: (begin_hook(
        lambda given: begin(given["vllm_config"], options, int(given["rank"]))), "around")}
    for layout in LAYOUTS:
        for call in layout.calls:
            found[call.target] = (observer(
                call.step, binds=_bound_device if call.step == _SET_DEVICE else None,
                last=call.step == SESSION_END), "around")
    return found
