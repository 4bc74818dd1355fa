"""Plan-time previews: what a step will do here, told before anything runs.

Some steps depend on facts the dry run can know without importing torch: which
cores each local rank will be pinned to (sysfs and the launcher's environment),
how ranks fall into tensor- and pipeline-parallel groups (the settings). A step
declares ``@my_step.preview``; resolution calls it once per planned step with a
:class:`~initorch.model.contexts.PreviewContext` and keeps the returned lines in
:attr:`~initorch.resolution.plan.PlannedStep.notes`, which ``initorch plan``
prints under the step and ``--json`` lists as ``preview``.

A preview may also refuse settings that cannot work (``ctx.reject(...)``):
``initorch plan`` and ``validate`` then fail with the setting's
``file:line:col``, before any process starts.  Every refusal of every step is
reported together.  Notes depend on the machine and the environment, so they
are left out of the plan's fingerprint; the refusals do not change it either.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping
from typing import Any, NoReturn

from initorch.errors import InitorchError, Problem, ResolveError
from initorch.loading.document import Setting
from initorch.location import SourceLocation
from initorch.model.devices import DeviceRef
from initorch.records import record
from initorch.resolution.plan import PlannedStep


@record
class PlanPreviewContext:
    """What a step's preview sees: the resolved settings, the device and the
    environment the plan was made in (``WORLD_SIZE``, ``LOCAL_WORLD_SIZE`` under
    torchrun), and what the settings declared with a table of choices name;
    implements :class:`initorch.model.contexts.PreviewContext`.  A preview must not
    import torch or a vendor package."""

    step: str
    device: DeviceRef
    settings: Mapping[str, Setting]
    environ: Mapping[str, str]
    implementations: Mapping[str, Any]

    def setting(self, key: str) -> Any:
        """A declared setting's value by dotted key (a preview may read any declared
        setting: showing a device module's name is not reading it at run time)."""
        try:
            return self.settings[key].value
        except KeyError:
            raise ResolveError(f"step '{self.step}' reads setting '{key}', which no step "
                               "or plugin declares",
                               hint="declare it with setting(...) in @step(settings=...)"
                               ) from None

    def implementation(self, key: str) -> Any:
        """What the value of ``key``, a setting declared with a table of choices, names
        (the preview of a memory query shows its summary)."""
        value = self.setting(key)
        try:
            return self.implementations[key]
        except KeyError:
            raise ResolveError(f"step '{self.step}' asks what setting '{key}' names, but "
                               f"'{key}' is not declared with a table of choices "
                               f"(its value is {value!r})",
                               hint="declare it with setting(..., choices={name: "
                                    "implementation})") from None

    def where(self, key: str) -> SourceLocation | None:
        """Where a setting was last set (a profile line or the command line)."""
        setting = self.settings.get(key)
        return setting.location if setting is not None else None

    def reject(self, message: str, *, setting: str | None = None,
               hint: str | None = None) -> NoReturn:
        """Refuse the plan: ``message`` is reported at ``setting``'s location."""
        where = self.where(setting) if setting is not None else None
        raise ResolveError(f"step '{self.step}': {message}", location=where, hint=hint)


def preview_steps(steps: tuple[PlannedStep, ...], settings: Mapping[str, Setting],
                  device: DeviceRef, environ: Mapping[str, str],
                  implementations: Mapping[str, Any]) -> tuple[PlannedStep, ...]:
    """``steps`` with each preview's notes attached; one :class:`ResolveError` listing
    every refusal.  An exception other than an :class:`InitorchError` is a bug in
    the step and propagates as it is."""
    problems: list[Problem] = []
    previewed: list[PlannedStep] = []
    for planned in steps:
        preview = planned.step.preview
        if preview is None:
            previewed.append(planned)
            continue
        context = PlanPreviewContext(planned.name, device, settings, environ,
                                     implementations)
        try:
            notes = tuple(str(line) for line in preview(context))
        except InitorchError as error:
            problems.extend(error.problems)
            continue
        previewed.append(dataclasses.replace(planned, notes=notes))
    if problems:
        raise ResolveError(f"{len(problems)} problem(s) found by step previews",
                           problems=problems)
    return tuple(previewed)
