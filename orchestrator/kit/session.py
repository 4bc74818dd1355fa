"""One rank's start-up under an integration: from the rank's constructor to its end.

An engine builds one worker per rank process, and everything initorch models happens
inside that worker's constructor.  So an integration hooks the constructor and runs it
inside :func:`run_framed`: the session begins when the constructor is entered (the
integration resolves the plan for the engine's own arguments and starts a
:class:`~initorch.kit.recorder.Recorder`), and it ends when the constructor returns or
raises, writing the rank's report and trace (:meth:`RankSession.finish`).

While a session runs it is this process's :func:`active` session, which the hooks read:
:func:`observer` records an engine call as a step, :func:`set_device_observer` records
``set_device`` and the device it binds to the calling thread (from its argument: no
device query), and :func:`observe_vendor` opens the record of a vendor call.  Outside a
session (before it, after it) they call straight through.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, TypeVar

from initorch.kit.cost import COST, process_age
from initorch.kit.outputs import Idle, build_report, now_iso, rank_path, write_outputs
from initorch.kit.vendor import call_site

if TYPE_CHECKING:
    from initorch import Plan, RunReport
    from initorch.kit.recorder import Recorder, VendorRecord
    from initorch.kit.vendor import VendorCall

__all__ = ["Outputs", "RankSession", "active", "observe_vendor", "observer", "plan_or_off",
           "run_framed", "set_device_observer"]

T = TypeVar("T")


@dataclass(frozen=True, slots=True)
class Outputs:
    """Where a rank's report and trace go (``{rank}`` filled in; ``None``: not written),
    the report's section for what only the integration knows, and how to tell a call
    that did nothing (:class:`~initorch.kit.outputs.Idle`)."""

    section: str
    report: str | None = None
    trace: str | None = None
    idle: Idle = field(default_factory=Idle)


@dataclass(slots=True)
class RankSession:
    """The plan, the recorder and what the report will say, for one rank.

    ``extra`` is the integration's section of the report (the selection, what it
    installed); ``driven`` is the run report of drive mode's steps, when it ran them."""

    plan: Plan
    recorder: Recorder
    rank: int
    mode: str
    outputs: Outputs
    started_at: str = field(default_factory=now_iso)
    extra: dict[str, Any] = field(default_factory=dict)
    driven: RunReport | None = None
    driven_offset: float = 0.0

    def adopt_drive(self, report: RunReport, offset: float) -> None:
        """Keep drive mode's run report; its times start ``offset`` s into the session."""
        self.driven, self.driven_offset = report, offset
        self.extra["drive"] = report.to_dict()

    def finish(self, error: BaseException | None = None) -> RunReport:
        """Write the report and trace, and say how the start-up went against the plan."""
        from initorch.renderers import run_summary_text

        engine = self.recorder.engine
        logger = _logger(engine.integration)
        up = process_age()
        COST.add("recording", self.recorder.overhead)
        reporting = time.perf_counter()
        report = build_report(self.recorder, mode=self.mode, rank=self.rank,
                              started_at=self.started_at, idle=self.outputs.idle,
                              driven=self.driven, driven_offset=self.driven_offset)
        table = run_summary_text(report)
        self.extra |= {
            "table": table,
            "mode": self.mode,
            "calls": [call.to_dict() for call in self.recorder.calls],
            "vendor_calls": [record.to_dict() for record in self.recorder.vendor_calls],
            "violations": [str(violation) for violation in self.recorder.violations],
            "error": None if error is None else f"{type(error).__name__}: {error}",
        }
        COST.add("report", time.perf_counter() - reporting)  # its own write not counted
        self.extra["cost"] = COST.to_dict(up)
        for warning in write_outputs(report, self.extra, section=self.outputs.section,
                                     report_path=rank_path(self.outputs.report, self.rank),
                                     trace_path=rank_path(self.outputs.trace, self.rank),
                                     writer=engine.integration):
            logger.warning(warning)
        logger.info("%s: the start-up as initorch steps:\n%s", engine.integration, table)
        logger.info("%s: %s", engine.integration, COST.line(up))
        checked = sum(1 for name in self.plan.order if name in self.recorder.first_calls())
        if self.recorder.violations:
            for violation in self.recorder.violations:
                logger.error("%s: order violation: %s", engine.integration, violation)
        elif error is None:
            logger.info("%s: %s ok: %d of %d planned steps seen in %s's order (profiles %s, "
                        "fingerprint %s)", engine.integration, self.mode, checked,
                        len(self.plan.order), engine.name, " + ".join(self.plan.profiles),
                        self.plan.fingerprint[:12])
        return report


def _logger(integration: str) -> logging.Logger:
    """The integration's logger (``initorch-x`` logs as ``initorch_x``): the engine's
    logging configuration decides where it goes; a library never configures it."""
    return logging.getLogger(integration.replace("-", "_"))


class _Current:
    """The session of this process's start-up, while the rank's constructor runs (one
    per process: an engine builds one worker per rank process)."""

    session: RankSession | None = None


def active() -> RankSession | None:
    """The session of this process's start-up, while it runs."""
    return _Current.session


def run_framed(begin: Callable[[], RankSession | None], start: Callable[[], T]) -> T:
    """Run ``start`` (the engine's constructor of a rank) as this process's session:
    ``begin`` makes the session (``None``: the rank starts unobserved), which is active
    while ``start`` runs and finished when it returns or raises."""
    session = _Current.session = begin()
    if session is None:
        return start()
    try:
        result = start()
    except BaseException as error:
        session.finish(error)
        raise
    else:
        session.finish()
    finally:
        _Current.session = None
    return result


def plan_or_off(make: Callable[[], Plan], *, mode: str, describe: str,
                integration: str) -> Plan | None:
    """The plan ``make`` resolves; ``None`` in verify mode when it cannot be made: verify
    only observes, so a plan problem is reported in one line (``describe``: the
    selection, as a command) and the engine starts as it would without initorch.  Drive
    mode needs the plan to run: there the problem stops the launch."""
    from initorch import InitorchError

    try:
        return make()
    except InitorchError as error:
        if mode == "drive":
            raise
        _logger(integration).error("%s: verify is off for this rank, no plan for this "
                                   "launch (%s): %s", integration, describe,
                                   str(error).splitlines()[0])
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
    (the ``observe`` of :func:`initorch.kit.vendor.install_vendor_hooks`); the call site
    is the innermost frame of the engine's package."""
    session = _Current.session
    if session is None:
        yield _Unrecorded()
        return
    site = call_site(session.recorder.engine.package_root())
    with session.recorder.observe_vendor(call, site) as record:
        yield record
