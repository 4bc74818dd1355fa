"""A resolved plan: exactly what will run, in which order, and why.

A :class:`Plan` is a record with queries: what executors run.  Its
``fingerprint`` (sha256 over a canonical JSON of the steps, their effective
fields and their declarations in code, the order and the settings) lets a
launcher check that what runs is what was reviewed, like a saved Terraform
plan.  Its JSON, saved or shown, is written and read in
:mod:`initorch.resolution.saved`; its text (the dry run) in
:mod:`initorch.reporting.render`.  File paths are left out of the fingerprint so that
the same profiles give the same fingerprint on every machine (see
:mod:`initorch.resolution.fingerprint`).

A plan carries a :class:`~initorch.resolution.plangraph.PlanGraph`: plain
tuples and dicts, which running a plan needs nothing else to read.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import field
from typing import Any

from initorch.errors import ResolveError
from initorch.loading.document import EnvEntry, Setting
from initorch.model.devices import DeviceRef
from initorch.model.settings import CORE_KEYS
from initorch.model.step import Step
from initorch.printable import shown
from initorch.records import record
from initorch.resolution.plangraph import Edge, PlanGraph
from initorch.suggest import closest


@record
class PlannedStep:
    """A step that will run: its effective declaration (``step``: the registered
    step with the profiles' overrides applied), its wave, why it is in the plan
    (sentences; a resolved plan writes them when they are first read, see
    :mod:`initorch.resolution.reasons`), and the step as registered in code
    (``declared``), which the fingerprint covers so that a saved plan notices when
    the code changed under it.
    ``notes`` are what the step's preview said it will do on the machine the plan
    was made on (not part of the fingerprint)."""

    step: Step
    wave: int
    reasons: Sequence[str]
    declared: Step
    notes: tuple[str, ...] = ()

    @property
    def name(self) -> str:
        return self.step.name


_SET_STEP, _SET_WAVE, _SET_REASONS, _SET_DECLARED, _SET_NOTES = (
    PlannedStep.__dict__[name].__set__ for name in ("step", "wave", "reasons", "declared", "notes"))


def planned_step(step: Step, wave: int, reasons: Sequence[str], declared: Step
                 ) -> PlannedStep:
    """``PlannedStep(step, wave, reasons, declared)``, made the way a resolver that makes
    one per step wants it: a frozen dataclass's ``__init__`` sets each field through
    ``object.__setattr__``, which takes about 1.7 times as long as setting its slots
    directly (and was a tenth of a first resolve)."""
    planned = object.__new__(PlannedStep)
    _SET_STEP(planned, step)
    _SET_WAVE(planned, wave)
    _SET_REASONS(planned, reasons)
    _SET_DECLARED(planned, declared)
    _SET_NOTES(planned, ())
    return planned


@record
class SkippedStep:
    """A step that was considered and will not run, with the reason: in full (with
    where each value came from) and, where that is long, a ``summary`` for tables."""

    name: str
    reason: str
    summary: str = ""

    @property
    def brief(self) -> str:
        """What a table shows: the summary, else the reason."""
        return self.summary or self.reason


@record
class Plan:
    """The outcome of resolution.  Immutable; executors never change it.

    ``env`` holds the environment variables the profiles set (a run sets them
    before its first step, see :mod:`initorch.execution.environment`).
    ``implementations`` holds, by key, what the value of each setting declared with
    a table of choices names (``ctx.implementation``): code, like the steps'
    actions, which the fingerprint covers by the settings' values.
    """

    profiles: tuple[str, ...]
    device: DeviceRef
    settings: Mapping[str, Setting]
    steps: tuple[PlannedStep, ...]
    skipped: tuple[SkippedStep, ...]
    graph: PlanGraph
    fingerprint: str
    env: Mapping[str, EnvEntry] = field(default_factory=dict)
    implementations: Mapping[str, Any] = field(default_factory=dict)
    _by_name: dict[str, PlannedStep] = field(init=False, repr=False, compare=False)

    def __post_init__(self) -> None:
        by_name = {planned.name: planned for planned in self.steps}
        object.__setattr__(self, "_by_name", by_name)
        if len(by_name) != len(self.steps) or self.graph.nodes != list(by_name):
            raise ValueError(_mismatch(self.graph.nodes, [p.name for p in self.steps]))

    def __contains__(self, name: object) -> bool:
        """Whether a step called ``name`` is planned (one look-up, not a scan)."""
        return name in self._by_name

    @property
    def order(self) -> tuple[str, ...]:
        return tuple(planned.name for planned in self.steps)

    @property
    def waves(self) -> tuple[tuple[str, ...], ...]:
        waves: dict[int, list[str]] = {}
        for planned in self.steps:
            waves.setdefault(planned.wave, []).append(planned.name)
        return tuple(tuple(sorted(waves[i])) for i in sorted(waves))

    def step(self, name: str) -> PlannedStep:
        """The planned step called ``name`` (``KeyError`` if it is not planned)."""
        return self._by_name[name]

    def config(self) -> dict[str, Any]:
        """Flat ``{dotted key: value}`` of every setting (what steps read)."""
        return {key: setting.value for key, setting in self.settings.items()}

    def skipped_step(self, name: str) -> SkippedStep | None:
        """The skipped step called ``name``, if one is."""
        return next((s for s in self.skipped if s.name == name), None)

    def not_planned(self, name: str) -> ResolveError:
        """The error for asking about a step that will not run: why it is skipped, or
        which planned step was probably meant."""
        skipped = self.skipped_step(name)
        if skipped is not None:
            return ResolveError(f"step '{shown(name)}' is not in the plan: skipped "
                                f"({skipped.reason})")
        guess = closest(name, self.order)
        return ResolveError(f"step '{shown(name)}' is not in the plan",
                            hint=f"did you mean '{guess}'?" if guess
                            else f"planned steps: {', '.join(self.order)}")

    def explain(self, first: str, second: str) -> list[Edge]:
        """The chain of edges that makes ``first`` run before ``second``.

        Raises :class:`ResolveError` when either step is not in the plan or no
        constraint orders them (then they may run in the same wave).
        """
        for name in (first, second):
            if name not in self._by_name:
                raise self.not_planned(name)
        if first == second:
            raise ResolveError(f"explain needs two different steps, got '{first}' twice",
                               hint="e.g. explain set_device init_torch_distributed")
        chain = self.graph.path(first, second)
        if chain is None:
            reverse = self.graph.path(second, first)
            hint = (f"the reverse holds: try 'explain {second} {first}'" if reverse
                    else "no constraint orders them; they may run concurrently")
            raise ResolveError(f"nothing makes '{first}' run before '{second}'", hint=hint)
        return chain


def _mismatch(nodes: list[str], names: list[str]) -> str:
    """Why a plan's graph and steps disagree: an executor walks the graph and runs the
    steps, so a step the graph left out would silently never run."""
    repeated = sorted(name for name, count in Counter(names).items() if count > 1)
    if repeated:
        return f"the plan lists step(s) {', '.join(repeated)} more than once"
    in_graph, planned = set(nodes), set(names)
    missing = [name for name in names if name not in in_graph]
    extra = [name for name in nodes if name not in planned]
    if missing or extra:
        return ("the plan's graph must hold exactly its steps: "
                + "; ".join(f"{what}: {', '.join(found)}" for what, found in (
                    ("not in the graph", missing), ("not among the steps", extra)) if found))
    return "the plan's steps must be in its graph's order"


def read_settings(settings: Mapping[str, Setting], steps: Iterable[PlannedStep]
                  ) -> dict[str, Setting]:
    """The settings that ``steps`` can read -- those they declare (a step reads no other,
    its ``when`` included) and the core ``device.*`` keys -- in ``settings``' order.

    This is what decides how a plan runs, so the fingerprint and the ranks' agreement
    cover it and nothing else: a setting only an unplanned step declares (an unrelated
    plugin's) must not make two ranks of one job refuse each other."""
    keys = set(CORE_KEYS)
    for planned in steps:
        specs = planned.step.settings
        if specs:
            keys.update(spec.key for spec in specs)
    return {key: setting for key, setting in settings.items() if key in keys}


def env_values(env: Mapping[str, EnvEntry]) -> dict[str, str | None]:
    """``{NAME: value}`` in declaration order."""
    return {name: entry.value for name, entry in env.items()}
