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

import inspect
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

from initorch_vllm.layout import ENGINE, LAYOUTS, SESSION_END, SESSION_START

if TYPE_CHECKING:
    from initorch import Plan
    from initorch.kit import Hook, RankSession
    from initorch_vllm.options import Options

__all__ = ["active", "begin", "hooks", "plan_for"]

_SET_DEVICE = "set_device"


class _Current:
    """This process's worker session, from its constructor to its warm-up (vLLM builds
    one worker a process)."""

    session: RankSession | None = None


def active() -> RankSession | None:
    """The session of this process's worker, while it starts."""
    return _Current.session


def begin(vllm_config: Any, options: Options, rank: int) -> RankSession | None:
    """The session of the worker ``vllm_config`` builds; ``None`` when no plan can be
    made for it (verify only observes: the problem is logged in one line and vLLM starts
    as it would without initorch)."""
    from initorch.kit import COST, Outputs, RankSession, Recorder, plan_or_off

    device = str(vllm_config.device_config.device_type)
    profiles = options.profiles or (device, "vllm")
    with COST.timed("plan"):
        plan = plan_or_off(lambda: plan_for(vllm_config, profiles), mode=options.mode,
                           integration=ENGINE.integration,
                           describe=f"initorch plan --device {device} "
                                    + " ".join(f"--profile {p}" for p in profiles))
    if plan is None:
        return None
    recorder = Recorder(plan, ENGINE, stop_on_violation=options.stop_on_violation,
                        label=ENGINE.label())
    return RankSession(plan, recorder, rank, options.mode,
                       Outputs("vllm", options.report, options.trace),
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


def _end(session: RankSession, error: BaseException | None) -> None:
    """End ``session`` once (the calls around one that raised see the error too)."""
    if _Current.session is session:
        _Current.session = None
        session.finish(error)


def _recording(step: str, *, binds: Callable[..., str] | None = None,
               ends: bool = False) -> Callable[..., Any]:
    """An ``around`` hook that records each call as a call of ``step`` in this process's
    session (none: straight through); ``binds(session, *args)`` names the device the call
    sets on its thread; with ``ends`` the session ends when the call returns, and it ends
    whenever the call raises: the worker's start-up is over either way."""

    def record(original: Callable[..., Any], *args: Any, **kwargs: Any) -> Any:
        session = _Current.session
        if session is None:
            return original(*args, **kwargs)
        device = None if binds is None else binds(session, *args)
        try:
            with session.recorder.observe(step, binds=device) as call:
                call.result = original(*args, **kwargs)
        except BaseException as error:
            _end(session, error)
            raise
        if ends:
            _end(session, None)
        return call.result

    record.__qualname__ = f"record_{step}"
    return record


def _bound_device(session: RankSession, device: Any, *_: Any) -> str:
    """What ``torch.accelerator.set_device_index(device)`` (the GPU worker's,
    ``gpu_worker.py:501``) binds, from its argument: no device query (asking can create
    a context)."""
    return f"{session.plan.device.type}:{getattr(device, 'index', device)}"


def _start(options: Options) -> Callable[..., Any]:
    """The ``around`` hook on ``WorkerBase.__init__`` that begins the session."""

    def start_session(original: Callable[..., Any], *args: Any, **kwargs: Any) -> Any:
        if _Current.session is None:
            given = inspect.signature(original).bind(*args, **kwargs).arguments
            _Current.session = begin(given["vllm_config"], options, int(given["rank"]))
        return original(*args, **kwargs)

    return start_session


def hooks(options: Options) -> dict[str, Hook]:
    """Every hook of verify mode, by target: the session's start, and each call of
    every worker's call map (a worker imports only its own class's module, so only its
    hooks take effect)."""
    found: dict[str, Hook] = {SESSION_START: (_start(options), "around")}
    for layout in LAYOUTS:
        for call in layout.calls:
            found[call.target] = (_recording(
                call.step, binds=_bound_device if call.step == _SET_DEVICE else None,
                ends=call.step == SESSION_END), "around")
    return found
