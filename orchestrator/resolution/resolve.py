"""Resolution: composed profiles + registered steps -> a validated :class:`Plan`.

The stages, each collecting every problem before raising:

1. *Selection*: the steps the profiles list and the caller requests, plus
   everything they ``requires`` or ``wants`` and every step that declares itself
   ``wanted_by`` one of them, transitively (systemd's pull-in).
2. *Effective declarations*: profile overrides applied to each step (edges
   added or removed, timeout, retries, ``when``, ``enabled``).
3. *Conditions*: disabled steps and false ``when`` conditions are skipped with
   a reason, and so is a step that only skipped steps pulled in through its
   ``wanted_by``; a hard requirement on a skipped step is an error.
4. *Device context*: every ``device_bound`` step gets an implicit edge from the
   one step that ``binds_device``.  This edge cannot be removed by a profile —
   it is what makes "engine init on a thread without device context" (Ascend
   error 107002) impossible by construction.
5. *Ordering*: the graph is checked for cycles (all of them are reported, each
   edge with where it was declared) and ordered deterministically.
6. *Previews*: steps that declare one say what they will do here, and may
   refuse settings (:mod:`initorch.resolution.preview`).
"""

from __future__ import annotations

import dataclasses
import os
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field

from initorch.errors import ConditionError, CycleError, InitorchError, Problem, ResolveError
from initorch.loading.compose import ComposedProfile
from initorch.loading.document import Setting, StepEntry
from initorch.location import SourceLocation
from initorch.model.conditions import parse_condition
from initorch.model.devices import DeviceRef
from initorch.model.registry import StepRegistry
from initorch.model.step import EDGE_KINDS, EdgeKind, Step
from initorch.resolution.graph import MAX_CYCLES_REPORTED, Edge, StepGraph
from initorch.resolution.plan import Plan, PlannedStep, SkippedStep, fingerprint
from initorch.resolution.preview import preview_steps


@dataclass(slots=True)
class _Candidate:
    """A selected step while it is being resolved."""

    step: Step
    # (why, by whom): ("listed by profile base (...)", None) or ("required by", "x")
    reasons: list[tuple[str, str | None]] = field(default_factory=list)
    edge_sources: dict[tuple[str, str], tuple[SourceLocation, str]] = field(default_factory=dict)
    disabled: Setting | None = None
    disabled_reason: str = ""
    when_location: SourceLocation | None = None
    # The planned steps whose presence pulled this one in through its wanted_by.
    wanted_by_pulls: list[str] = field(default_factory=list)

    @property
    def only_wanted_by(self) -> bool:
        """True when nothing but its own ``wanted_by`` pulled this step in."""
        return bool(self.wanted_by_pulls) and len(self.reasons) == len(self.wanted_by_pulls)


REQUESTED = "requested by load_plan(steps=...)"

# A queued pull-in: step name, (why, by whom), where it was declared, via wanted_by.
_Pull = tuple[str, tuple[str, str | None], SourceLocation | None, bool]


def resolve(composed: ComposedProfile, steps: StepRegistry,
            device_index: int | None = None, requested: Sequence[str] = (),
            environ: Mapping[str, str] | None = None) -> Plan:
    """Resolve ``composed`` against ``steps``; raise an :class:`InitorchError` subclass
    listing every problem when the result would not be a valid plan.

    ``requested`` names steps to plan as if a profile listed them (a launcher's
    own steps, without writing a profile).  Step previews see ``environ``
    (default: this process's environment)."""
    device_type = composed.settings.get("device.type")
    if device_type is None:
        raise ResolveError(
            f"no device type: profile(s) {', '.join(composed.names) or '(none)'} "
            "set no device.type",
            hint="add a device profile, e.g. --profile cpu, or pass --device",
        )
    problems: list[Problem] = []
    candidates = _select(composed, steps, requested, problems)
    _raise_if(problems)
    skipped = _evaluate_conditions(candidates, composed.settings, problems)
    _raise_if(problems)
    _skip_unwanted(candidates, skipped)
    active = {name: c for name, c in candidates.items() if name not in skipped}
    _check_requirements(active, skipped, problems)
    edges = _edges(active, steps, problems) + _device_edges(candidates, skipped, problems)
    _raise_if(problems)
    graph = StepGraph(active, edges)
    cycles = graph.cycles()
    if cycles:
        reported = [_cycle_problem(graph, c) for c in cycles]
        if len(cycles) >= MAX_CYCLES_REPORTED:
            reported.append(Problem(f"(only the first {MAX_CYCLES_REPORTED} cycles are shown)"))
        raise CycleError(tuple(cycles), reported)
    waves = {name: index for index, wave in enumerate(graph.waves()) for name in wave}
    planned = tuple(
        PlannedStep(active[name].step, waves[name],
                    _merge_reasons(active[name].reasons, skipped))
        for name in graph.order()
    )
    skipped_steps = tuple(SkippedStep(name, skipped[name]) for name in sorted(skipped))
    device = DeviceRef(device_type.value, device_index)
    planned = preview_steps(planned, composed.settings, device,
                            os.environ if environ is None else environ)
    return Plan(
        profiles=composed.names,
        device=device,
        settings=dict(composed.settings),
        steps=planned,
        skipped=skipped_steps,
        graph=graph,
        fingerprint=fingerprint(composed.names, device, composed.settings, planned,
                                skipped_steps),
    )


