"""One rank's start-up as initorch's run report and trace.

The report is initorch's :class:`~initorch.RunReport` over the plan SGLang was checked
against: a step SGLang called is ``succeeded`` (or ``failed``) with the times of its
first call, a planned step it never called is ``skipped`` with that reason.  An
``sglang`` section adds what only this integration knows: the mode, every call (the
second ``set_device`` too), the violations and the host allocator it installed.  Paths
take ``{rank}``, so ``initorch trace merge`` joins the ranks' traces.
"""

from __future__ import annotations

import dataclasses
import json
import os
from datetime import datetime, timezone
from pathlib import Path
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from initorch import RunReport
    from initorch_sglang.recorder import Call, Recorder

__all__ = ["build_report", "rank_path", "write_outputs"]

NOT_CALLED = "not called by SGLang in this start-up"
DID_NOTHING = "called by SGLang, did nothing"
IDLE_OFF_CPU = {
    "bind_cpu_threads": "SGLang binds threads on device cpu only (distributed/bootstrap.py "
                        "_bind_threads_if_cpu, :75-87 in 0.5.23; model_runner.py "
                        "init_threads_binding, :342-343 in 0.5.17)",
}
"""SGLang calls that do nothing off the CPU, and why."""


def build_report(recorder: Recorder, *, mode: str, rank: int, started_at: str,
                 driven: RunReport | None = None, driven_offset: float = 0.0) -> RunReport:
    """The run report of the calls ``recorder`` saw; in drive mode, a step that SGLang
    did not call but initorch ran (the rendezvous) or failed comes from ``driven``, the
    drive run's report, its times moved by ``driven_offset``."""
    from initorch import RunReport, StepOutcome

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
            outcomes[name] = StepOutcome(name, status="skipped", reason=NOT_CALLED)
            continue
        idle = _did_nothing(recorder, call)
        if idle is not None:
            outcomes[name] = StepOutcome(name, status="skipped", reason=idle,
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
    return RunReport(plan=recorder.plan, executor=f"sglang-{mode}", rank=rank,
                     outcomes=outcomes, started_at=started_at, wall_time=recorder.elapsed())


def _did_nothing(recorder: Recorder, call: Call) -> str | None:
    """Why SGLang's call of a step did nothing (``None`` when it did something): a step
    that works through vendor calls made none of them (the shared engine when nothing in
    the launch needs Mooncake), or a CPU-only call on another device."""
    from initorch_sglang.vendor import VENDOR_CALLS

    if call.error is not None:
        return None
    vendor = sorted({v.label for v in VENDOR_CALLS if v.step == call.step})
    if vendor and not any(made.step == call.step for made in recorder.vendor_calls):
        return f"{DID_NOTHING}: it made no {' or '.join(vendor)} call"
    why = IDLE_OFF_CPU.get(call.step)
    if why is not None and recorder.plan.device.type != "cpu":
        return f"{DID_NOTHING}: {why}"
    return None


def now_iso() -> str:
    return datetime.now(timezone.utc).isoformat(timespec="milliseconds")


def rank_path(path: str | None, rank: int) -> Path | None:
    """``path`` with ``{rank}`` filled in."""
    return None if not path else Path(path.replace("{rank}", str(rank)))


def write_outputs(report: RunReport, extra: dict[str, Any], *, report_path: Path | None,
                  trace_path: Path | None) -> list[str]:
    """Write the report (with ``extra`` as its ``sglang`` section) and the trace; return
    one warning per file that could not be written (the start-up's own outcome never
    depends on them)."""
    warnings: list[str] = []
    data = report.to_dict() | {"sglang": extra}
    for path, payload in ((report_path, data), (trace_path, report.trace_events())):
        if path is None:
            continue
        try:
            path.parent.mkdir(parents=True, exist_ok=True)
            temporary = path.with_name(f".{path.name}.{os.getpid()}.tmp")
            temporary.write_text(json.dumps(payload, indent=2, default=str) + "\n")
            temporary.replace(path)
        except OSError as error:
            warnings.append(f"initorch-sglang: cannot write {path}: {error.strerror or error}")
    return warnings
