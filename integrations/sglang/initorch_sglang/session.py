"""One rank's start-up under the integration: from ``Scheduler.__init__`` to its end.

SGLang builds each rank's ``Scheduler`` in ``run_scheduler_process``
(``srt/managers/scheduler.py:6362``), right after it loaded the plugins; everything
initorch models happens inside that constructor (``Scheduler.__init__``:
``init_parallel_runtime`` :536, ``init_model_worker`` :568, ``build_kv_cache`` :575).
So the session begins when the constructor is entered, with SGLang's own server
arguments: it resolves the plan for them, starts recording, and fills the host-pool
allocator; it ends when the constructor returns or raises, writing the rank's report
and trace.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

from initorch_sglang.allocator import AllocatorChoice, allocator_table, install_host_allocator
from initorch_sglang.calls import CALLS, hook_target
from initorch_sglang.cost import COST, process_age
from initorch_sglang.hooks import HookKind, apply
from initorch_sglang.imports import go_first
from initorch_sglang.options import Options
from initorch_sglang.outputs import build_report, now_iso, rank_path, write_outputs
from initorch_sglang.recorder import Recorder, VendorRecord
from initorch_sglang.selection import Selection, selection_for
from initorch_sglang.vendor import CallSite, VendorCall, call_site, wrap_vendor_function

if TYPE_CHECKING:
    from collections.abc import Callable

    from initorch import Plan, Registry, RunReport

__all__ = ["Session", "active", "observe_vendor", "observer_hooks", "scheduler_hook",
           "world_rank"]

logger = logging.getLogger("initorch_sglang")


class _Current:
    """The session of this process's start-up, while ``Scheduler.__init__`` runs (one
    per process: SGLang builds one Scheduler in each rank)."""

    session: Session | None = None


def active() -> Session | None:
    """The session of this process's start-up, while it runs."""
    return _Current.session


@dataclass(slots=True)
class Session:
    """The plan, the recorder and what was installed, for one rank."""

    options: Options
    plan: Plan
    rank: int
    recorder: Recorder
    started_at: str
    allocator: AllocatorChoice | None = None
    extra: dict[str, Any] = field(default_factory=dict)
    driven: RunReport | None = None
    driven_offset: float = 0.0

    def adopt_drive(self, report: RunReport, offset: float) -> None:
        """Keep drive mode's run report; its times start ``offset`` s into the session."""
        self.driven, self.driven_offset = report, offset
        self.extra["drive"] = report.to_dict()

    @classmethod
    def begin(cls, server_args: Any, options: Options, rank: int) -> Session | None:
        """The session for SGLang's ``server_args``; ``None`` (verify mode) when no plan
        can be made for the launch: verify only observes, so a plan problem is reported
        in one line and SGLang starts as it would without initorch.  Drive mode needs
        the plan to run, so there the problem stops the launch."""
        with COST.timed("plan"):
            session = cls._begin(server_args, options, rank)
        if session is not None:  # "hooks" times itself
            module = str(session.plan.config()["device.torch_module"])
            apply({hook_target(call, module): (set_device_observer(module), "around")
                   for call in CALLS if call.step == "set_device"})
        return session

    @classmethod
    def _begin(cls, server_args: Any, options: Options, rank: int) -> Session | None:
        from initorch import Registry

        selection = selection_for(server_args, options)
        plan = plan_for(selection, Registry.with_plugins(), options)
        if plan is None:
            return None
        recorder = Recorder(plan, stop_on_violation=options.stop_on_violation,
                            engine=_engine())
        session = cls(options, plan, rank, recorder, now_iso())
        go_first()  # once every plugin loaded, the integration's import hooks run last
        session.extra["selection"] = selection.describe()
        if plan.config().get("hicache.enabled") and server_args.enable_hierarchical_cache:
            session.allocator = install_host_allocator(
                str(server_args.device), str(plan.config()["device.host_allocator"]))
            logger.info("initorch-sglang: %s", session.allocator.describe())
            _record_host_allocation(str(server_args.device))
        return session

    def finish(self, error: BaseException | None = None) -> None:
        """Write the report and trace, and say how the start-up went against the plan."""
        from initorch.renderers import run_summary_text

        up = process_age()
        COST.add("recording", self.recorder.overhead)
        reporting = time.perf_counter()
        report = build_report(self.recorder, mode=self.options.mode, rank=self.rank,
                              started_at=self.started_at, driven=self.driven,
                              driven_offset=self.driven_offset)
        table = run_summary_text(report)
        self.extra |= {
            "table": table,
            "mode": self.options.mode,
            "calls": [call.to_dict() for call in self.recorder.calls],
            "vendor_calls": [record.to_dict() for record in self.recorder.vendor_calls],
            "violations": [str(violation) for violation in self.recorder.violations],
            "host_allocator": None if self.allocator is None else {
                "device": self.allocator.device_type, "allocator": self.allocator.allocator,
                "installed_by_initorch": self.allocator.installed},
            "error": None if error is None else f"{type(error).__name__}: {error}",
        }
        COST.add("report", time.perf_counter() - reporting)  # its own write not counted
        self.extra["cost"] = COST.to_dict(up)
        for warning in write_outputs(report, self.extra,
                                     report_path=rank_path(self.options.report, self.rank),
                                     trace_path=rank_path(self.options.trace, self.rank)):
            logger.warning(warning)
        logger.info("initorch-sglang: the start-up as initorch steps:\n%s", table)
        logger.info("initorch-sglang: %s", COST.line(up))
        checked = sum(1 for name in self.plan.order if name in self.recorder.first_calls())
        if self.recorder.violations:
            for violation in self.recorder.violations:
                logger.error("initorch-sglang: order violation: %s", violation)
        elif error is None:
            logger.info("initorch-sglang: %s ok: %d of %d planned steps seen in SGLang's "
                        "order (profiles %s, fingerprint %s)", self.options.mode, checked,
                        len(self.plan.order), " + ".join(self.plan.profiles),
                        self.plan.fingerprint[:12])


