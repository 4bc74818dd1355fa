"""A timeline as text: ``blame`` and ``critical-chain`` as ``systemd-analyze`` prints
them, and what got slower between two start-ups (``--compare``)."""

from __future__ import annotations

from collections import defaultdict

from initorch.reporting.timeline import NOT_MEASURED, Phase, Process, Timeline

BLAME_LINES = 40
"""The longest phases ``blame`` lists; the rest are summed in one line."""


def timeline_text(timeline: Timeline) -> str:
    """What ``initorch timeline`` prints: the processes, the time to ready, the chain
    that decided it and the phases longest first."""
    filled = timeline.with_gaps()
    origin = filled.origin
    lines = [f"ready after {filled.ready_at() - origin:.3f}s "
             f"({len(filled.processes)} process(es), {len(filled.phases)} phases)"]
    for process in filled.processes:
        ready = "" if process.ready is None else f", ready @{process.ready - origin:.3f}s"
        lines.append(f"  pid {process.pid}: {process.name}{ready}{_overhead(process, filled)}")
    lines += ["", "critical chain (what the ready moment waited for):"]
    for depth, phase in enumerate(filled.critical_chain()):
        lead = "  " + "  " * depth + ("└─" if depth else "")
        lines.append(f"{lead}{_label(phase)} @{phase.start - origin:.3f}s "
                     f"+{phase.duration:.3f}s{_where(phase)}")
    lines += ["", "blame (longest first):"]
    ranked = filled.blame()
    for phase in ranked[:BLAME_LINES]:
        lines.append(f"  {phase.duration:9.3f}s  {_label(phase)}  [pid {phase.process}, "
                     f"{phase.thread}]{_where(phase)}")
    if len(ranked) > BLAME_LINES:
        rest = ranked[BLAME_LINES:]
        lines.append(f"  {sum(p.duration for p in rest):9.3f}s  ({len(rest)} shorter phases)")
    unseen = [p for p in filled.phases if not p.measured]
    if unseen:
        lines.append(f"  {sum(p.duration for p in unseen):9.3f}s  {NOT_MEASURED} "
                     f"({len(unseen)} stretch(es) no phase covers)")
    return "\n".join(lines)


def _overhead(process: Process, timeline: Timeline) -> str:
    """What recording the process's timeline cost in it, and its share of the process's
    start-up (from its first phase to its ready moment, else to its last phase)."""
    if process.overhead is None:
        return ""
    own = [p for p in timeline.phases if p.process == process.pid]
    if not own:
        return f"; recording {process.overhead:.4f}s"
    begun = min(p.start for p in own)
    up = (process.ready if process.ready is not None else max(p.end for p in own)) - begun
    share = f" = {process.overhead / up:.2%} of its {up:.3f}s start-up" if up > 0 else ""
    return f"; recording {process.overhead:.4f}s{share}"


def compare_text(before: Timeline, after: Timeline) -> str:
    """Phase by phase (by process name and phase name, repeated phases summed): how
    long each took in ``before`` and ``after``, the phases that got slower first."""
    old, new = _totals(before), _totals(after)
    rows = []
    for key in sorted(old.keys() | new.keys()):
        first, second = old.get(key), new.get(key)
        change = (second or 0.0) - (first or 0.0)
        rows.append((change, key, first, second))
    rows.sort(key=lambda row: (-row[0], row[1]))
    ready_a = before.ready_at() - before.origin
    ready_b = after.ready_at() - after.origin
    lines = [f"ready after {ready_a:.3f}s -> {ready_b:.3f}s ({ready_b - ready_a:+.3f}s)", "",
             f"  {'before':>9}  {'after':>9}  {'change':>9}  phase"]
    for change, (process, phase), first, second in rows:
        lines.append(f"  {_seconds(first)}  {_seconds(second)}  {change:+8.3f}s  "
                     f"{phase}  [{process}]")
    return "\n".join(lines)


def _totals(timeline: Timeline) -> dict[tuple[str, str], float]:
    names = {process.pid: process.name for process in timeline.processes}
    totals: dict[tuple[str, str], float] = defaultdict(float)
    for phase in timeline.phases:
        if phase.measured:
            totals[(names.get(phase.process, str(phase.process)), phase.name)] += phase.duration
    return dict(totals)


def _seconds(value: float | None) -> str:
    return f"{'-':>9}" if value is None else f"{value:8.3f}s"


def _label(phase: Phase) -> str:
    if phase.status not in (None, "succeeded"):
        return f"{phase.name} ({phase.status})"
    return phase.name


def _where(phase: Phase) -> str:
    return f"  {phase.source}" if phase.source else ""
