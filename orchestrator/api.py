"""The embedding entry point: from profile names to a :class:`Plan` in one call.

>>> from initorch import load_plan
>>> plan = load_plan(["npu"], settings={"hicache.host_pool_mb": 128})
>>> plan.order, plan.waves, plan.fingerprint

Everything the CLI does goes through here, so a launcher that embeds initorch
gets exactly what ``initorch plan`` shows.
"""

from __future__ import annotations

import warnings
from collections.abc import Iterable, Mapping, Sequence
from typing import Any

from initorch.errors import InitorchError, UnplannedStepWarning
from initorch.loading.catalog import AUTO_PROFILE
from initorch.loading.compose import parse_assignment
from initorch.loading.selection import compose_selection, normalise_device
from initorch.model.step import Step
from initorch.plugins import Registry
from initorch.resolution.plan import Plan
from initorch.resolution.resolve import resolve


def load_plan(
    profiles: Sequence[str] = (),
    *,
    device: object | None = None,
    settings: Mapping[str, Any] | Iterable[str] = (),
    steps: Sequence[str] = (),
    registry: Registry | None = None,
) -> Plan:
    """Compose ``profiles`` (names or YAML paths, later layered over earlier), apply
    ``settings`` (a mapping, or ``"key=value"`` strings typed as YAML), and resolve.

    ``device`` (``"npu:0"``, ``torch.device(...)``) selects the device's profile
    when no profile sets a device type, and fixes the device index.  ``steps``
    names registered steps to plan as if a profile listed them.  Raises an
    :class:`~initorch.errors.InitorchError` subclass on invalid input, and warns
    (:class:`~initorch.errors.UnplannedStepWarning`) about a registered step
    that nothing could ever pull into a plan.
    """
    if AUTO_PROFILE in profiles:
        raise InitorchError(
            f"profile '{AUTO_PROFILE}' needs hardware detection, which this version of "
            "initorch does not have yet",
            hint="name the device's profile (see 'initorch profiles'), or pass device='npu:0'")
    registry = registry or Registry.with_plugins()
    overrides = (
        list(settings.items()) if isinstance(settings, Mapping)
        else [parse_assignment(item) for item in settings]
    )
    ref = normalise_device(registry.profiles, device) if device is not None else None
    if not profiles and ref is None:
        raise InitorchError("no profile selected",
                            hint="pass --profile NAME (see 'initorch profiles') or --device TYPE")
    composed = compose_selection(registry.profiles, profiles, ref, overrides)
    plan = resolve(composed, registry.steps, ref.index if ref else None, requested=steps)
    for unplanned in unplanned_steps(plan, registry):
        warnings.warn(UnplannedStepWarning(unplanned.name,
                                           registry.steps.plugin_of(unplanned.name)),
                      stacklevel=2)
    return plan


def unplanned_steps(plan: Plan, registry: Registry) -> list[Step]:
    """Registered steps that are not in ``plan`` and that nothing pulls in: no step
    requires or wants them, they declare no ``wanted_by``, and no catalogued profile
    lists them (profiles are read only when such a step exists)."""
    considered = set(plan.order) | {skipped.name for skipped in plan.skipped}
    pulled = {target for declared in registry.steps
              for target in (*declared.requires, *declared.wants)}
    suspects = [declared for declared in registry.steps
                if declared.name not in considered and declared.name not in pulled
                and not declared.wanted_by]
    if suspects:
        listed = _steps_named_by_profiles(registry)
        suspects = [declared for declared in suspects if declared.name not in listed]
    return suspects


def _steps_named_by_profiles(registry: Registry) -> set[str]:
    """Every step a catalogued profile lists or adds a requires/wants edge to."""
    named: set[str] = set()
    for name in registry.profiles.names():
        try:
            document = registry.profiles.load(name)
        except InitorchError:
            continue  # 'initorch validate' reports it; a warning must not fail the plan
        for entry in document.steps:
            named.add(entry.name)
            named.update(change.target for change in entry.changes
                         if change.add and change.kind in ("requires", "wants"))
    return named
