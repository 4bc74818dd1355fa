"""The step catalog: the one place step declarations are validated.

Steps are registered by name from Python (built-ins and plugins).  Profiles
only ever *name* registered steps; nothing named in a profile is imported.
"""

from __future__ import annotations

import math
import re
from collections.abc import Iterator, Sequence

from initorch.errors import StepDefinitionError, UnknownStepError
from initorch.location import SourceLocation
from initorch.model.canonical import encode_step
from initorch.model.conditions import parse_condition
from initorch.model.names import STEP_NAME, name_problem, non_ascii_problem
from initorch.model.settings import SettingCatalog
from initorch.model.step import (
    MAX_RETRIES,
    MAX_TIMEOUT_S,
    STEP_FIELDS,
    Step,
    StepDefinition,
    freeze,
    own_edge_records,
)
from initorch.suggest import closest


class StepCatalog:
    """Registered steps by name, in registration order, with the plugin that added each.

    ``provider`` names the plugin whose ``register`` function is running; the
    plugin loader sets it, so that ``initorch steps`` can say where a step comes
    from.  Steps added outside a plugin (by a launcher, in code) have none.
    Registering a step also declares its settings in ``settings`` (the
    registry's :class:`SettingCatalog`, shared with free-standing declarations).
    """

    def __init__(self, settings: SettingCatalog | None = None) -> None:
        self._steps: dict[str, Step] = {}
        self._providers: dict[str, str | None] = {}
        # The steps that declare themselves wanted_by each name, in registration order:
        # kept as steps are added, so that no plan scans every registered step for them.
        self._wanted_by: dict[str, list[Step]] = {}
        self.provider: str | None = None
        self.settings = SettingCatalog() if settings is None else settings

    def add(self, definition: StepDefinition | Step) -> Step:
        """Validate ``definition`` and register it with its settings; return the
        frozen :class:`Step`.  Nothing is registered when anything is invalid."""
        record = definition if isinstance(definition, Step) else freeze(definition)
        _validate(record)
        existing = self._steps.get(record.name)
        if existing is not None:
            owner = self._providers[record.name]
            by = f" by plugin '{owner}'" if owner else ""
            raise StepDefinitionError(
                f"step '{record.name}' is registered twice: first{by} at {existing.defined_at}",
                location=record.defined_at,
                hint="step names are global; rename one of them",
            )
        if record.settings:
            self.settings.add_all(record.settings, by=f"step {record.name}",
                                  where=record.defined_at)
        # What a plan needs of the step and no plan changes (its canonical text, its
        # edge records) is written now, once, and kept on it: a plan reads it as it is.
        if record._canonical is None:  # a Step registered again keeps its text
            encode_step(record)
        own_edge_records(record)
        self._steps[record.name] = record
        self._providers[record.name] = self.provider
        for target in record.wanted_by:
            self._wanted_by.setdefault(target, []).append(record)
        return record

    def substitute(self, step: Step) -> Step:
        """Put ``step`` in place of the registered step of its name, keeping its place
        and its plugin: a drive registry gives an engine's function to a step whose
        contract stays as it is (:func:`initorch.kit.engine_performed`).  ``step`` is
        validated as :meth:`add` validates; its edges and settings must be those of the
        step it replaces (they were checked against the registry when that one was
        added), else :class:`StepDefinitionError`."""
        existing = self.get(step.name, step.defined_at)
        _validate(step)
        if step.settings != existing.settings or any(
                getattr(step, kind) != getattr(existing, kind) for kind in _NAME_LISTS):
            raise StepDefinitionError(
                f"step '{step.name}': a substitute must keep the edges and settings of the "
                "step it replaces", location=step.defined_at,
                hint="change only the action, teardown, preview or description")
        if step._canonical is None:
            encode_step(step)
        own_edge_records(step)
        self._steps[step.name] = step
        for target in step.wanted_by:
            self._wanted_by[target] = [step if other is existing else other
                                       for other in self._wanted_by[target]]
        return step

    def wanting(self, name: str) -> Sequence[Step]:
        """The registered steps that list ``name`` under ``wanted_by``, in registration
        order."""
        return self._wanted_by.get(name, ())

    def plugin_of(self, name: str) -> str | None:
        """The plugin that registered step ``name`` (``None``: added in code)."""
        return self._providers[name]

    def copy(self) -> StepCatalog:
        """An independent registry with the same steps and declared settings (the
        plugin loader's undo point)."""
        clone = StepCatalog(self.settings.copy())
        clone._steps, clone._providers = dict(self._steps), dict(self._providers)
        clone._wanted_by = {name: list(steps) for name, steps in self._wanted_by.items()}
        clone.provider = self.provider
        return clone

    def get(self, name: str, location: SourceLocation | None = None) -> Step:
        """The step called ``name``; :class:`UnknownStepError` with a suggestion otherwise
        (or naming the look-alike character that makes it differ)."""
        try:
            return self._steps[name]
        except KeyError:
            lookalike = non_ascii_problem(name, "step name") if isinstance(name, str) else None
            raise UnknownStepError(
                name, location=location, suggestion=None if lookalike
                else closest(name, self._steps), reason=lookalike,
            ) from None

    def __contains__(self, name: object) -> bool:
        return name in self._steps

    def __iter__(self) -> Iterator[Step]:
        return iter(self._steps.values())

    def __len__(self) -> int:
        return len(self._steps)


