"""The step model: what a start-up action declares about itself.

A :class:`Step` is an immutable record.  Authors write a plain function and
decorate it with :func:`step`, which only stamps a :class:`StepDefinition`
(a small builder that also collects the optional teardown); the
:class:`~initorch.model.registry.StepCatalog` validates definitions once and
freezes them into :class:`Step` records.

Edge vocabulary follows systemd, because operators already know it:

``requires``  pull the other step in and run after it; if it fails or is skipped,
              this step cannot run.
``wants``     pull it in and run after it, but its failure does not block us.
``after``     ordering only: if both steps are in the plan, run after it.
``before``    ordering only, the other way round.

And one pull-in from the other side, for steps that no profile lists:

``wanted_by`` whenever one of these steps is in the plan, pull this step in too
              (systemd's ``WantedBy=``).  It adds no ordering: declare that with
              ``requires``/``after``.  A step that only skipped steps want is
              skipped as well.

Besides the edges, ``reads`` names the steps whose *outputs* the step reads
(``ctx.output``).  Each must be one of its ``requires`` (then it must run, before
this step) or ``wants`` (then, when it is planned, it must run before this step).
A profile can remove edges; a plan whose order no longer delivers a read output is
refused when it is resolved, instead of failing with a missing output mid-run, and
only in the parallel executor, where the order is not the listing's.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Sequence
from dataclasses import MISSING, field, fields
from typing import TYPE_CHECKING, Any, Literal

from initorch.location import SourceLocation, caller_location
from initorch.model.settings import SettingSpec
from initorch.records import record

if TYPE_CHECKING:
    from initorch.model.contexts import PreviewContext, StepContext

EdgeKind = Literal["requires", "wants", "after", "before"]
EDGE_KINDS: tuple[EdgeKind, ...] = ("requires", "wants", "after", "before")
_INCOMING_KINDS: tuple[EdgeKind, ...] = ("requires", "wants", "after")  # under the step

EdgeRecord = tuple[str, str, SourceLocation, str, "str | None"]
"""An edge as a graph stores it, under its target: ``(source, kind, declared_at,
declared_by, reason)``."""

# Beyond these a timeout or a retry count is a typo (or infinity), and the
# threading and datetime calls that use them overflow.
MAX_TIMEOUT_S = 7 * 24 * 3600.0
MAX_RETRIES = 100

StepAction = Callable[["StepContext"], Any]
StepTeardown = Callable[["StepContext", Any], None]
StepPreview = Callable[["PreviewContext"], Sequence[str]]


FieldKind = Literal["text", "names", "condition", "flag", "seconds", "count", "number",
                    "code", "codes", "settings", "location"]
"""What a field of :class:`Step` holds, which decides how the decorator takes it, how the
registry checks it and how plan JSON and the fingerprint write it (see
:mod:`initorch.model.canonical`)."""

FieldUse = Literal["keyword", "shown", "declared", "profile"]
"""Where a field of :class:`Step` appears: a keyword of :func:`step`; the effective
step's fields in plan JSON and the fingerprint (``shown``); the declaration in code
there (``declared``); a field a profile may change (``profile``,
``steps.<name>.<field>``)."""

_ROLE = "initorch"


def _role(kind: FieldKind, *uses: FieldUse) -> dict[str, Any]:
    """A field's metadata: its row of :data:`STEP_FIELDS`."""
    return {_ROLE: (kind, frozenset(uses))}


_EVERYWHERE: tuple[FieldUse, ...] = ("keyword", "shown", "declared")


