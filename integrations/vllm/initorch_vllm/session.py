"""One worker's start-up under verify mode: from its construction to its warm-up.

vLLM builds each worker in its own process after loading the plugins (``v1/worker/
worker_base.py:274-276``, :334-335); every worker class's constructor reaches
``WorkerBase.__init__`` with the rank and the whole ``VllmConfig``.  The session (the
kit's :class:`~initorch.kit.session.RankSession`) begins there: the plan for the
worker's device (its device profile, then the ``vllm`` overlay, or
``INITORCH_VLLM_PROFILE``) and a recorder.  Each hooked call of :mod:`initorch_vllm.
layout` is then one call of its step (the kit's observers), checked against the plan as
it starts.  Unlike SGLang's rank, whose start-up is one constructor (the kit's
``run_framed``), a vLLM worker starts in several calls the engine core makes one after
another; the session ends when the last returns (the warm-up, ``v1/engine/core.py:379``)
or when a recorded call raises, writing the rank's report and trace.
"""

from __future__ import annotations

import inspect
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

from initorch.kit.session import RankSession, observer, plan_or_off, set_device_observer
from initorch_vllm.layout import ENGINE, LAYOUTS, SESSION_END, SESSION_START

if TYPE_CHECKING:
    from initorch import Plan
    from initorch.kit.hooks import Hook
    from initorch_vllm.options import Options

__all__ = ["begin", "hooks"]

_SET_DEVICE = "set_device"


def _activate(session: RankSession | None) -> None:
    """Make ``session`` this process's active session (``None``: none).  The kit frames a
    session around one call (``run_framed``); a vLLM worker's spans several, so its
    start and end are set here, on the kit's own record of the active session."""
    from initorch.kit import session as kit_session

    kit_session._Current.session = session


def begin(vllm_config: Any, options: Options, rank: int) -> RankSession | None:
    """The session of the worker ``vllm_config`` builds; ``None`` when no plan can be
    made for it (verify only observes: the problem is logged in one line and vLLM starts
    as it would without initorch)."""
    from initorch import Registry, load_plan
    from initorch.kit.cost import COST
    from initorch.kit.recorder import Recorder
    from initorch.kit.session import Outputs

    device = str(vllm_config.device_config.device_type)
    profiles = options.profiles or (device, "vllm")

    def make() -> Plan:
        return load_plan(list(profiles), device=device, registry=Registry.with_plugins())

    with COST.timed("plan"):
        plan = plan_or_off(make, mode=options.mode, integration=ENGINE.integration,
                           describe=f"initorch plan --device {device} "
                                    + " ".join(f"--profile {p}" for p in profiles))
    if plan is None:
        return None
    recorder = Recorder(plan, ENGINE, stop_on_violation=options.stop_on_violation,
                        label=ENGINE.label())
    return RankSession(plan, recorder, rank, options.mode,
                       Outputs("vllm", options.report, options.trace),
                       extra={"profiles": list(profiles), "device": device})


def _framed(observe: Callable[..., Any], *, ends: bool) -> Callable[..., Any]:
    """``observe`` (a kit observer), ending the session when the call raises, and with
    ``ends`` when it returns: the worker's start-up is over either way."""
    from initorch.kit.session import active

    def call(original: Callable[..., Any], *args: Any, **kwargs: Any) -> Any:
        session = active()
        if session is None:
            return original(*args, **kwargs)
        try:
            result = observe(original, *args, **kwargs)
        except BaseException as error:
            _end(session, error)
            raise
        if ends:
            _end(session, None)
        return result

    call.__qualname__ = getattr(observe, "__qualname__", "observe")
    return call


def _end(session: RankSession, error: BaseException | None) -> None:
    from initorch.kit.session import active

    if active() is session:  # once: the calls around one that raised see it too
        _activate(None)
        session.finish(error)


def _start(options: Options) -> Callable[..., Any]:
    """The ``around`` hook on ``WorkerBase.__init__`` that begins the session."""
    from initorch.kit.session import active

    def start_session(original: Callable[..., Any], *args: Any, **kwargs: Any) -> Any:
        if active() is None:
            given = inspect.signature(original).bind(*args, **kwargs).arguments
            _activate(begin(given["vllm_config"], options, int(given["rank"])))
        return original(*args, **kwargs)

    return start_session


def hooks(options: Options, device_type: str) -> dict[str, Hook]:
    """Every hook of verify mode, by target: the session's start, and each call of
    every worker's call map (a worker imports only its own class's module, so only its
    hooks take effect).  ``device_type`` (vLLM's platform's) names the device that
    ``set_device`` binds."""
    found: dict[str, Hook] = {SESSION_START: (_start(options), "around")}
    for layout in LAYOUTS:
        for call in layout.calls:
            observe = set_device_observer(f"torch.{device_type}") \
                if call.step == _SET_DEVICE else observer(call.step)
            found[call.target] = (_framed(observe, ends=call.step == SESSION_END), "around")
    return found
