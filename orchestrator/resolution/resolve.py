"""Resolution: composed profiles + registered steps -> a validated :class:`Plan`.

The stages, each collecting every problem before raising:

1. *Input*: the profiles' format problems, every setting checked against its
   declaration (:mod:`initorch.loading.settle`), the steps the profiles list and
   the caller requests, plus everything they ``requires`` or ``wants`` and every
   step that declares itself ``wanted_by`` one of them, transitively (systemd's
   pull-in), with profile overrides applied (edges added or removed, timeout,
   retries, ``when``, ``enabled``), unknown step names, and every condition
   parsed and checked to read only declared settings.
2. *Conditions*: disabled steps and false ``when`` conditions are skipped with
   a reason, and so is a step that only skipped steps pulled in through its
   ``wanted_by``; a hard requirement on a skipped step is an error, and so is a
   required setting that a planned step reads but no profile gives.
3. *Device context*: every ``device_bound`` step gets an implicit edge from the
   one step that ``binds_device``.  This edge cannot be removed by a profile —
   it is what makes "engine init on a thread without device context" (Ascend
   error 107002) impossible by construction.
4. *Ordering*: the graph is checked for cycles (all of them are reported, each
   edge with where it was declared) and ordered deterministically.
5. *Previews*: steps that declare one say what they will do here, and may
   refuse settings (:mod:`initorch.resolution.preview`).

Stages 1 to 3 run whatever the earlier ones found, on what was valid (a refused
entry is left out, a condition that reads a refused value is not evaluated), and
everything is reported at once: a format problem never hides a misspelt step, a
misspelt setting or a missing required setting.  Only a plan without a device
type stops after stage 1, and cycles are looked for once everything else holds.
"""

from __future__ import annotations

import dataclasses
import os
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import NoReturn

from initorch.errors import (
    ConditionError,
    CycleError,
    InitorchError,
    Problem,
    ProfileError,
    ResolveError,
)
from initorch.loading.compose import ComposedProfile
from initorch.loading.document import Setting, StepEntry
from initorch.loading.settle import SettledSettings, settle
from initorch.location import SourceLocation
from initorch.model.conditions import Condition, parse_condition
from initorch.model.devices import DeviceRef
from initorch.model.registry import StepRegistry
from initorch.model.step import EDGE_KINDS, EdgeKind, Step
from initorch.resolution.graph import MAX_CYCLES_REPORTED, StepGraph
from initorch.resolution.plan import Plan, PlannedStep, SkippedStep, fingerprint
from initorch.resolution.plangraph import Edge, PlanGraph
from initorch.resolution.preview import preview_steps


@dataclass(frozen=True, slots=True)
class _EdgeSource:
    """Who declared an edge, where, and (for profile edges) why."""

    location: SourceLocation
    by: str
    reason: str | None = None


@dataclass(slots=True)
class _Candidate:
    """A selected step while it is being resolved."""

    step: Step
    # (why, by whom): ("listed by profile base (...)", None) or ("required by", "x")
    reasons: list[tuple[str, str | None]] = field(default_factory=list)
    edge_sources: dict[tuple[str, str], _EdgeSource] = field(default_factory=dict)
    disabled: Setting | None = None
    disabled_reason: str = ""
    when_location: SourceLocation | None = None
    condition: Condition | None = None
    # The planned steps whose presence pulled this one in through its wanted_by.
    wanted_by_pulls: list[str] = field(default_factory=list)

    @property
    def only_wanted_by(self) -> bool:
        """True when nothing but its own ``wanted_by`` pulled this step in."""
        return bool(self.wanted_by_pulls) and len(self.reasons) == len(self.wanted_by_pulls)


REQUESTED = "requested by load_plan(steps=...)"

# A queued pull-in: step name, (why, by whom), where it was declared, via wanted_by.
_Pull = tuple[str, tuple[str, str | None], SourceLocation | None, bool]


@dataclass(frozen=True, slots=True)
class _Input:
    """Stage 1: settled settings, selected candidates, and every problem found."""

    settled: SettledSettings
    candidates: dict[str, _Candidate]
    problems: list[Problem]
    # Problems with the profiles' own content (format, settings) make a ProfileError.
    in_profiles: bool


