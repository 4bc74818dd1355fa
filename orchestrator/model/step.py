"""The step model: what a start-up action declares about itself.

A :class:`Step` is an immutable record.  Authors write a plain function and
decorate it with :func:`step`, which only stamps a :class:`StepDefinition`
(a small builder that also collects the optional teardown); the
:class:`~initorch.model.registry.StepRegistry` validates definitions once and
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
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Literal

from initorch.location import SourceLocation, caller_location
from initorch.model.settings import SettingSpec

if TYPE_CHECKING:
    from initorch.model.contexts import PreviewContext, StepContext

EdgeKind = Literal["requires", "wants", "after", "before"]
EDGE_KINDS: tuple[EdgeKind, ...] = ("requires", "wants", "after", "before")

# Beyond these a timeout or a retry count is a typo (or infinity), and the
# threading and datetime calls that use them overflow.
MAX_TIMEOUT_S = 7 * 24 * 3600.0
MAX_RETRIES = 100

StepAction = Callable[["StepContext"], Any]
StepTeardown = Callable[["StepContext", Any], None]
StepPreview = Callable[["PreviewContext"], Sequence[str]]


@dataclass(frozen=True, slots=True)
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
    """

    name: str
    description: str
    action: StepAction
    requires: tuple[str, ...] = ()
    wants: tuple[str, ...] = ()
    after: tuple[str, ...] = ()
    before: tuple[str, ...] = ()
    wanted_by: tuple[str, ...] = ()
    reads: tuple[str, ...] = ()
    when: str | None = None
    device_bound: bool = False
    binds_device: bool = False
    holds_gil: bool = False
    job_store: bool = False
    barrier: bool = False
    timeout: float | None = None
    retries: int = 0
    retry_on: tuple[type[BaseException], ...] = ()
    retry_backoff: float = 0.5
    teardown: StepTeardown | None = None
    preview: StepPreview | None = None
    settings: tuple[SettingSpec, ...] = ()
    defined_at: SourceLocation = field(default=SourceLocation("<unknown>"), compare=False)
    # What the plan fingerprint writes for this declaration, encoded once when the
    # registry registers the step (:func:`initorch.model.canonical.encode_step`; a
    # frozen step's fields never change, so neither does their encoding).  Not a field
    # anyone sets: ``dataclasses.replace`` starts a changed step without it.
    _canonical: tuple[bytes, bytes, int, int] | None = field(
        default=None, init=False, repr=False, compare=False)

    def edges(self, kind: EdgeKind) -> tuple[str, ...]:
        """The names this step lists under ``kind``."""
        result: tuple[str, ...] = getattr(self, kind)
        return result


@dataclass(slots=True)
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
    :meth:`StepRegistry.add`."""
    where = caller_location()

    def decorate(fn: StepAction) -> StepDefinition:
        doc_line = (fn.__doc__ or "").strip().splitlines()
        return StepDefinition(
            action=fn,
            fields={
                "name": name or getattr(fn, "__name__", ""),
                "description": description or (doc_line[0] if doc_line else ""),
                "requires": _names(requires),
                "wants": _names(wants),
                "after": _names(after),
                "before": _names(before),
                "wanted_by": _names(wanted_by),
                "reads": _names(reads),
                "when": when,
                "device_bound": device_bound,
                "binds_device": binds_device,
                "holds_gil": holds_gil,
                "job_store": job_store,
                "barrier": barrier,
                "timeout": timeout,
                "retries": retries,
                "retry_on": tuple(retry_on),
                "retry_backoff": retry_backoff,
                "settings": (settings,) if isinstance(settings, SettingSpec)
                else tuple(settings),
            },
            defined_at=where,
        )

    return decorate
