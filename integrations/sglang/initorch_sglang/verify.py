"""Verify mode: one SGLang rank's start-up observed, from ``Scheduler.__init__`` to its end.

SGLang builds each rank's ``Scheduler`` in ``run_scheduler_process``
(``srt/managers/scheduler.py:6362``), right after it loaded the plugins; everything
initorch models happens inside that constructor (``Scheduler.__init__``:
``init_parallel_runtime`` :536, ``init_model_worker`` :568, ``build_kv_cache`` :575).
So the hook on the constructor runs it as the kit's rank session
(:func:`initorch.kit.run_framed`): the session begins with SGLang's own server arguments
(the plan for them, the recorder, the host-pool allocator the profile names) and ends
when the constructor returns or raises, writing the rank's report and trace.  The hooks
here record SGLang's calls (the layout's targets) and the vendor calls beneath them; drive
mode (:mod:`initorch_sglang.drive`) runs inside the same session.
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from functools import cache
from typing import TYPE_CHECKING, Any

from initorch.kit import (
    COST,
    Hook,
    HookError,
    Outputs,
    RankSession,
    Recorder,
    VendorCall,
    apply_hooks,
    go_first,
    observe_vendor,
    observer,
    plan_or_off,
    run_framed,
    set_device_observer,
    wrap_vendor_function,
)
from initorch_sglang.allocator import allocator_table, install_host_allocator
from initorch_sglang.calls import CALLS
from initorch_sglang.engine import IDLE, MODE_FIX, SGLANG
from initorch_sglang.options import Options
from initorch_sglang.selection import Selection, selection_for

if TYPE_CHECKING:
    from initorch import Plan, Registry

__all__ = ["begin", "installed_registry", "new_recorder", "observer_hooks", "plan_for",
           "scheduler_hook", "world_rank"]

logger = logging.getLogger("initorch_sglang")


def begin(server_args: Any, options: Options, rank: int,
          hooks: dict[str, Hook] | None = None) -> RankSession | None:
    """The session for SGLang's ``server_args``, with ``hooks`` (the session's: they
    record or drive calls SGLang makes inside its constructor) and ``set_device``'s on
    the profile's device module applied in one pass; ``None`` (verify mode) when no plan
    can be made for the launch: verify only observes, so a plan problem is reported in
    one line and SGLang starts as it would without initorch, unhooked.  Drive mode
    needs the plan to run, so there the problem stops the launch, as a hook target that
    is missing does in both."""
    with COST.timed("plan"):
        session = _begin(server_args, options, rank)
    if session is not None:  # "hooks" times itself
        module = str(session.plan.config()["device.torch_module"])
        try:
            apply_hooks({**(hooks or {}), **{
                call.hook_target(module): (set_device_observer(module), "around")
                for call in CALLS if call.step == "set_device"}}, SGLANG)
        except HookError as error:
            raise SystemExit(str(error)) from None
    return session


@cache
def installed_registry() -> Registry:
    """The installed plugins' registry, made once per process.

    The rank's plan and, in drive mode, the registry of the driven steps
    (:func:`initorch.kit.engine_performed`) both start from it: each
    ``Registry.with_plugins`` reads every distribution's entry points and registers every
    plugin again, which a rank would otherwise pay twice (35-140 ms on this machine)."""
    from initorch import Registry

    return Registry.with_plugins()


def _begin(server_args: Any, options: Options, rank: int) -> RankSession | None:
    selection = selection_for(server_args, options)
    plan = plan_for(selection, installed_registry(), options)
    if plan is None:
        return None
    session = RankSession(plan, new_recorder(plan, stop_on_violation=options.stop_on_violation,
                                             label=SGLANG.label()),
                          rank, options.mode,
                          Outputs("sglang", options.report, options.trace, IDLE,
                                  status=options.status, progress_s=options.progress_s))
    go_first()  # once every plugin loaded, the integration's import hooks run last
    session.extra["selection"] = selection.describe()
    session.extra["host_allocator"] = None
    if plan.config().get("hicache.enabled") and server_args.enable_hierarchical_cache:
        allocator = install_host_allocator(str(server_args.device),
                                           str(plan.config()["device.host_allocator"]))
        logger.info("initorch-sglang: %s", allocator.describe())
        session.extra["host_allocator"] = {
            "device": allocator.device_type, "allocator": allocator.allocator,
            "installed_by_initorch": allocator.installed}
        _record_host_allocation(str(server_args.device))
    return session


def new_recorder(plan: Plan, *, stop_on_violation: bool = True,
                 label: str | None = None) -> Recorder:
    """The kit's recorder for an SGLang start-up checked against ``plan``: violations
    name SGLang (``label``: with its release) and offer drive mode against a vendor call
    on a thread without the device."""
    return Recorder(plan, SGLANG, stop_on_violation=stop_on_violation, label=label,
                    thread_fix=MODE_FIX)


def plan_for(selection: Selection, registry: Registry, options: Options) -> Plan | None:
    """The plan of ``selection``; ``None`` in verify mode when it cannot be made (one
    line in SGLang's log); in drive mode the problem stops the launch."""
    return plan_or_off(lambda: selection.plan(registry), mode=options.mode,
                       describe=selection.describe(), integration=SGLANG.integration)


_HOST_REGISTRATION = "host registration"


def _record_host_allocation(device: str) -> None:
    """Record the host pool's allocation function for ``device`` (cudaHostRegister or
    pinning: the vendor call that needs the device context) as a vendor call."""
    table, holder = allocator_table()
    function = table[device]
    if getattr(function, "__initorch_vendor__", False):
        return
    name = getattr(function, "__name__", "allocator")
    call = VendorCall(holder.__name__, "ALLOC_MEMORY_FUNCS", device,
                      "alloc_host_mem_pool",
                      "pinning host memory (cudaHostRegister, pin_memory) registers it with "
                      "the calling thread's device context",
                      name=f"{_HOST_REGISTRATION} {name}")
    table[device] = wrap_vendor_function(function, call, observe_vendor)


def observer_hooks() -> dict[str, Hook]:
    """The hooks that record SGLang's calls; ``set_device``'s target depends on the
    device, so it is hooked when the session knows the profile."""
    return {call.target: (observer(call.step), "around") for call in CALLS
            if call.step != "set_device"}


def scheduler_hook(options: Options,
                   hooks: dict[str, Hook] | None = None) -> Callable[..., Any]:
    """The ``around`` hook on ``Scheduler.__init__`` that runs the session, whose
    ``hooks`` it applies when it begins (:func:`begin`)."""

    def run_session(original: Callable[..., Any], scheduler: Any, server_args: Any,
                    *args: Any, **kwargs: Any) -> Any:
        rank = world_rank(original, scheduler, server_args, *args, **kwargs)
        return run_framed(lambda: begin(server_args, options, rank, hooks),
                          lambda: original(scheduler, server_args, *args, **kwargs))

    return run_session


def world_rank(scheduler_init: Callable[..., Any], *args: Any, **kwargs: Any) -> int:
    """This rank in SGLang's world (``_init_parallel_groups``: tp_size * pp_rank +
    tp_rank), from what ``Scheduler.__init__`` was given: its ``tp_rank``/``pp_rank``
    arguments up to 0.5.20, SGLang's runtime context from 0.5.21 on (where the
    constructor takes only the server and port arguments)."""
    import inspect

    given = inspect.signature(scheduler_init).bind_partial(*args, **kwargs).arguments
    server_args = given.get("server_args")
    if "tp_rank" in given:
        tp_size = int(getattr(server_args, "tp_size", 1) or 1)
        return tp_size * int(given.get("pp_rank") or 0) + int(given["tp_rank"])
    from sglang.srt.runtime_context import get_parallel

    parallel = get_parallel()
    return int(parallel.tp_size * parallel.pp_rank + parallel.tp_rank)