def _merge_reasons(reasons: list[tuple[str, str | None]],
                   skipped: Mapping[str, str]) -> tuple[str, ...]:
    """``required by a``, ``required by b`` -> ``required by a, b`` (first-seen order);
    steps that are skipped pull nothing in, so they are left out."""
    merged: dict[str, list[str]] = {}
    for why, who in reasons:
        if who is None:
            merged.setdefault(why, [])
        elif who not in skipped:
            merged.setdefault(f"{why} ", []).append(who)
    return tuple(key + ", ".join(names) for key, names in merged.items())


def _raise_if(problems: list[Problem]) -> None:
    if problems:
        raise ResolveError(f"{len(problems)} problem(s) in the selected profiles",
                           problems=problems)


def _select(composed: ComposedProfile, registry: StepRegistry, requested: Sequence[str],
            problems: list[Problem]) -> dict[str, _Candidate]:
    """Listed and requested steps with overrides applied, plus the closure of
    requires/wants and of the steps ``wanted_by`` a selected one."""
    wanted_by: dict[str, list[Step]] = {}
    for declared in registry:
        for target in declared.wanted_by:
            wanted_by.setdefault(target, []).append(declared)
    candidates: dict[str, _Candidate] = {}
    queue: list[_Pull] = []
    for name, entries in composed.step_entries.items():
        first = entries[0]
        queue.append((name, (f"listed by profile {first.source} ({first.location})", None),
                      first.location, False))
    queue += [(name, (REQUESTED, None), None, False) for name in requested]
    while queue:
        name, reason, location, via_wanted_by = queue.pop(0)
        if name in candidates:
            candidate = candidates[name]
        else:
            try:
                declared = registry.get(name, location)
            except InitorchError as exc:
                problems.extend(exc.problems)
                continue
            candidate = candidates[name] = _apply_overrides(
                declared, composed.step_entries.get(name, ()), problems)
            pulls: tuple[tuple[EdgeKind, str], ...] = (("requires", "required"),
                                                       ("wants", "wanted"))
            for kind, verb in pulls:
                for target in candidate.step.edges(kind):
                    where, _ = candidate.edge_sources[(kind, target)]
                    queue.append((target, (f"{verb} by", name), where, False))
            queue += [(wanter.name, ("wanted by", name), wanter.defined_at, True)
                      for wanter in wanted_by.get(name, ())]
        candidate.reasons.append(reason)
        if via_wanted_by:
            candidate.wanted_by_pulls.append(str(reason[1]))
    return candidates


def _apply_overrides(step: Step, entries: tuple[StepEntry, ...],
                     problems: list[Problem]) -> _Candidate:
    """Fold every profile entry for ``step`` into one effective declaration."""
    edges: dict[str, list[str]] = {kind: list(step.edges(kind)) for kind in EDGE_KINDS}
    sources = {(kind, t): (step.defined_at, f"step {step.name}")
               for kind in EDGE_KINDS for t in edges[kind]}
    fields: dict[str, object] = {}
    candidate = _Candidate(step)
    for entry in entries:
        for change in entry.changes:
            targets = edges[change.kind]
            if change.add and change.target not in targets:
                targets.append(change.target)
                sources[(change.kind, change.target)] = (change.location,
                                                          f"profile {change.source}")
            elif not change.add:
                if change.target not in targets:
                    problems.append(Problem(
                        f"cannot remove {change.kind} '{change.target}' from step "
                        f"'{step.name}': it is not declared",
                        change.location,
                        f"declared {change.kind}: {', '.join(targets) or 'none'}"))
                    continue
                targets.remove(change.target)
        for override in entry.overrides:
            if override.key == "enabled":
                candidate.disabled = None if override.value else override
            elif override.key == "reason":
                candidate.disabled_reason = override.value
            else:
                fields[override.key] = override.value
                if override.key == "when":
                    candidate.when_location = override.location
                if override.key == "retries" and override.value and not step.retry_on:
                    problems.append(Problem(
                        f"step '{step.name}' declares no transient errors, so it cannot be "
                        "retried", override.location,
                        "retries apply only to errors a step lists in retry_on"))
    candidate.step = dataclasses.replace(
        step, **{kind: tuple(edges[kind]) for kind in EDGE_KINDS}, **fields  # type: ignore[arg-type]
    )
    candidate.edge_sources = {key: sources[key] for key in sources
                              if key[1] in edges[key[0]]}
    return candidate