def plan_for(selection: Selection, registry: Registry, options: Options) -> Plan | None:
    """The plan of ``selection``; ``None`` in verify mode when it cannot be made: verify
    only observes, so a plan problem is reported in one line and SGLang starts as it
    would without initorch.  Drive mode needs the plan to run: there it stops the launch."""
    from initorch import InitorchError

    try:
        return selection.plan(registry)
    except InitorchError as error:
        if options.mode == "drive":
            raise
        logger.error("initorch-sglang: verify is off for this rank, no plan for this launch "
                     "(%s): %s", selection.describe(), str(error).splitlines()[0])
        return None


def observer(step: str) -> Callable[..., Any]:
    """An ``around`` hook that records each call as a call of ``step``."""

    def observe(original: Callable[..., Any], *args: Any, **kwargs: Any) -> Any:
        session = _Current.session
        if session is None:
            return original(*args, **kwargs)
        with session.recorder.observe(step) as call:
            call.result = original(*args, **kwargs)
            return call.result

    observe.__qualname__ = f"observe_{step}"
    return observe


def set_device_observer(module_name: str) -> Callable[..., Any]:
    """The ``around`` hook on ``<device module>.set_device(index)``: records the call and
    the device it binds to the calling thread, from its argument (no device query)."""
    kind = module_name.rsplit(".", 1)[-1]

    def observe_set_device(original: Callable[..., Any], device: Any, *args: Any,
                           **kwargs: Any) -> Any:
        session = _Current.session
        if session is None:
            return original(device, *args, **kwargs)
        index = getattr(device, "index", device)
        with session.recorder.observe("set_device", binds=f"{kind}:{index}"):
            return original(device, *args, **kwargs)

    return observe_set_device


class _Unrecorded:
    """A vendor call outside a session (after start-up): nothing to keep."""

    def returned(self, result: Any) -> None:
        pass


@contextmanager
def observe_vendor(call: VendorCall) -> Iterator[VendorRecord | _Unrecorded]:
    """Open the record of vendor call ``call`` in this process's session, if one runs
    (the ``observe`` of :func:`initorch_sglang.vendor.install_vendor_hooks`)."""
    session = _Current.session
    if session is None:
        yield _Unrecorded()
        return
    with session.recorder.observe_vendor(call, _sglang_site()) as record:
        yield record


def _sglang_site() -> CallSite:
    import sglang

    return call_site(Path(sglang.__file__).parent)


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


def observer_hooks() -> dict[str, tuple[Callable[..., Any], HookKind]]:
    """The hooks that record SGLang's calls; ``set_device``'s target depends on the
    device, so it is hooked when the session knows the profile."""
    return {call.target: (observer(call.step), "around") for call in CALLS
            if call.step != "set_device"}


def scheduler_hook(options: Options) -> Callable[..., Any]:
    """The ``around`` hook on ``Scheduler.__init__`` that runs the session."""

    def run_session(original: Callable[..., Any], scheduler: Any, server_args: Any,
                    *args: Any, **kwargs: Any) -> Any:
        rank = world_rank(original, scheduler, server_args, *args, **kwargs)
        session = _Current.session = Session.begin(server_args, options, rank)
        if session is None:
            return original(scheduler, server_args, *args, **kwargs)
        try:
            result = original(scheduler, server_args, *args, **kwargs)
        except BaseException as error:
            session.finish(error)
            raise
        else:
            session.finish()
        finally:
            _Current.session = None
        return result

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


def _engine() -> str:
    """``SGLang <version>``, as the messages name the server."""
    from initorch_sglang.version import installed_sglang

    return f"SGLang {installed_sglang() or '(version unknown)'}"
