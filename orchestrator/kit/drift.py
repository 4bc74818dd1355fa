"""Drift: a profile's ordering claims checked against an engine's code, read as text.

An engine's tree or wheel is read without importing it (:mod:`initorch.kit.source`).
Each step the engine performs has a call chain in the layout's call map
(:mod:`initorch.kit.callmap`), from a function the engine runs down to the call itself.
Each hop is followed into the engine's own helpers, and every call site counts, the
conditional ones too (:mod:`initorch.kit.chains`).  For every edge of the plan between
two such steps the chains are followed to where they part, inside one function, and the
calls' lines there decide the order the engine really has.  A claim whose lines disagree,
a chain whose call is no longer where it was, or a hook target the tree no longer defines
is drift (exit 1); an edge whose chains start in different functions cannot be decided
from the source and is listed as such (verify mode checks it in a running server).  A
tree of no known layout is all drift (:meth:`DriftReport.unknown_layout`): nothing of it
can be trusted.
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import TYPE_CHECKING, Literal

from initorch.kit.chains import MissingCall, Site, locate_chain, order
from initorch.kit.follow import resolve_target
from initorch.records import record

if TYPE_CHECKING:
    from initorch import Edge, Plan
    from initorch.kit.callmap import CallMap, EngineCall
    from initorch.kit.source import SourceTree

__all__ = ["DriftReport", "EdgeCheck", "check_drift"]

Verdict = Literal["ok", "drift", "undecidable"]


@record
class EdgeCheck:
    """One claim (``edge``) and what the engine's source says of it."""

    edge: Edge
    verdict: Verdict
    evidence: str

    def line(self) -> str:
        label = {"ok": "ok", "drift": "DRIFT", "undecidable": "run-time"}[self.verdict]
        reason = f"\n           profile: {self.edge.reason}" if self.edge.reason else ""
        return (f"  {label:<8} {self.edge.source} before {self.edge.target}: "
                f"{self.evidence}{reason}")


@record
class DriftReport:
    """Every checked claim, and the chains that could not be followed, for one release
    of engine ``engine`` (its name, as messages say it)."""

    engine: str
    version: str | None
    origin: Path
    checks: tuple[EdgeCheck, ...]
    missing: tuple[str, ...]
    layout: str | None = None

    @classmethod
    def unknown_layout(cls, tree: SourceTree, where: str) -> DriftReport:
        """The report on a tree no call map fits (``where``: where the maps live)."""
        return cls(tree.engine.name, tree.version(), tree.origin, (),
                   (f"layout: no known call map fits this tree (see {where})",))

    @property
    def drifted(self) -> bool:
        return bool(self.missing) or any(check.verdict == "drift" for check in self.checks)

    def text(self, plan: Plan) -> str:
        counts = {verdict: sum(1 for c in self.checks if c.verdict == verdict)
                  for verdict in ("ok", "drift", "undecidable")}
        head = (f"{self.engine} {self.version or '(version unknown)'} at {self.origin} (layout "
                f"{self.layout or 'unknown'}), against profiles {' -> '.join(plan.profiles)}")
        body = [check.line() for check in self.checks]
        body += [f"  MISSING  {problem}" for problem in self.missing]
        tail = (f"{len(self.checks)} claim(s): {counts['ok']} ok, {counts['drift']} drift, "
                f"{counts['undecidable']} not decidable from the source (verify mode checks "
                f"them in a running server); {len(self.missing)} call(s) missing")
        verdict = f"drift: {self.engine}'s code no longer matches the profile" \
            if self.drifted \
            else "no drift"
        return "\n".join([head, *body, tail, verdict])


def check_drift(tree: SourceTree, plan: Plan, layout: CallMap) -> DriftReport:
    """Check every plan edge between two steps the engine performs, and every hook
    target of ``layout`` (the call map of the tree's layout)."""
    sites: dict[str, list[Site]] = {}
    missing: list[str] = []
    for target in layout.hook_targets():
        if resolve_target(tree, target) is None:
            missing.append(f"hook target {target} is not defined in this tree")
    for step in plan.order:
        call = layout.call_for(step)
        if call is None or not call.chain:
            continue
        try:
            sites[step] = locate_chain(tree, call.chain)
        except MissingCall as problem:
            missing.append(f"{step}: {problem} (call chain: {_chain(call)})")
    checks = tuple(_judge(edge, sites[edge.source], sites[edge.target])
                   for edge in _unique_edges(plan) if edge.source in sites
                   and edge.target in sites)
    return DriftReport(tree.engine.name, tree.version(), tree.origin, checks, tuple(missing),
                       layout.name)


def _unique_edges(plan: Plan) -> Iterator[Edge]:
    """One edge per ordered pair, the declared one (with a reason) first."""
    seen: set[tuple[str, str]] = set()
    for edge in sorted(plan.graph.edges(), key=lambda e: (e.reason is None, e.source,
                                                          e.target)):
        if (edge.source, edge.target) not in seen:
            seen.add((edge.source, edge.target))
            yield edge


def _judge(edge: Edge, first: list[Site], second: list[Site]) -> EdgeCheck:
    found = order(first, second)
    verdict: Verdict = {"before": "ok", "not-before": "drift",
                        "separate": "undecidable"}[found.verdict]  # type: ignore[assignment]
    return EdgeCheck(edge, verdict, found.evidence)


def _chain(call: EngineCall) -> str:
    return " / ".join(str(hop) for hop in call.chain)