@record
class Step:
    """A validated, immutable step declaration.

    ``action`` receives the run's :class:`~initorch.model.contexts.StepContext` and
    returns the step's output (kept for later steps and for the teardown).
    ``device_bound`` steps always run with this rank's device context set on the
    thread that runs them; ``binds_device`` marks the single step whose output
    re-establishes that context (``set_device``).  ``retry_on`` lists the
    exception types the step itself considers transient: only those are retried.
    ``settings`` declares every setting the step reads (``ctx.setting`` refuses
    any other), including those its own ``when`` condition names.
    ``reads`` names the steps whose outputs the action reads (see the module
    docstring); the plan checks that its order delivers them.
    ``holds_gil`` says that the step computes in Python for most of its time
    instead of waiting (on I/O, other ranks, a native call that releases the GIL):
    the parallel executor then runs it alone among such steps.  It only schedules;
    it is not part of the plan's fingerprint.
    ``preview`` (optional) tells at plan time, without importing torch, what the
    step will do here (lines that ``initorch plan`` shows under the step), and may
    reject settings that cannot work (see :mod:`initorch.resolution.preview`).

    Two fields concern the other ranks of the job.  ``job_store`` marks the single
    step whose output is the job's key-value store
    (:class:`~initorch.execution.peers.JobStore`): when it completes, the run
    agrees on the plan with every rank, then publishes its progress there.
    ``barrier`` makes the run wait, before this step, until every rank has
    finished the steps it depends on (registering memory that peers will read,
    forming a group), failing fast when a rank failed or died meanwhile.

    The fields are the step's one field table (:data:`STEP_FIELDS`): each one's
    metadata says what it holds and where it appears, and the decorator, the
    registry's checks, the fields a profile may override, plan JSON and the
    fingerprint are derived from it.  They are declared in the order plan JSON
    shows them; all but the first three are keyword-only.
    """

    name: str = field(metadata=_role("text"))
    description: str = field(metadata=_role("text", "keyword"))
    requires: tuple[str, ...] = field(default=(), kw_only=True,
                                      metadata=_role("names", *_EVERYWHERE, "profile"))
    wants: tuple[str, ...] = field(default=(), kw_only=True,
                                   metadata=_role("names", *_EVERYWHERE, "profile"))
    after: tuple[str, ...] = field(default=(), kw_only=True,
                                   metadata=_role("names", *_EVERYWHERE, "profile"))
    before: tuple[str, ...] = field(default=(), kw_only=True,
                                    metadata=_role("names", *_EVERYWHERE, "profile"))
    when: str | None = field(default=None, kw_only=True,
                             metadata=_role("condition", *_EVERYWHERE, "profile"))
    device_bound: bool = field(default=False, kw_only=True,
                               metadata=_role("flag", *_EVERYWHERE))
    binds_device: bool = field(default=False, kw_only=True,
                               metadata=_role("flag", *_EVERYWHERE))
    job_store: bool = field(default=False, kw_only=True, metadata=_role("flag", *_EVERYWHERE))
    barrier: bool = field(default=False, kw_only=True, metadata=_role("flag", *_EVERYWHERE))
    timeout: float | None = field(default=None, kw_only=True,
                                  metadata=_role("seconds", *_EVERYWHERE, "profile"))
    retries: int = field(default=0, kw_only=True,
                         metadata=_role("count", *_EVERYWHERE, "profile"))
    teardown: StepTeardown | None = field(default=None, kw_only=True,
                                          metadata=_role("code", "shown", "declared"))
    settings: tuple[SettingSpec, ...] = field(default=(), kw_only=True,
                                              metadata=_role("settings", *_EVERYWHERE))
    wanted_by: tuple[str, ...] = field(default=(), kw_only=True,
                                       metadata=_role("names", "keyword", "declared"))
    action: StepAction = field(metadata=_role("code", "declared"))
    retry_on: tuple[type[BaseException], ...] = field(
        default=(), kw_only=True, metadata=_role("codes", "keyword", "declared"))
    retry_backoff: float = field(default=0.5, kw_only=True,
                                 metadata=_role("number", "keyword", "declared"))
    reads: tuple[str, ...] = field(default=(), kw_only=True,
                                   metadata=_role("names", "keyword"))
    holds_gil: bool = field(default=False, kw_only=True, metadata=_role("flag", "keyword"))
    preview: StepPreview | None = field(default=None, kw_only=True, metadata=_role("code"))
    defined_at: SourceLocation = field(default=SourceLocation("<unknown>"), kw_only=True,
                                       compare=False, metadata=_role("location"))
    # What the plan fingerprint writes for this declaration, encoded once, when the
    # step is registered (:func:`initorch.model.canonical.encode_step`; a frozen
    # step's fields never change, so neither does their encoding).  Not a field anyone
    # sets: ``dataclasses.replace`` starts a changed step without it.
    _canonical: tuple[bytes, bytes, int, int] | None = field(
        default=None, init=False, repr=False, compare=False)
    # The edges the step declares under itself, as graph records: kept like
    # ``_canonical``, by :func:`own_edge_records`.
    _edge_records: tuple[EdgeRecord, ...] | None = field(
        default=None, init=False, repr=False, compare=False)

    def edges(self, kind: EdgeKind) -> tuple[str, ...]:
        """The names this step lists under ``kind``."""
        result: tuple[str, ...] = getattr(self, kind)
        return result


