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
   edge with where it was declared) and ordered deterministically; every output a
   step declares it reads must come from a step ordered before it
   (:mod:`initorch.resolution.reads`).
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
from operator import attrgetter
from typing import NamedTuple, NoReturn

from initorch.errors import (
    ConditionError,
    CycleError,
    InitorchError,
    Problem,
    ProfileError,
    ResolveError,
)
from initorch.gc_pause import gc_paused
from initorch.loading.compose import ComposedProfile
from initorch.loading.document import Setting, StepEntry
from initorch.loading.settle import SettledSettings, settle
from initorch.location import SourceLocation
from initorch.model.conditions import Condition, parse_condition
from initorch.model.devices import DeviceRef
from initorch.model.registry import StepCatalog
from initorch.model.step import (
    EDGE_KINDS,
    EdgeKind,
    EdgeRecord,
    Step,
    declared_by,
    own_edge_records,
)
from initorch.records import record
from initorch.resolution.fingerprint import fingerprint
from initorch.resolution.graph import MAX_CYCLES_REPORTED, StepGraph
from initorch.resolution.plan import Plan, PlannedStep, SkippedStep, planned_step
from initorch.resolution.plangraph import Edge, IncomingEdges, PlanGraph
from initorch.resolution.preview import preview_steps
from initorch.resolution.reads import unmet_reads
from initorch.resolution.reasons import Pull, Reasons


class _EdgeSource(NamedTuple):
    """Who declared an edge, where, and (for profile edges) why."""

    location: SourceLocation
    by: str
    reason: str | None = None


@record(frozen=False)
class _Candidate:
    """A selected step while it is being resolved."""

    step: Step  # the effective declaration: as registered, with the profiles' overrides
    declared: Step  # as registered
    pulls: list[Pull]  # why it is in the plan, in the order of the pulls (see Reasons)
    # Edges a profile added or restated, by (kind, target); every other edge is the
    # step's own, declared in code.
    edge_sources: dict[tuple[str, str], _EdgeSource] | None = None
    disabled: Setting | None = None
    disabled_reason: str = ""
    when_location: SourceLocation | None = None
    condition: Condition | None = None
    # The planned steps whose presence pulled this one in through its wanted_by.
    wanted_by_pulls: list[str] | None = None
    # Where a profile removed one of the step's declared edges, by (kind, target).
    removed: dict[tuple[str, str], SourceLocation] | None = None

    def edge_source(self, kind: str, target: str) -> _EdgeSource:
        """Who declared this step's ``kind`` edge to ``target``, where, and why."""
        found = self.edge_sources.get((kind, target)) if self.edge_sources else None
        return found or _EdgeSource(self.declared.defined_at, self.by)

    @property
    def by(self) -> str:
        """Who declared the step's own edges, at its definition: ``step <name>``."""
        return declared_by(self.declared)

    @property
    def only_wanted_by(self) -> bool:
        """True when nothing but its own ``wanted_by`` pulled this step in."""
        pulls = self.wanted_by_pulls
        return pulls is not None and len(self.pulls) == len(pulls)


REQUESTED = "requested by load_plan(steps=...)"

@record
class _Input:
    """Stage 1: settled settings, selected candidates, and every problem found."""

    settled: SettledSettings
    candidates: dict[str, _Candidate]
    problems: list[Problem]
    # Problems with the profiles' own content (format, settings) make a ProfileError.
    in_profiles: bool


def resolve(composed: ComposedProfile, steps: StepCatalog,
            device_index: int | None = None, requested: Sequence[str] = (),
            environ: Mapping[str, str] | None = None) -> Plan:
    """Resolve ``composed`` against ``steps``; raise an :class:`InitorchError` subclass
    listing every problem when the result would not be a valid plan.

    ``requested`` names steps to plan as if a profile listed them (a launcher's
    own steps, without writing a profile).  Step previews see ``environ``
    (default: this process's environment)."""
    with gc_paused():  # a plan is a large graph of objects and holds no cycle
        return _resolve(composed, steps, device_index, requested,
                        os.environ if environ is None else environ)