def resolve(composed: ComposedProfile, steps: StepRegistry,
            device_index: int | None = None, requested: Sequence[str] = (),
            environ: Mapping[str, str] | None = None) -> Plan:
    """Resolve ``composed`` against ``steps``; raise an :class:`InitorchError` subclass
    listing every problem when the result would not be a valid plan.

    ``requested`` names steps to plan as if a profile listed them (a launcher's
    own steps, without writing a profile).  Step previews see ``environ``
    (default: this process's environment)."""
    checked = _check_input(composed, steps, requested)
    problems = checked.problems
    device_type = composed.settings.get("device.type")
    error = ProfileError if checked.in_profiles else ResolveError
    if device_type is None:
        problems.append(Problem(
            f"no device type: profile(s) {', '.join(composed.names) or '(none)'} "
            "set no device.type",
            hint="add a device profile, e.g. --profile cpu, or pass --device"))
        _fail(problems, error)
    candidates, settled = checked.candidates, checked.settled
    skipped = _evaluate_conditions(candidates, settled, problems)
    _skip_unwanted(candidates, skipped)
    active = {name: c for name, c in candidates.items() if name not in skipped}
    _check_requirements(active, skipped, problems)
    _check_required_settings(active, steps, settled, device_type, problems)
    edges = _edges(active, steps) + _device_edges(candidates, skipped, problems)
    _raise_if(problems, error)
    graph = StepGraph(active, edges)
    cycles = graph.cycles()
    if cycles:
        reported = [_cycle_problem(graph, c) for c in cycles]
        if len(cycles) >= MAX_CYCLES_REPORTED:
            reported.append(Problem(f"(only the first {MAX_CYCLES_REPORTED} cycles are shown)"))
        raise CycleError(tuple(cycles), reported)
    waves = {name: index for index, wave in enumerate(graph.waves()) for name in wave}
    order = graph.order()
    planned = tuple(
        PlannedStep(active[name].step, waves[name],
                    _merge_reasons(active[name].reasons, skipped), steps.get(name))
        for name in order
    )
    skipped_steps = tuple(SkippedStep(name, skipped[name]) for name in sorted(skipped))
    device = DeviceRef(device_type.value, device_index)
    planned = preview_steps(planned, settled.values, device,
                            os.environ if environ is None else environ)
    return Plan(
        profiles=composed.names,
        device=device,
        settings=dict(settled.values),
        steps=planned,
        skipped=skipped_steps,
        graph=PlanGraph(order, graph.edges()),
        fingerprint=fingerprint(composed.names, device, settled.values, planned,
                                skipped_steps, composed.env),
        env=dict(composed.env),
    )


def lint(composed: ComposedProfile, steps: StepRegistry) -> list[Problem]:
    """Every problem that stage 1 finds, for profiles that cannot be resolved on
    their own (overlays and abstract profiles set no device type)."""
    return sorted(_check_input(composed, steps, ()).problems, key=_reading_order)


def _check_input(composed: ComposedProfile, steps: StepRegistry,
                 requested: Sequence[str]) -> _Input:
    settled = settle(composed, steps.settings)
    problems = [*composed.problems, *settled.problems]
    in_profiles = bool(problems)
    candidates = _select(composed, steps, requested, problems)
    _check_edge_targets(candidates, steps, problems)
    _parse_conditions(candidates, steps, problems)
    return _Input(settled, candidates, problems, in_profiles)


def _reading_order(problem: Problem) -> tuple[bool, str, int, int]:
    """Problems in files first, each file top to bottom; the command line last."""
    where = problem.location
    if where is None or not where.line:
        return (True, where.path if where else "", 0, 0)
    return (False, where.path, where.line, where.column)


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


def _raise_if(problems: list[Problem], error: type[InitorchError] = ResolveError) -> None:
    if problems:
        _fail(problems, error)


def _fail(problems: list[Problem], error: type[InitorchError]) -> NoReturn:
    raise error(f"{len(problems)} problem(s) in the selected profiles",
                problems=sorted(problems, key=_reading_order))


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
                    where = candidate.edge_sources[(kind, target)].location
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
    sources = {(kind, t): _EdgeSource(step.defined_at, f"step {step.name}")
               for kind in EDGE_KINDS for t in edges[kind]}
    fields: dict[str, object] = {}
    candidate = _Candidate(step)
    for entry in entries:
        for change in entry.changes:
            targets = edges[change.kind]
            if change.add and (change.target not in targets or change.reason):
                # Restating a declared edge with a reason attaches the reason to it.
                if change.target not in targets:
                    targets.append(change.target)
                sources[(change.kind, change.target)] = _EdgeSource(
                    change.location, f"profile {change.source}", change.reason)
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