def declared_by(step: Step) -> str:
    """Who declares the edges a step lists in code: ``step <name>`` (a profile's are
    ``profile <name>``)."""
    return f"step {step.name}"


def own_edge_records(step: Step) -> tuple[EdgeRecord, ...]:
    """The edges ``step`` declares leading to itself (its ``requires``, ``wants`` and
    ``after``; its ``before`` edges lead to other steps), as graph records sorted in
    declaration order, targets planned or not.

    Written once per step and kept on it, as its canonical text is: the registry
    writes them, and every plan starts from them (a step that profiles
    changed is a new record and writes its own)."""
    records = step._edge_records
    if records is None:
        where, by = step.defined_at, declared_by(step)
        records = tuple(sorted([(source, kind, where, by, None) for kind in _INCOMING_KINDS
                                for source in getattr(step, kind)]))
        object.__setattr__(step, "_edge_records", records)
    return records


@record
class StepField:
    """One row of the step's field table: a field of :class:`Step`, what it holds
    (``kind``) and where it appears (``uses``, see :data:`FieldUse`)."""

    name: str
    kind: FieldKind
    uses: frozenset[FieldUse]
    default: Any

    def __contains__(self, use: object) -> bool:
        return use in self.uses


STEP_FIELDS: tuple[StepField, ...] = tuple(
    StepField(f.name, f.metadata[_ROLE][0], f.metadata[_ROLE][1], f.default)
    for f in fields(Step) if _ROLE in f.metadata)
"""The step's field table, in :class:`Step`'s order."""


def fields_for(use: FieldUse) -> tuple[StepField, ...]:
    """The rows of :data:`STEP_FIELDS` with ``use``, in table order."""
    return tuple(row for row in STEP_FIELDS if use in row)


OVERRIDABLE_FIELDS = tuple(row.name for row in fields_for("profile"))
"""The effective fields a profile may change; the rest of a step is as registered."""


@record(frozen=False)
class StepDefinition:
    """What the :func:`step` decorator produces: the function plus its declared fields.

    It is deliberately mutable only until registration (so that
    ``@my_step.teardown`` can attach a teardown below the step function); the
    registry turns it into a frozen :class:`Step`.
    """

    action: StepAction
    fields: dict[str, Any]
    defined_at: SourceLocation
    teardown_fn: StepTeardown | None = None
    preview_fn: StepPreview | None = None

    def teardown(self, fn: StepTeardown) -> StepTeardown:
        """Decorator: ``fn(ctx, output)`` undoes the step; runs in reverse order."""
        self.teardown_fn = fn
        return fn

    def preview(self, fn: StepPreview) -> StepPreview:
        """Decorator: ``fn(preview_ctx)`` returns what the step will do, for the dry run."""
        self.preview_fn = fn
        return fn

    def __call__(self, ctx: StepContext) -> Any:
        return self.action(ctx)


def _names(value: str | tuple[str, ...] | list[str]) -> tuple[str, ...]:
    """One step name or several (``requires="a"`` means ``requires=["a"]``)."""
    return (value,) if isinstance(value, str) else tuple(value)


def _specs(value: SettingSpec | Iterable[SettingSpec]) -> tuple[SettingSpec, ...]:
    return (value,) if isinstance(value, SettingSpec) else tuple(value)


_TAKE: dict[FieldKind, Callable[[Any], Any]] = {"names": _names, "codes": tuple,
                                                 "settings": _specs}