def _resolve(composed: ComposedProfile, steps: StepCatalog, device_index: int | None,
             requested: Sequence[str], environ: Mapping[str, str]) -> Plan:
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
    summaries: dict[str, str] = {}
    skipped = _evaluate_conditions(candidates, settled, problems, summaries)
    _skip_unwanted(candidates, skipped)
    active = {name: c for name, c in candidates.items() if name not in skipped} if skipped \
        else candidates
    _check_requirements(active, skipped, problems)
    _check_required_settings(active, steps, settled, device_type, problems)
    _check_environment_values(active, steps, settled, problems)
    binder = _device_binder(candidates, active, skipped, problems)
    _raise_if(problems, error)
    graph = StepGraph.from_records(active, _incoming_edges(active, binder))
    cycles = graph.cycles()
    if cycles:
        reported = [problem for _, problem in sorted(
            (_cycle_problem(graph, c, composed.names) for c in cycles),
            key=lambda found: -found[0])]  # the user's own edges first; stable otherwise
        if len(cycles) >= MAX_CYCLES_REPORTED:
            reported.append(Problem(f"(only the first {MAX_CYCLES_REPORTED} cycles are shown)"))
        raise CycleError(tuple(cycles), reported)
    ordered_graph = graph.plan_graph()
    _raise_if(_read_problems(active, ordered_graph, skipped), error)
    del active
    waves = graph.levels()
    planned: list[PlannedStep] = []
    for name in graph.order():
        candidate = candidates.pop(name)  # each candidate goes as its planned step comes
        planned.append(planned_step(candidate.step, waves[name],
                                    Reasons(candidate.pulls, skipped), candidate.declared))
    device = DeviceRef(device_type.value, device_index)
    implementations = steps.settings.implementations(
        {key: setting.value for key, setting in settled.values.items()})
    ordered = preview_steps(tuple(planned), settled.values, device, environ, implementations)
    del planned
    skipped_steps = tuple(SkippedStep(name, skipped[name], summaries.get(name, ""))
                          for name in sorted(skipped))
    return Plan(
        profiles=composed.names,
        device=device,
        settings=dict(settled.values),
        steps=ordered,
        skipped=skipped_steps,
        graph=ordered_graph,
        fingerprint=fingerprint(composed.names, device, settled.values, ordered,
                                skipped_steps, composed.env),
        env=dict(composed.env),
        implementations=implementations,
    )


def lint(composed: ComposedProfile, steps: StepCatalog) -> list[Problem]:
    """Every problem that stage 1 finds, for profiles that cannot be resolved on
    their own (overlays and abstract profiles set no device type)."""
    return sorted(_check_input(composed, steps, ()).problems, key=_reading_order)


