"""The step registry: the one place step declarations are validated.

Steps are registered by name from Python (built-ins and plugins).  Profiles
only ever *name* registered steps; nothing named in a profile is imported.
"""

from __future__ import annotations

import re
from collections.abc import Iterator
from typing import Any

from initorch.errors import StepDefinitionError, UnknownStepError
from initorch.location import SourceLocation
from initorch.model.conditions import parse_condition
from initorch.model.step import EDGE_KINDS, Step, StepDefinition
from initorch.suggest import closest

STEP_NAME = re.compile(r"^[a-z][a-z0-9_]*$")


class StepRegistry:
    """Registered steps by name, in registration order, with the plugin that added each.

    ``provider`` names the plugin whose ``register`` function is running; the
    plugin loader sets it, so that ``initorch steps`` can say where a step comes
    from.  Steps added outside a plugin (by a launcher, in code) have none.
    """

    def __init__(self) -> None:
        self._steps: dict[str, Step] = {}
        self._providers: dict[str, str | None] = {}
        self.provider: str | None = None

    def add(self, definition: StepDefinition | Step) -> Step:
        """Validate ``definition`` and register it; return the frozen :class:`Step`."""
        record = definition if isinstance(definition, Step) else _freeze(definition)
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
        self._steps[record.name] = record
        self._providers[record.name] = self.provider
        return record

    def plugin_of(self, name: str) -> str | None:
        """The plugin that registered step ``name`` (``None``: added in code)."""
        return self._providers[name]

    def copy(self) -> StepRegistry:
        """An independent registry with the same steps (the plugin loader's undo point)."""
        clone = StepRegistry()
        clone._steps, clone._providers = dict(self._steps), dict(self._providers)
        clone.provider = self.provider
        return clone

    def get(self, name: str, location: SourceLocation | None = None) -> Step:
        """The step called ``name``; :class:`UnknownStepError` with a suggestion otherwise."""
        try:
            return self._steps[name]
        except KeyError:
            raise UnknownStepError(
                name, location=location, suggestion=closest(name, self._steps)
            ) from None

    def __contains__(self, name: object) -> bool:
        return name in self._steps

    def __iter__(self) -> Iterator[Step]:
        return iter(self._steps.values())

    def __len__(self) -> int:
        return len(self._steps)


def _freeze(definition: StepDefinition) -> Step:
    fields: dict[str, Any] = dict(definition.fields)
    return Step(
        action=definition.action,
        teardown=definition.teardown_fn,
        preview=definition.preview_fn,
        defined_at=definition.defined_at,
        **fields,
    )


def _fail(step: Step, message: str, hint: str) -> None:
    raise StepDefinitionError(f"step '{step.name}': {message}", location=step.defined_at,
                              hint=hint)


def _validate(step: Step) -> None:
    if not isinstance(step.name, str) or not STEP_NAME.match(step.name):
        _fail(step, "invalid name", "use lower_snake_case starting with a letter")
    if not step.description:
        _fail(step, "no description", "pass description= or give the function a docstring")
    if not callable(step.action):
        _fail(step, "action is not callable", "decorate a function with @step")
    for kind in (*EDGE_KINDS, "wanted_by"):
        for target in getattr(step, kind):
            if not isinstance(target, str) or not STEP_NAME.match(target):
                _fail(step, f"{kind} entry {target!r} is not a step name",
                      "list step names as strings")
            if target == step.name:
                _fail(step, f"lists itself under {kind}", "remove the self-reference")
    if step.when is not None:
        if not isinstance(step.when, str):
            _fail(step, f"when must be a condition string, got {step.when!r}",
                  "e.g. when=\"mooncake.enabled\"")
        parse_condition(step.when, step.defined_at)
    timeout_ok = isinstance(step.timeout, (int, float)) and not isinstance(step.timeout, bool) \
        and step.timeout > 0
    if step.timeout is not None and not timeout_ok:
        _fail(step, f"timeout must be a positive number of seconds, got {step.timeout!r}",
              "omit it for no timeout")
    if not isinstance(step.retries, int) or isinstance(step.retries, bool) or step.retries < 0:
        _fail(step, f"retries must be a whole number >= 0, got {step.retries!r}",
              "use 0 for no retries")
    if step.retries and not step.retry_on:
        _fail(step, "retries given but no retry_on exception types",
              "declare which errors are transient with retry_on=(...)")
    for exc_type in step.retry_on:
        if not (isinstance(exc_type, type) and issubclass(exc_type, Exception)):
            _fail(step, f"retry_on entry {exc_type!r} is not an Exception subclass",
                  "list exception classes; KeyboardInterrupt and the like are never retried")
    if step.device_bound and step.binds_device:
        _fail(step, "cannot be both device_bound and binds_device",
              "the step that binds the device runs before the device context exists")
    if step.teardown is not None and not callable(step.teardown):
        _fail(step, "teardown is not callable", "use @<step>.teardown on a function")
    if step.preview is not None and not callable(step.preview):
        _fail(step, "preview is not callable", "use @<step>.preview on a function")
