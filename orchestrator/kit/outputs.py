"""One rank's start-up as initorch's run report and trace.

The report is initorch's :class:`~initorch.RunReport` over the plan the engine was checked
against: a step the engine called is ``succeeded`` (or ``failed``) with the times of its
first call, a planned step it never called is ``skipped`` with that reason, and a step it
called that did nothing (:func:`did_nothing`) is ``skipped`` with why.  A section named
after the integration adds what only it knows: the mode, every call (a second
``set_device`` too), the violations.  Paths take ``{rank}``, so ``initorch trace merge``
joins the ranks' traces.
"""

from __future__ import annotations

import dataclasses
import json
import os
from dataclasses import field
from datetime import datetime, timezone
from pathlib import Path
from typing import TYPE_CHECKING, Any

from initorch.records import record

if TYPE_CHECKING:
    from collections.abc import Mapping, Sequence

    from initorch import RunReport
    from initorch.kit.recorder import Call, Recorder
    from initorch.kit.vendor import VendorCall

__all__ = ["Idle", "build_report", "did_nothing", "now_iso", "rank_path", "write_outputs"]


@record
class Idle:
    """How to tell an engine call that did nothing from one that did something.

    ``vendor_calls``: a step that works through these vendor calls did nothing when it
    made none of them; ``off_cpu``: steps the engine performs on device ``cpu`` only,
    each with why (its upstream ``file:line``)."""

    vendor_calls: Sequence[VendorCall] = ()
    off_cpu: Mapping[str, str] = field(default_factory=dict)


def build_report(recorder: Recorder, *, mode: str, rank: int, started_at: str,
                 idle: Idle, driven: RunReport | None = None,
                 driven_offset: float = 0.0) -> RunReport:
    """The run report of the calls ``recorder`` saw (executor ``<package>-<mode>``); in
    drive mode, a step that the engine did not call but initorch ran (the rendezvous)
    or failed comes from ``driven``, the drive run's report, its times moved by
    ``driven_offset``."""
    from initorch import RunReport, StepOutcome

    engine = recorder.engine.name

    first = recorder.first_calls()
    outcomes: dict[str, StepOutcome] = {}
    for name in recorder.plan.order:
        call = first.get(name)
        ran = None if driven is None else driven.outcomes.get(name)
        if ran is not None and ran.started is not None and (call is None or
                                                             ran.status == "failed"):
            outcomes[name] = dataclasses.replace(
                ran, started=ran.started + driven_offset,
                finished=None if ran.finished is None else ran.finished + driven_offset)
            continue
        if call is None:
            outcomes[name] = StepOutcome(name, status="skipped",
                                         reason=f"not called by {engine} in this start-up")
            continue
        why = did_nothing(recorder, call, idle)
        if why is not None:
            outcomes[name] = StepOutcome(name, status="skipped", reason=why,
                                         started=call.started, finished=call.finished,
                                         thread=call.thread, thread_id=call.thread_id)
            continue
        calls = sum(1 for seen in recorder.calls if seen.step == name)
        outcomes[name] = StepOutcome(
            name, status="failed" if call.error is not None else "succeeded", attempts=calls,
            started=call.started, finished=call.finished if call.finished is not None
            else recorder.elapsed(), thread=call.thread, thread_id=call.thread_id,
            error=call.error)
    for skipped in recorder.plan.skipped:
        outcomes[skipped.name] = StepOutcome(skipped.name, status="skipped",
                                             reason=skipped.reason)
    return RunReport(plan=recorder.plan, executor=f"{recorder.engine.package}-{mode}", rank=rank,
                     outcomes=outcomes, started_at=started_at, wall_time=recorder.elapsed())


def did_nothing(recorder: Recorder, call: Call, idle: Idle) -> str | None:
    """Why the engine's call of a step did nothing (``None`` when it did something): a
    step that works through vendor calls made none of them (a shared transfer engine when
    nothing in the launch needs one), or a CPU-only call on another device."""
    if call.error is not None:
        return None
    said = f"called by {recorder.engine.name}, did nothing"
    vendor = sorted({v.label for v in idle.vendor_calls if v.step == call.step})
    if vendor and not any(made.step == call.step for made in recorder.vendor_calls):
        return f"{said}: it made no {' or '.join(vendor)} call"
    why = idle.off_cpu.get(call.step)
    if why is not None and recorder.plan.device.type != "cpu":
        return f"{said}: {why}"
    return None


def now_iso() -> str:
    return datetime.now(timezone.utc).isoformat(timespec="milliseconds")


def rank_path(path: str | None, rank: int) -> Path | None:
    """``path`` with ``{rank}`` filled in."""
    return None if not path else Path(path.replace("{rank}", str(rank)))


def write_outputs(report: RunReport, extra: dict[str, Any], *, section: str,
                  report_path: Path | None, trace_path: Path | None,
                  writer: str = "initorch") -> list[str]:
    """Write the report (with ``extra`` as its ``section``) and the trace; return one
    warning per file that could not be written, each starting with ``writer`` (the
    start-up's own outcome never depends on them)."""
    warnings: list[str] = []
    data = report.to_dict() | {section: extra}
    for path, payload in ((report_path, data), (trace_path, report.trace_events())):
        if path is None:
            continue
        try:
            path.parent.mkdir(parents=True, exist_ok=True)
            temporary = path.with_name(f".{path.name}.{os.getpid()}.tmp")
            temporary.write_text(json.dumps(payload, indent=2, default=str) + "\n")
            temporary.replace(path)
        except OSError as error:
            warnings.append(f"{writer}: cannot write {path}: {error.strerror or error}")
    return warnings
