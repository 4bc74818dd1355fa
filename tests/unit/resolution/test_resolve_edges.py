"""The edges of a resolved plan against a model of the rules, on random steps and profiles.

The resolver takes a step's own edges from the records its registration wrote
(:func:`~initorch.model.step.own_edge_records`) and writes them afresh only where a
profile changed them; this holds both paths, and every rule between them (edges
added with and without a reason, removed, restated; ``before`` edges; ordering-only
edges to unplanned steps; a step whose fields alone changed; the device edge), to
one plain reading of the rules.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from hypothesis import given, settings
from hypothesis import strategies as st

from initorch import Registry
from initorch.loading.compose import compose
from initorch.model.step import EDGE_KINDS
from initorch.resolution.resolve import resolve
from tests.support.synthetic import define

Change = tuple[str, str, str | None]  # (kind, other step, reason): an edge a profile adds


@dataclass
class Case:
    names: list[str]
    declared: dict[str, dict[str, list[str]]]  # by step, by kind: the steps it lists
    bound: set[str]  # device_bound steps (s0 binds the device)
    entries: dict[str, tuple[list[Change], list[tuple[str, str]], int | None]]

    def profile(self) -> str:
        lines = ["device: {type: cpu}", "steps:"]
        for name, (adds, removes, timeout) in self.entries.items():
            lines.append(f"  {name}:")
            for kind in EDGE_KINDS:
                added = [f"{{step: {other}, reason: {reason}}}" if reason else other
                         for k, other, reason in adds if k == kind]
                if added:
                    lines.append(f"    {kind}: [{', '.join(added)}]")
            if removes:
                by_kind = {kind: [t for k, t in removes if k == kind] for kind, _ in removes}
                lines.append("    remove: {" + ", ".join(
                    f"{kind}: [{', '.join(targets)}]" for kind, targets in by_kind.items()) + "}")
            if timeout is not None:
                lines.append(f"    timeout: {timeout}")
            if len(lines[-1]) == len(name) + 3:  # nothing under it
                lines[-1] += " {}"
        return "\n".join(lines) + "\n"


@st.composite
def cases(draw: st.DrawFn) -> Case:
    """Steps s0..sN whose edges all point forward (so no cycle), listed in part by one
    profile that adds, restates and removes edges (forward too) and overrides fields."""
    count = draw(st.integers(2, 7))
    names = [f"s{i}" for i in range(count)]
    declared = {name: {kind: [] for kind in EDGE_KINDS} for name in names}
    for later in range(1, count):
        for earlier in range(later):
            kind = draw(st.sampled_from([None, None, *EDGE_KINDS]))
            if kind == "before":
                declared[names[earlier]]["before"].append(names[later])
            elif kind is not None:
                declared[names[later]][kind].append(names[earlier])
    bound = draw(st.sets(st.sampled_from(names[1:])))
    listed = draw(st.sets(st.sampled_from(names), min_size=1)) | ({"s0"} if bound else set())
    entries = {}
    for name in sorted(listed):
        at = names.index(name)
        adds: list[Change] = []
        for other in names:
            position = names.index(other)
            kinds = ["before"] if position > at else [] if position == at else \
                ["requires", "wants", "after"]
            kind = draw(st.sampled_from([None, None, *kinds])) if kinds else None
            if kind is not None:
                adds.append((kind, other, draw(st.sampled_from([None, "because"]))))
        added = {(kind, other) for kind, other, _ in adds}
        removable = [(kind, other) for kind in EDGE_KINDS for other in declared[name][kind]
                     if (kind, other) not in added]
        removes = draw(st.lists(st.sampled_from(removable), unique=True)) if removable else []
        entries[name] = (adds, removes, draw(st.sampled_from([None, 5])))
    return Case(names, declared, bound, entries)


def expected_edges(case: Case) -> list[tuple[str, str, str, str, str | None]]:
    """The plan's edges as the rules say: each planned step's effective edges among
    planned steps, declared by its code or (added, or restated with a reason) by the
    profile, and the device edge into every device_bound step."""
    effective = {name: {kind: list(targets) for kind, targets in kinds.items()}
                 for name, kinds in case.declared.items()}
    by_profile: dict[tuple[str, str, str], str | None] = {}
    for name, (adds, removes, _) in case.entries.items():
        for kind, other, reason in adds:
            if other not in effective[name][kind]:
                effective[name][kind].append(other)
                by_profile[(name, kind, other)] = reason
            elif reason:
                by_profile[(name, kind, other)] = reason
        for kind, other in removes:
            effective[name][kind].remove(other)
    planned, pending = set(), list(case.entries)
    while pending:
        name = pending.pop()
        if name not in planned:
            planned.add(name)
            pending += effective[name]["requires"] + effective[name]["wants"]
    edges = []
    for name in planned:
        for kind in EDGE_KINDS:
            for other in effective[name][kind]:
                if other not in planned:
                    continue
                source, target = (name, other) if kind == "before" else (other, name)
                declarer = "profile synthetic" if (name, kind, other) in by_profile \
                    else f"step {name}"
                edges.append((source, target, kind, declarer,
                               by_profile.get((name, kind, other))))
        if name in case.bound:
            edges.append(("s0", name, "device", f"step {name}", None))
    return sorted(edges)


@settings(max_examples=300, deadline=None)
@given(cases())
def test_the_plan_carries_exactly_the_edges_the_rules_give(tmp_path_factory, case: Case):
    registry = Registry()
    for name in case.names:
        kinds = case.declared[name]
        registry.steps.add(define(name, **{kind: tuple(kinds[kind]) for kind in EDGE_KINDS},
                                  device_bound=name in case.bound, binds_device=name == "s0"))
    profile = Path(tmp_path_factory.mktemp("edges")) / "synthetic.yaml"
    profile.write_text(case.profile(), encoding="utf-8")
    plan = resolve(compose(registry.profiles, [str(profile)]), registry.steps)
    edges = list(plan.graph.edges())
    assert sorted((e.source, e.target, e.kind, e.declared_by, e.reason)
                  for e in edges) == expected_edges(case)
    for found in edges:  # each where it was declared: the step's code, or the profile's line
        code = registry.steps.get(found.target if found.kind != "before" else found.source)
        assert found.declared_at == code.defined_at if found.declared_by.startswith("step ") \
            else found.declared_at.path == str(profile)
