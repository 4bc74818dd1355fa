"""Turning plans and runs into text for people: the dry run, why one step runs before
another, and the run table.

The plan's own text (the dry run) is :func:`plan_text`; its JSON is
:func:`initorch.resolution.saved.plan_json`; its graph for tools (dot, mermaid, JSON)
is :mod:`initorch.reporting.graph_formats`.
"""

from __future__ import annotations

from initorch.model.settings import CORE_KEYS
from initorch.model.step import Step
from initorch.reporting.report import RunReport
from initorch.resolution.plan import Plan
from initorch.resolution.plangraph import Edge


def plan_text(plan: Plan) -> str:
    """The dry run as ``initorch plan`` prints it: ordered steps with waves and
    reasons, then skipped steps, the environment, then the fingerprint."""
    width = max([len(p.name) for p in plan.steps] + [len(s.name) for s in plan.skipped]
                + [4])
    lines = [
        f"profiles: {' -> '.join(plan.profiles)}",
        f"device:   {plan.device}",
        f"plan:     {len(plan.steps)} steps in {len(plan.waves)} waves, "
        f"{len(plan.skipped)} skipped",
        *_hardware_line(plan),
        "",
        f"  #  wave  {'step':<{width}}  why",
    ]
    for number, planned in enumerate(plan.steps, 1):
        lines.append(f"{number:>3}  {planned.wave:>4}  {planned.name:<{width}}  "
                     f"{'; '.join(planned.reasons)}{_details(planned.step)}")
        if planned.notes:
            lines += [f"{'':>11}  | {note}" for note in planned.notes]
    if plan.skipped:
        lines += ["", "skipped:"]
        lines += [f"  {s.name:<{width}}  {s.brief}" for s in plan.skipped]
        if any(s.summary for s in plan.skipped):
            lines.append("  (initorch explain STEP gives the whole reason, with where "
                         "each value came from)")
    if plan.env:
        lines += ["", "environment (set before the first step unless already set):"]
        lines += [f"  {name}={entry.value}  (profile {entry.source}, {entry.location})"
                  for name, entry in plan.env.items()]
    lines += ["", f"fingerprint: {plan.fingerprint}"]
    return "\n".join(lines)


def _details(step: Step) -> str:
    """What the dry run says after a step's reasons: ``  [device-bound, timeout 30s]``,
    or nothing (most steps: then no list is built)."""
    if not (step.device_bound or step.barrier or step.timeout or step.retries):
        return ""
    details = []
    if step.device_bound:
        details.append("device-bound")
    if step.barrier:
        details.append("barrier")
    if step.timeout:
        details.append(f"timeout {step.timeout:g}s")
    if step.retries:
        details.append(f"retries {step.retries}")
    return f"  [{', '.join(details)}]"


def _hardware_line(plan: Plan) -> list[str]:
    """The ``device.*`` settings the plan reads (backend, collectives, allocator,
    protocol...): what tells two device plans apart when their steps are the same."""
    shown = [f"{key.removeprefix('device.')}={setting.value}"
             for key, setting in sorted(plan.settings.items())
             if key.startswith("device.") and key not in CORE_KEYS
             and setting.value is not None]
    return [f"hardware: {' '.join(shown)}"] if shown else []


def explain_text(first: str, second: str, chain: list[Edge]) -> str:
    """Why ``first`` runs before ``second``, one edge per line."""
    lines = [f"{first} runs before {second} because:"]
    lines += [f"  {i}. {edge.describe()}" for i, edge in enumerate(chain, 1)]
    return "\n".join(lines)


def explain_step_text(plan: Plan, name: str) -> str:
    """Why one step is planned (its reasons, what it runs after) or skipped (the whole
    reason, with where each value came from)."""
    skipped = plan.skipped_step(name)
    if skipped is not None:
        return f"{name} is skipped: {skipped.reason}"
    if name not in plan:
        raise plan.not_planned(name)
    planned = plan.step(name)
    lines = [f"{name} is planned, in wave {planned.wave}, because it is:"]
    lines += [f"  - {reason}" for reason in planned.reasons]
    edges = plan.graph.edges_into(name)
    if edges:
        lines += ["it runs after:"] + [f"  - {edge.describe()}" for edge in edges]
    return "\n".join(lines)


def run_summary_text(report: RunReport) -> str:
    """Per-step table, critical chain and blame list of a finished run; the headline
    says what start-up and teardown each took, and their total."""
    plan = report.plan
    width = max(len(name) for name in report.outcomes) if report.outcomes else 4
    if report.interrupted:
        state = f"INTERRUPTED ({report.interrupted})"
    else:
        state = "ok" if report.ok else f"FAILED ({len(report.failed)} step(s))"
        if report.ok and report.peers_lost:
            lost = ",".join(str(rank) for rank in sorted(report.peers_lost))
            state = f"PEER LOST (rank {lost}; every step here succeeded)"
        elif report.ok and report.teardown_failed:
            broken = ", ".join(entry.step for entry in report.teardown_failed)
            state = f"TEARDOWN FAILED ({broken}; every step succeeded)"
    if report.teardown_time is None:
        took = f"{report.wall_time:.3f}s (start-up; not torn down yet)"
    else:
        took = (f"{report.total_time:.3f}s (start-up {report.wall_time:.3f}s + teardown "
                f"{report.teardown_time:.3f}s)")
    lines = [
        f"run: {state} in {took} "
        f"({report.executor}, rank {report.rank}, device {plan.device}, "
        f"fingerprint {plan.fingerprint[:12]})",
        f"  {'step':<{width}}  {'status':<9}  attempts  {'start':>8}  {'duration':>8}",
    ]
    briefs = {s.name: s.brief for s in plan.skipped}  # the report keeps the full reason
    for outcome in (report.outcomes[name] for name in report.step_order()):
        start = f"+{outcome.started:.3f}s" if outcome.started is not None else "-"
        duration = f"{outcome.duration:.3f}s" if outcome.started is not None else "-"
        reason = briefs.get(outcome.name, outcome.reason) if outcome.status == "skipped" \
            else outcome.reason
        note = f"  {reason}" if reason else ""
        lines.append(f"  {outcome.name:<{width}}  {outcome.status:<9}  {outcome.attempts:>8}  "
                     f"{start:>8}  {duration:>8}{note}")
    chain = report.critical_chain()
    if chain:
        lines += ["", "critical chain:"]
        for depth, outcome in enumerate(chain):
            branch = "  " * depth + ("└─" if depth else "")
            lines.append(f"  {branch}{outcome.name} @{outcome.finished or 0.0:.3f}s "
                         f"+{outcome.duration:.3f}s")
    blame = report.blame()
    if blame:
        lines += ["", "blame:"]
        lines += [f"  {o.duration:>8.3f}s  {o.name}" for o in blame]
    return "\n".join(lines)
