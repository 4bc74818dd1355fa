"""A timeline as one Chrome/Perfetto trace: a process per server process, a track per
thread, every phase one complete ("X") event, times in microseconds since the
timeline's origin (the same shape as ``initorch run --trace``)."""

from __future__ import annotations

from typing import Any

from initorch.reporting.timeline import Timeline


def timeline_trace(timeline: Timeline) -> dict[str, Any]:
    """The merged trace of ``timeline`` (gaps included, as "not measured" events)."""
    filled = timeline.with_gaps()
    origin = filled.origin
    events: list[dict[str, Any]] = []
    tids: dict[tuple[int, str], int] = {}
    for index, process in enumerate(filled.processes):
        events.append({"name": "process_name", "ph": "M", "pid": process.pid, "tid": 0,
                       "args": {"name": f"{process.name} (pid {process.pid})"}})
        events.append({"name": "process_sort_index", "ph": "M", "pid": process.pid, "tid": 0,
                       "args": {"sort_index": index}})
    for phase in filled.phases:
        key = (phase.process, phase.thread)
        if key not in tids:
            tids[key] = len([k for k in tids if k[0] == phase.process]) + 1
            events.append({"name": "thread_name", "ph": "M", "pid": phase.process,
                           "tid": tids[key], "args": {"name": phase.thread}})
        details = {name: value for name, value in (("source", phase.source),
                                                   ("status", phase.status),
                                                   ("detail", phase.detail))
                   if value is not None}
        events.append({"name": phase.name, "cat": f"initorch.{phase.kind}", "ph": "X",
                       "ts": round((phase.start - origin) * 1e6, 3),
                       "dur": round(phase.duration * 1e6, 3), "pid": phase.process,
                       "tid": tids[key], "args": details})
    ready = filled.ready_at()
    events.append({"name": "ready", "ph": "i", "s": "g", "pid": 0, "tid": 0,
                   "ts": round((ready - origin) * 1e6, 3)})
    return {"traceEvents": events, "displayTimeUnit": "ms",
            "otherData": {"origin": origin, "labels": filled.labels}}