def _check_edge_targets(candidates: dict[str, _Candidate], registry: StepRegistry,
                        problems: list[Problem]) -> None:
    """Every edge of a selected step names a registered step."""
    for candidate in candidates.values():
        for kind in EDGE_KINDS:
            for target in candidate.step.edges(kind):
                if target not in registry:
                    where = candidate.edge_sources[(kind, target)].location
                    try:
                        registry.get(target, where)
                    except InitorchError as exc:
                        problems.extend(exc.problems)


def _parse_conditions(candidates: dict[str, _Candidate], registry: StepRegistry,
                      problems: list[Problem]) -> None:
    """Parse each effective ``when``; it may only read declared settings."""
    for _, candidate in sorted(candidates.items()):
        source = candidate.step.when
        if source is None:
            continue
        try:
            condition = parse_condition(source, candidate.when_location
                                        or candidate.step.defined_at)
            condition.check_names(spec.key for spec in registry.settings)
        except ConditionError as exc:
            problems.extend(exc.problems)
        else:
            candidate.condition = condition


def _evaluate_conditions(candidates: dict[str, _Candidate], settled: SettledSettings,
                         problems: list[Problem]) -> dict[str, str]:
    """Skip reasons by step name, for disabled steps and false conditions."""
    settings = settled.for_conditions()
    origins = {key: s.origin for key, s in settled.values.items()}
    skipped: dict[str, str] = {}
    for name, candidate in sorted(candidates.items()):
        if candidate.disabled is not None:
            why = f": {candidate.disabled_reason}" if candidate.disabled_reason else ""
            skipped[name] = (f"disabled by profile {candidate.disabled.source} "
                             f"({candidate.disabled.location}){why}")
            continue
        condition = candidate.condition
        if condition is None or condition.names & settled.rejected:
            continue  # unparsable, or reads a refused value: reported already
        try:
            if not condition.evaluate(settings):
                values = condition.describe(settings, origins)
                skipped[name] = f"condition '{condition.source}' is false ({values})"
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


def _check_required_settings(active: dict[str, _Candidate], registry: StepRegistry,
                             settled: SettledSettings, device_type: Setting,
                             problems: list[Problem]) -> None:
    """A required setting must be given when a planned step reads it, or always
    when no step declares it (a plugin's free-standing setting).  Settings of
    skipped steps are not needed: ``mps`` has no Mooncake protocol to give."""
    read_by: dict[str, list[str]] = {}
    for name, candidate in sorted(active.items()):
        for spec in candidate.step.settings:
            read_by.setdefault(spec.key, []).append(name)
    declared_by_steps = {spec.key for step in registry for spec in step.settings}
    for key, spec in settled.missing.items():
        readers = read_by.get(key)
        if readers is None and key in declared_by_steps:
            continue
        section = f"device: {{{key.partition('.')[2]}: ...}}" if key.startswith("device.") \
            else f"config (or --set {key}=...)"
        who = f"planned step {', '.join(readers)} reads it" if readers else "a plugin needs it"
        allowed = f"; one of {', '.join(map(str, spec.choices))}" if spec.choices else ""
        problems.append(Problem(
            f"required setting {key} is not set for device type '{device_type.value}' "
            f"({who})", device_type.location,
            f"give it under {section} in profile '{device_type.source}': "
            f"{spec.description}{allowed}"))


def _check_requirements(active: dict[str, _Candidate], skipped: dict[str, str],
                        problems: list[Problem]) -> None:
    for name, candidate in sorted(active.items()):
        for target in candidate.step.requires:
            if target in skipped:
                source = candidate.edge_sources[("requires", target)]
                because = f" ({source.reason})" if source.reason else ""
                problems.append(Problem(
                    f"step '{name}' requires '{target}'{because}, which is skipped: "
                    f"{skipped[target]}",
                    source.location,
                    f"skip '{name}' under the same condition, or enable '{target}'"
                    + (f"; or drop {source.by}" if source.by.startswith("profile ") else "")))


def _edges(active: dict[str, _Candidate], registry: StepRegistry) -> list[Edge]:
    """Ordering edges among active steps (edge targets were checked in stage 1)."""
    edges: list[Edge] = []
    for name, candidate in active.items():
        for kind in EDGE_KINDS:
            for target in candidate.step.edges(kind):
                if target not in registry or target not in active:
                    continue  # ordering-only edges bind only steps that are both planned
                source = candidate.edge_sources[(kind, target)]
                first, then = (name, target) if kind == "before" else (target, name)
                edges.append(Edge(first, then, kind, source.location, source.by,
                                  source.reason))
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
