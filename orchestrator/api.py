"""The embedding entry points: from profile names to a :class:`Plan`, or to a started server.

>>> from initorch import load_plan, start
>>> plan = load_plan(["npu"], settings={"hicache.host_pool_mb": 128})
>>> plan.order, plan.waves, plan.fingerprint
>>> with start(profile="cpu", steps=["load_model"]) as started:
...     serve(started.outputs["load_model"])

:func:`load_settings` gives a selection's settings without resolving steps.
Everything the CLI does goes through here, so a launcher that embeds initorch
gets exactly what ``initorch plan`` shows.
"""

from __future__ import annotations

import warnings
from collections.abc import Iterable, Iterator, Mapping, Sequence
from contextlib import contextmanager
from typing import TYPE_CHECKING, Any

from initorch.errors import InitorchError, ProfileError, UnplannedStepWarning
from initorch.loading.catalog import AUTO_PROFILE
from initorch.loading.compose import ComposedProfile, parse_assignment
from initorch.loading.selection import compose_selection, normalise_device
from initorch.loading.settle import SettledSettings, settle
from initorch.model.devices import DeviceRef
from initorch.model.step import Step
from initorch.plugins import Registry
from initorch.resolution.plan import Plan
from initorch.resolution.resolve import resolve

if TYPE_CHECKING:
    from initorch.execution.context import RankInfo
    from initorch.execution.run import Run


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
    registry = registry or Registry.with_plugins()
    composed, ref = _compose(registry, profiles, device, settings)
    plan = resolve(composed, registry.steps, ref.index if ref else None, requested=steps)
    for unplanned in unplanned_steps(plan, registry):
        warnings.warn(UnplannedStepWarning(unplanned.name,
                                           registry.steps.plugin_of(unplanned.name)),
                      stacklevel=2)
    return plan


def load_settings(
    profiles: Sequence[str] = (),
    *,
    device: object | None = None,
    settings: Mapping[str, Any] | Iterable[str] = (),
    registry: Registry | None = None,
) -> SettledSettings:
    """The settings a selection gives, each checked and with its origin: declared
    defaults, overlaid by ``profiles``, overlaid by ``settings``.

    Unlike :func:`load_plan` it resolves no steps, so an overlay or an abstract
    profile (no device type) works too.  Raises :class:`ProfileError` listing
    every format or settings problem.
    """
    registry = registry or Registry.with_plugins()
    composed, _ = _compose(registry, profiles, device, settings)
    settled = settle(composed, registry.settings)
    problems = [*composed.problems, *settled.problems]
    if problems:
        raise ProfileError(f"{len(problems)} problem(s) in the selected profiles",
                           problems=problems)
    return settled


def _compose(registry: Registry, profiles: Sequence[str], device: object | None,
             settings: Mapping[str, Any] | Iterable[str]
             ) -> tuple[ComposedProfile, DeviceRef | None]:
    """The selection composed (``--set`` values recorded, not yet checked)."""
    if AUTO_PROFILE in profiles:
        raise InitorchError(
            f"profile '{AUTO_PROFILE}' needs hardware detection, which this version of "
            "initorch does not have yet",
            hint="name the device's profile (see 'initorch profiles'), or pass device='npu:0'")
    overrides = (
        list(settings.items()) if isinstance(settings, Mapping)
        else [parse_assignment(item) for item in settings]
    )
    ref = normalise_device(registry.profiles, device) if device is not None else None
    if not profiles and ref is None:
        raise InitorchError("no profile selected",
                            hint="pass --profile NAME (see 'initorch profiles') or --device TYPE")
    return compose_selection(registry.profiles, profiles, ref, overrides), ref


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


@contextmanager
def start(
    profile: str | Sequence[str] | None = None,
    *,
    device: object | None = None,
    settings: Mapping[str, Any] | Iterable[str] = (),
    steps: Sequence[str] = (),
    registry: Registry | None = None,
    executor: str = "sequential",
    workers: int | None = None,
    rank: RankInfo | None = None,
    handle_signals: bool = False,
) -> Iterator[Run]:
    """Start a server's stack: resolve, run every step, yield the :class:`Run`, and
    tear down in reverse order when the block exits (normally or by an exception).

    ``started.outputs`` maps each completed step to its output (the transfer
    engine, the process group, the registered pool, a launcher's model).
    ``profile`` is a profile name or path, or several to layer; ``"auto"`` is
    reserved for hardware detection, which is not available yet.  The other
    arguments are those of :func:`load_plan` and :class:`~initorch.Run`.  A step
    that fails raises :class:`~initorch.errors.StepFailedError` (its
    ``__cause__`` the step's exception) after tearing down what completed.
    """
    from initorch.execution.run import Run

    profiles = [profile] if isinstance(profile, str) else list(profile or ())
    registry = registry or Registry.with_plugins()
    plan = load_plan(profiles, device=device, settings=settings, steps=steps,
                     registry=registry)
    with Run(plan, executor=executor, workers=workers, diagnoses=registry.diagnoses,
             rank=rank, handle_signals=handle_signals) as run:
        yield run