def _check_input(composed: ComposedProfile, steps: StepCatalog,
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


def _raise_if(problems: list[Problem], error: type[InitorchError] = ResolveError) -> None:
    if problems:
        _fail(problems, error)


def _fail(problems: list[Problem], error: type[InitorchError]) -> NoReturn:
    raise error(f"{len(problems)} problem(s) in the selected profiles",
                problems=sorted(problems, key=_reading_order))


def _select(composed: ComposedProfile, registry: StepCatalog, requested: Sequence[str],
            problems: list[Problem]) -> dict[str, _Candidate]:
    """Listed and requested steps with overrides applied, plus the closure of
    requires/wants and of the steps ``wanted_by`` a selected one.

    A step becomes a candidate when it is first pulled in, and is expanded (its own
    pulls followed) in that order, breadth first; each pull adds a reason to its
    target at once, so every step's reasons are in the order of the pulls."""
    candidates: dict[str, _Candidate] = {}
    created: list[_Candidate] = []  # in the order they were pulled in: the order of expansion
    listed = composed.step_entries

    def admit(name: str, reason: Pull, location: SourceLocation | None) -> _Candidate | None:
        """A new candidate for registered step ``name``, pulled in by ``reason``."""
        try:
            declared = registry.get(name, location)
        except InitorchError as exc:
            problems.extend(exc.problems)
            return None
        candidate = candidates[name] = _apply_overrides(declared, listed.get(name), [reason],
                                                        problems)
        created.append(candidate)
        return candidate

    def pull(name: str, reason: Pull, location: SourceLocation | None) -> _Candidate | None:
        candidate = candidates.get(name)
        if candidate is None:
            return admit(name, reason, location)
        candidate.pulls.append(reason)
        return candidate

    for entries in listed.values():  # each listed step is new, pulled in by its first entry
        first = entries[0]
        admit(first.name, first, first.location)
    for name in requested:
        pull(name, REQUESTED, None)
    wanting = registry.wanting
    for candidate in created:  # which grows as the candidates it holds pull new ones in
        step = candidate.step
        name = step.name
        for kind, verb, targets in (("requires", "required by ", step.requires),
                                    ("wants", "wanted by ", step.wants)):
            if not targets:
                continue
            pulled_by = (verb, name)
            for target in targets:
                found = candidates.get(target)
                if found is not None:  # the usual case: one more reason
                    found.pulls.append(pulled_by)
                else:
                    pull(target, pulled_by, candidate.edge_source(kind, target).location)
        for wanter in wanting(name):
            found = pull(wanter.name, ("wanted by ", name), wanter.defined_at)
            if found is not None:
                if found.wanted_by_pulls is None:
                    found.wanted_by_pulls = []
                found.wanted_by_pulls.append(name)
    return candidates


def _apply_overrides(step: Step, entries: tuple[StepEntry, ...] | None, pulls: list[Pull],
                     problems: list[Problem]) -> _Candidate:
    """The candidate for ``step``, pulled in by ``pulls``: every profile entry for
    it folded into one effective declaration (the registered step itself when no
    entry changes it)."""
    candidate = _Candidate(step, step, pulls)
    entries = entries or ()
    for entry in entries:
        if entry.changes or entry.overrides:
            break
    else:
        return candidate  # listed as it is, or not listed at all: the usual case
    edges: dict[str, list[str]] = {kind: list(step.edges(kind)) for kind in EDGE_KINDS}
    sources: dict[tuple[str, str], _EdgeSource] = {}
    fields: dict[str, object] = {}
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
                if candidate.removed is None:
                    candidate.removed = {}
                candidate.removed[(change.kind, change.target)] = change.location
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
    changed = {kind: tuple(edges[kind]) for kind in EDGE_KINDS
               if tuple(edges[kind]) != step.edges(kind)}
    if changed or fields:
        candidate.step = dataclasses.replace(step, **changed, **fields)  # type: ignore[arg-type]
    candidate.edge_sources = {key: source for key, source in sources.items()
                              if key[1] in edges[key[0]]} or None
    return candidate


def _check_edge_targets(candidates: dict[str, _Candidate], registry: StepCatalog,
                        problems: list[Problem]) -> None:
    """Every ordering edge of a selected step names a registered step (``requires`` and
    ``wants`` targets were looked up when they were pulled in)."""
    for candidate in candidates.values():
        step = candidate.step
        if not (step.after or step.before):
            continue
        for kind in ORDERING_KINDS:
            for target in getattr(step, kind):
                if target not in registry:
                    where = candidate.edge_source(kind, target).location
                    try:
                        registry.get(target, where)
                    except InitorchError as exc:
                        problems.extend(exc.problems)


ORDERING_KINDS: tuple[EdgeKind, ...] = ("after", "before")


def _parse_conditions(candidates: dict[str, _Candidate], registry: StepCatalog,
                      problems: list[Problem]) -> None:
    """Parse each effective ``when``; it may only read declared settings."""
    conditional = sorted(name for name, c in candidates.items() if c.step.when is not None)
    for name in conditional:
        candidate = candidates[name]
        source = candidate.step.when
        assert source is not None
        try:
            condition = parse_condition(source, candidate.when_location
                                        or candidate.step.defined_at)
            condition.check_names(spec.key for spec in registry.settings)
        except ConditionError as exc:
            problems.extend(exc.problems)
        else:
            candidate.condition = condition


def _evaluate_conditions(candidates: dict[str, _Candidate], settled: SettledSettings,
                         problems: list[Problem], summaries: dict[str, str]
                         ) -> dict[str, str]:
    """Skip reasons by step name, for disabled steps and false conditions; the short
    form of a false condition's (the values that decided it, no origins) goes into
    ``summaries``."""
    settings = settled.for_conditions()
    origins = {key: s.origin for key, s in settled.values.items()}
    skipped: dict[str, str] = {}
    for name in sorted(name for name, c in candidates.items()
                       if c.disabled is not None or c.condition is not None):
        candidate = candidates[name]
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
                summaries[name] = f"condition false: {condition.deciding(settings)}"
        except ConditionError as exc:
            problems.extend(exc.problems)
    return skipped


def _skip_unwanted(candidates: dict[str, _Candidate], skipped: dict[str, str]) -> None:
    """Skip the steps that only skipped steps pulled in through ``wanted_by``, until none
    is left: a launcher's step for the Mooncake pool is skipped with the pool."""
    only_wanted = sorted(name for name, c in candidates.items() if c.only_wanted_by)
    changed = True
    while changed:
        changed = False
        for name in only_wanted:
            pulls = candidates[name].wanted_by_pulls or []
            if name in skipped:
                continue
            if all(puller in skipped for puller in pulls):
                pullers = ", ".join(sorted(set(pulls)))
                skipped[name] = f"wanted only by skipped steps ({pullers})"
                changed = True


def _check_environment_values(active: dict[str, _Candidate], registry: StepCatalog,
                              settled: SettledSettings, problems: list[Problem]) -> None:
    """A variable another program reads (SGLang's ``MOONCAKE_GLOBAL_SEGMENT_SIZE``) and
    a setting's reader refuses is a problem when a planned step reads that setting, or
    when no step declares it; a store this plan does not run does not need its
    variables (``initorch plan -p cpu --set hicache.enabled=false``).  Conditions saw
    such a setting as ``None``: a step they kept that reads it is planned, so its
    refusal is reported."""
    if not settled.unread:
        return
    read = {spec.key for c in active.values() for spec in c.step.settings}
    declared_by_steps = {spec.key for step in registry for spec in step.settings}
    problems.extend(problem for key, problem in settled.unread.items()
                    if key in read or key not in declared_by_steps)


def _check_required_settings(active: dict[str, _Candidate], registry: StepCatalog,
                             settled: SettledSettings, device_type: Setting,
                             problems: list[Problem]) -> None:
    """A required setting must be given when a planned step reads it, or always
    when no step declares it (a plugin's free-standing setting).  Settings of
    skipped steps are not needed: ``mps`` has no Mooncake protocol to give."""
    if not settled.missing:
        return
    read_by: dict[str, list[str]] = {}
    for name in sorted(name for name, c in active.items() if c.step.settings):
        for spec in active[name].step.settings:
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
    if not skipped:
        return
    for name in sorted(name for name, c in active.items()
                       if any(target in skipped for target in c.step.requires)):
        candidate = active[name]
        for target in candidate.step.requires:
            if target in skipped:
                source = candidate.edge_source("requires", target)
                because = f" ({source.reason})" if source.reason else ""
                problems.append(Problem(
                    f"step '{name}' requires '{target}'{because}, which is skipped: "
                    f"{skipped[target]}",
                    source.location,
                    f"skip '{name}' under the same condition, or enable '{target}'"
                    + (f"; or drop {source.by}" if source.by.startswith("profile ") else "")))


def _incoming_edges(active: dict[str, _Candidate], binder: str | None) -> IncomingEdges:
    """Ordering edges among active steps, as records grouped by target in declaration
    order: the declared ones (an unknown target is no candidate, and was reported in
    stage 1) and one from ``binder`` to every device_bound step.

    A step's group is its own edges, plus the ``before`` edges of other steps (rare:
    kept aside and merged at the end).  No two records of a group agree on source,
    kind, place and declarer while differing in their reason (a place declares an
    edge once, with one reason), so records sort as plain tuples, as
    :func:`~initorch.resolution.plangraph.in_declaration_order` sorts them."""
    incoming: IncomingEdges = {}
    before: dict[str, list[EdgeRecord]] = {}
    for name, candidate in active.items():
        step = candidate.step
        into: Sequence[EdgeRecord]
        if candidate.edge_sources is None and not step.before:  # the usual case
            into = own = own_edge_records(step)
            for record in own:
                if record[0] not in active:  # ordering-only edges bind planned steps only
                    into = [record for record in own if record[0] in active]
                    break
        else:
            into = _declared_records(name, candidate, active, before)
        if binder is not None and step.device_bound:
            into = sorted([*into, (binder, "device", step.defined_at, candidate.by, None)])
        if into:
            incoming[name] = tuple(into)
    for target, found in before.items():
        incoming[target] = tuple(sorted([*incoming.get(target, ()), *found]))
    return incoming


def _declared_records(name: str, candidate: _Candidate, active: Mapping[str, _Candidate],
                      before: dict[str, list[EdgeRecord]]) -> list[EdgeRecord]:
    """The records of the edges into ``name`` that its effective step declares, each
    with who declared it where (a profile's edges with their reasons), sorted; its
    ``before`` edges go into ``before``, under the steps they lead to."""
    step, sources = candidate.step, candidate.edge_sources
    in_code = (step.defined_at, candidate.by, None)
    into: list[EdgeRecord] = []
    for kind, targets in zip(EDGE_KINDS, _edge_lists(step), strict=True):
        for target in targets:
            if target not in active:
                continue  # ordering-only edges bind only steps that are both planned
            declared = sources.get((kind, target)) if sources is not None else None
            at, declarer, reason = declared or in_code
            if kind == "before":
                before.setdefault(target, []).append((name, kind, at, declarer, reason))
            else:
                into.append((target, kind, at, declarer, reason))
    into.sort()
    return into


_edge_lists = attrgetter(*EDGE_KINDS)
"""A step's edge lists, in the order of ``EDGE_KINDS``."""


def _device_binder(candidates: dict[str, _Candidate], active: dict[str, _Candidate],
                   skipped: Mapping[str, str], problems: list[Problem]) -> str | None:
    """The one active step that binds the device, which every active device_bound
    step runs after; ``None`` (and a problem, when steps need one) otherwise."""
    bound = sorted(name for name, c in active.items() if c.step.device_bound)
    binders = sorted(name for name, c in active.items() if c.step.binds_device)
    if len(binders) > 1:
        problems.append(Problem(
            f"several steps bind the device: {', '.join(binders)}",
            active[binders[1]].step.defined_at, "exactly one step may declare binds_device"))
        return None
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
        return None
    return binders[0] if binders else None


def _read_problems(active: dict[str, _Candidate], graph: PlanGraph,
                   skipped: Mapping[str, str]) -> list[Problem]:
    """A step whose declared reads the order no longer delivers, at the profile line that
    removed the edge (see :mod:`initorch.resolution.reads`)."""
    readers = (c.declared for c in active.values() if c.declared.reads)
    problems = []
    for unmet in unmet_reads(readers, graph, skipped, active.__contains__):
        candidate = active[unmet.reader]
        removed = (candidate.removed or {}).get(("requires", unmet.target)) \
            or (candidate.removed or {}).get(("wants", unmet.target))
        problems.append(Problem(unmet.message(), removed or candidate.declared.defined_at,
                                unmet.hint(removed is not None)))
    return problems


def _cycle_problem(graph: StepGraph, cycle: tuple[str, ...], layers: tuple[str, ...]
                   ) -> tuple[int, Problem]:
    """One cycle as a problem located at, and led by, the edge most likely the user's
    own (see :func:`_ownership`), with that edge's ownership for ordering."""
    hops = graph.cycle_edges(cycle)
    own = max(hops, key=lambda edge: _ownership(edge, layers))  # the first of equals
    loop = " -> ".join((*cycle, cycle[0]))
    detail = "; ".join(edge.describe() for edge in (own, *(h for h in hops if h is not own)))
    return _ownership(own, layers), Problem(f"ordering cycle {loop}: {detail}",
                                            own.declared_at,
                                            "remove or reverse one of these constraints")


def _ownership(edge: Edge, layers: tuple[str, ...]) -> int:
    """How much an edge is the user's: one a step declares in code is the least, one
    from a profile more, the later its profile is layered (``base`` -> ``cpu`` -> the
    user's own file) the more -- so that a cycle is shown at the line the user wrote,
    not at a site-packages location."""
    name = edge.declared_by.removeprefix("profile ")
    if name == edge.declared_by:
        return 0
    return 1 + (layers.index(name) if name in layers else len(layers))