"""How :func:`step` takes a keyword of each kind (any other kind: as given)."""

_KEYWORDS = fields_for("keyword")
# The keywords :func:`step` converts, with how: worked out once, since a plugin may
# declare thousands of steps.
_CONVERTED = tuple((row.name, _TAKE[row.kind]) for row in _KEYWORDS if row.kind in _TAKE)

# What freeze() starts a step from: every field's default (those without one, the
# name, description and action, come from the definition), and the fields a
# definition's ``fields`` may set (the name and the keywords).
_DEFAULTS = {f.name: f.default for f in fields(Step) if f.default is not MISSING}
_FIELD_COUNT = len(fields(Step))
_DEFINABLE = frozenset(("name", *(row.name for row in _KEYWORDS)))
_SETTERS = tuple((f.name, getattr(Step, f.name).__set__) for f in fields(Step))  # the slots


def freeze(definition: StepDefinition) -> Step:
    """The frozen :class:`Step` of ``definition``: the one ``Step(...)`` makes of it,
    its slots filled by their own setters from the defaults updated with what the
    definition sets.

    Through ``Step(...)``, registering 20,000 steps spends 65 ms in its ``__init__``,
    most of it parsing 26 keywords; this takes a fifth less.  A definition put
    together by hand that lacks a field or sets one that is not a keyword goes through
    ``Step(...)``, which says which."""
    given = definition.fields
    values = {**_DEFAULTS, **given, "action": definition.action,
              "teardown": definition.teardown_fn, "preview": definition.preview_fn,
              "defined_at": definition.defined_at}
    if len(values) != _FIELD_COUNT or not given.keys() <= _DEFINABLE:
        return Step(action=definition.action, teardown=definition.teardown_fn,
                    preview=definition.preview_fn, defined_at=definition.defined_at, **given)
    frozen = object.__new__(Step)
    for name, set_field in _SETTERS:
        set_field(frozen, values[name])
    return frozen


def step(
    name: str | None = None,
    *,
    description: str | None = None,
    requires: str | tuple[str, ...] | list[str] = (),
    wants: str | tuple[str, ...] | list[str] = (),
    after: str | tuple[str, ...] | list[str] = (),
    before: str | tuple[str, ...] | list[str] = (),
    wanted_by: str | tuple[str, ...] | list[str] = (),
    reads: str | tuple[str, ...] | list[str] = (),
    when: str | None = None,
    device_bound: bool = False,
    binds_device: bool = False,
    holds_gil: bool = False,
    job_store: bool = False,
    barrier: bool = False,
    timeout: float | None = None,
    retries: int = 0,
    retry_on: tuple[type[BaseException], ...] = (),
    retry_backoff: float = 0.5,
    settings: SettingSpec | Iterable[SettingSpec] = (),
) -> Callable[[StepAction], StepDefinition]:
    """Declare a step.  The name defaults to the function name, the description
    to the first line of its docstring; ``settings`` lists what the step reads
    (see :func:`initorch.setting`).  Nothing is validated here; see
    :meth:`StepCatalog.add`.

    The keywords are the fields :data:`STEP_FIELDS` marks ``keyword``, with the
    same defaults (``tests/test_registry.py`` holds them to it); they are spelt out
    here for type checkers and readers."""
    given = dict(locals())  # first: exactly the parameters
    where = caller_location()

    def decorate(fn: StepAction) -> StepDefinition:
        taken = dict(given)  # the name and the keywords, to be taken as fields
        for key, take in _CONVERTED:
            value = given[key]
            if value.__class__ is not tuple:  # a tuple is taken as it is, by every kind
                taken[key] = take(value)
        taken["name"] = name or getattr(fn, "__name__", "")
        taken["description"] = description or _first_line(fn.__doc__)
        return StepDefinition(action=fn, fields=taken, defined_at=where)

    return decorate


def _first_line(doc: str | None) -> str:
    """The first line of a docstring (``""`` when there is none)."""
    lines = (doc or "").strip().splitlines()
    return lines[0] if lines else ""