def _evaluate_conditions(candidates: dict[str, _Candidate], located: Mapping[str, Setting],
                         problems: list[Problem]) -> dict[str, str]:
    """Skip reasons by step name, for disabled steps and false conditions."""
    settings = {key: s.value for key, s in located.items()}
    origins = {key: s.location for key, s in located.items()}
    skipped: dict[str, str] = {}
    for name, candidate in sorted(candidates.items()):
        if candidate.disabled is not None:
            why = f": {candidate.disabled_reason}" if candidate.disabled_reason else ""
            skipped[name] = (f"disabled by profile {candidate.disabled.source} "
                             f"({candidate.disabled.location}){why}")
            continue
        source = candidate.step.when
        if source is None:
            continue
        try:
            condition = parse_condition(source, candidate.when_location
                                        or candidate.step.defined_at)
            condition.check_names(settings)
            if not condition.evaluate(settings):
                values = condition.describe(settings, origins)
                skipped[name] = f"condition '{source}' is false ({values})"
        except ConditionError as exc:
            problems.extend(exc.problems)
    return skipped


def _skip_unwanted(candidates: dict[str, _Candidate], skipped: dict[str, str]) -> None:
    """Skip the steps that only skipped steps pulled in through ``wanted_by``, until none
    is left: a launcher's step for the Mooncake pool is skipped with the pool."""
    changed = True
    while changed:
        changed = False
        for name, candidate in sorted(candidates.items()):
            if name in skipped or not candidate.only_wanted_by:
                continue
            if all(puller in skipped for puller in candidate.wanted_by_pulls):
                pullers = ", ".join(sorted(set(candidate.wanted_by_pulls)))
                skipped[name] = f"wanted only by skipped steps ({pullers})"
                changed = True


def _check_requirements(active: dict[str, _Candidate], skipped: dict[str, str],
                        problems: list[Problem]) -> None:
    for name, candidate in sorted(active.items()):
        for target in candidate.step.requires:
            if target in skipped:
                where, _ = candidate.edge_sources[("requires", target)]
                problems.append(Problem(
                    f"step '{name}' requires '{target}', which is skipped: {skipped[target]}",
                    where,
                    f"skip '{name}' under the same condition, or enable '{target}'"))


def _edges(active: dict[str, _Candidate], registry: StepRegistry,
           problems: list[Problem]) -> list[Edge]:
    """Ordering edges among active steps, including the implicit device-context edges."""
    edges: list[Edge] = []
    for name, candidate in active.items():
        for kind in EDGE_KINDS:
            for target in candidate.step.edges(kind):
                where, by = candidate.edge_sources[(kind, target)]
                if target not in registry:
                    try:
                        registry.get(target, where)
                    except InitorchError as exc:
                        problems.extend(exc.problems)
                    continue
                if target not in active:
                    continue  # ordering-only edges bind only steps that are both planned
                source, dest = (name, target) if kind == "before" else (target, name)
                edges.append(Edge(source, dest, kind, where, by))
    return edges


def _device_edges(candidates: dict[str, _Candidate], skipped: Mapping[str, str],
                  problems: list[Problem]) -> list[Edge]:
    """An edge from the one active binder to every active device_bound step."""
    active = {name: c for name, c in candidates.items() if name not in skipped}
    bound = sorted(name for name, c in active.items() if c.step.device_bound)
    binders = sorted(name for name, c in active.items() if c.step.binds_device)
    if len(binders) > 1:
        problems.append(Problem(
            f"several steps bind the device: {', '.join(binders)}",
            active[binders[1]].step.defined_at, "exactly one step may declare binds_device"))
        return []
    if bound and not binders:
        idle = sorted(n for n, c in candidates.items() if c.step.binds_device and n in skipped)
        if idle:
            candidate = candidates[idle[0]]
            where = (candidate.disabled.location if candidate.disabled
                     else candidate.when_location or candidate.step.defined_at)
            problems.append(Problem(
                f"'{idle[0]}' binds the device but is skipped ({skipped[idle[0]]}), and "
                f"{', '.join(bound)} need it", where,
                f"do not skip '{idle[0]}': device_bound steps run after it on their thread"))
        else:
            problems.append(Problem(
                f"steps {', '.join(bound)} are device_bound, but no planned step binds the "
                "device", active[bound[0]].step.defined_at,
                "include the step that sets the device (set_device)"))
        return []
    return [
        Edge(binders[0], name, "device", active[name].step.defined_at, f"step {name}")
        for name in bound
    ]


def _cycle_problem(graph: StepGraph, cycle: tuple[str, ...]) -> Problem:
    hops = graph.cycle_edges(cycle)
    loop = " -> ".join((*cycle, cycle[0]))
    detail = "; ".join(edge.describe() for edge in hops)
    return Problem(f"ordering cycle {loop}: {detail}", hops[0].declared_at,
                   "remove or reverse one of these constraints")