def _fail(step: Step, message: str, hint: str) -> None:
    raise StepDefinitionError(f"step '{step.name}': {message}", location=step.defined_at,
                              hint=hint)


_NAME_LISTS = tuple(row.name for row in STEP_FIELDS if row.kind == "names")
_FLAGS = tuple(row.name for row in STEP_FIELDS if row.kind == "flag")


def _validate(step: Step) -> None:
    problem = name_problem(step.name, "step name")
    if problem is not None:
        raise StepDefinitionError(problem, location=step.defined_at,
                                  hint="use ASCII lower_snake_case starting with a letter")
    if not step.description:
        _fail(step, "no description", "pass description= or give the function a docstring")
    if not callable(step.action):
        _fail(step, "action is not callable", "decorate a function with @step")
    for kind in _NAME_LISTS:
        targets = getattr(step, kind)
        if not targets or (_plain_names(targets) and step.name not in targets):
            continue  # the usual case, checked at once
        for target in targets:
            problem = name_problem(target, "step name")
            if problem is not None:
                _fail(step, f"{kind} entry: {problem}", "list step names as strings")
            if target == step.name:
                _fail(step, f"lists itself under {kind}", "remove the self-reference")
    for target in step.reads:
        if target not in step.requires and target not in step.wants:
            _fail(step, f"reads the output of '{target}' but neither requires nor wants it",
                  f"add '{target}' to requires= (or to wants= when the step copes without "
                  "it)")
    if step.when is not None:
        if not isinstance(step.when, str):
            _fail(step, f"when must be a condition string, got {step.when!r}",
                  "e.g. when=\"mooncake.enabled\"")
        parse_condition(step.when, step.defined_at)
    if step.timeout is not None and not timeout_ok(step.timeout):
        _fail(step, f"timeout must be a positive, finite number of seconds up to "
                    f"{MAX_TIMEOUT_S:g}, got {step.timeout!r}", "omit it for no timeout")
    if not isinstance(step.retries, int) or isinstance(step.retries, bool) \
            or not 0 <= step.retries <= MAX_RETRIES:
        _fail(step, f"retries must be a whole number from 0 to {MAX_RETRIES}, "
                    f"got {step.retries!r}", "use 0 for no retries")
    if step.retries and not step.retry_on:
        _fail(step, "retries given but no retry_on exception types",
              "declare which errors are transient with retry_on=(...)")
    for exc_type in step.retry_on:
        if not (isinstance(exc_type, type) and issubclass(exc_type, Exception)):
            _fail(step, f"retry_on entry {exc_type!r} is not an Exception subclass",
                  "list exception classes; KeyboardInterrupt and the like are never retried")
    for flag in _FLAGS:
        value = getattr(step, flag)
        if not isinstance(value, bool):
            _fail(step, f"{flag} must be True or False, got {value!r}",
                  f"pass {flag}=True, or leave it out")
    if step.device_bound and step.binds_device:
        _fail(step, "cannot be both device_bound and binds_device",
              "the step that binds the device runs before the device context exists")
    if step.job_store and step.barrier:
        _fail(step, "cannot be both job_store and barrier",
              "a barrier is held on the job store, which this step only creates")
    if step.teardown is not None and not callable(step.teardown):
        _fail(step, "teardown is not callable", "use @<step>.teardown on a function")
    if step.preview is not None and not callable(step.preview):
        _fail(step, "preview is not callable", "use @<step>.preview on a function")


_NAME_LIST = re.compile(rf"{STEP_NAME.pattern}(?: {STEP_NAME.pattern})*")


def _plain_names(names: tuple[str, ...]) -> bool:
    """Whether every one of ``names`` is a valid step name, in one match (the checks
    name by name find the first that is not, for the message).  No valid name holds a
    space, so the spaces are the separators exactly when there is one fewer."""
    try:
        joined = " ".join(names)
    except TypeError:  # not all strings
        return False
    return joined.count(" ") == len(names) - 1 and _NAME_LIST.fullmatch(joined) is not None


def timeout_ok(value: object) -> bool:
    """A step timeout: a positive, finite number of seconds, at most a week."""
    return isinstance(value, (int, float)) and not isinstance(value, bool) \
        and math.isfinite(value) and 0 < value <= MAX_TIMEOUT_S
