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

import os
import warnings
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from contextlib import contextmanager
from pathlib import Path
from typing import TYPE_CHECKING, Any

from initorch.errors import InitorchError, ProfileError, UnplannedStepWarning
from initorch.loading.catalog import AUTO_PROFILE
from initorch.loading.compose import ComposedProfile, environment_settings, parse_assignment
from initorch.loading.detection import Detection, Machine, detect
from initorch.loading.selection import compose_selection, normalise_device, profile_for_device
from initorch.loading.settle import SettledSettings, settle
from initorch.model.devices import DeviceRef
from initorch.model.step import Step
from initorch.plugins import Registry
from initorch.resolution.plan import Plan
from initorch.resolution.resolve import resolve

if TYPE_CHECKING:
    from initorch.execution.context import RankInfo
    from initorch.execution.launchers import LaunchArguments
    from initorch.execution.run import Run

PROFILE_ENV = "INITORCH_PROFILE"
"""The profiles (comma-separated) a selection without --profile or --device uses;
unset, the machine's own device profile is detected (``auto``)."""


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
    when no profile sets a device type, and fixes the device index.  ``"auto"``
    among ``profiles`` is this machine's device profile (:func:`detect_device`,
    static: nothing imported); with neither profiles nor a device, the profiles
    are ``INITORCH_PROFILE`` (comma-separated), else ``auto``.  ``steps``
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


def load_saved_plan(path: str | os.PathLike[str], registry: Registry | None = None) -> Plan:
    """The plan saved at ``path`` (:func:`~initorch.resolution.saved.save_plan`,
    ``initorch plan --out``), with its steps taken from ``registry`` (the installed
    plugins by default);
    :class:`~initorch.errors.SavedPlanError` when it cannot be run exactly as it was
    saved (see :mod:`initorch.resolution.saved`)."""
    from initorch.resolution.saved import read_saved_plan

    return read_saved_plan(path, (registry or Registry.with_plugins()).steps)


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
    every format or settings problem, a variable a setting's reader refuses
    included (without a plan, no step is known not to read it).
    """
    registry = registry or Registry.with_plugins()
    composed, _ = _compose(registry, profiles, device, settings)
    settled = settle(composed, registry.settings)
    problems = [*composed.problems, *settled.problems, *settled.unread.values()]
    if problems:
        raise ProfileError(f"{len(problems)} problem(s) in the selected profiles",
                           problems=problems)
    return settled


def selected_profiles(profiles: Sequence[str], device: object | None,
                      environ: Mapping[str, str] | None = None) -> list[str]:
    """The profiles a selection names: ``profiles``; without them and without a
    ``device``, ``INITORCH_PROFILE`` (comma-separated), else ``auto``."""
    if profiles or device is not None:
        return list(profiles)
    environ = os.environ if environ is None else environ
    named = [item.strip() for item in environ.get(PROFILE_ENV, "").split(",") if item.strip()]
    return named or [AUTO_PROFILE]


def detect_device(registry: Registry | None = None, *, deep: bool = False,
                  root: str | os.PathLike[str] = "/",
                  environ: Mapping[str, str] | None = None,
                  announce: Callable[[str], None] | None = None) -> Detection:
    """Which device this machine has, by the registered probes in priority order
    (``initorch detect``).  ``deep`` also imports each candidate's packages and
    counts its devices, up to the chosen one, each within
    :data:`~initorch.loading.detection.DEEP_PROBE_TIMEOUT_S` (``announce`` is told
    each device before its packages are imported); ``root`` is where device nodes
    and libraries are looked for (a host mounted into a container)."""
    registry = registry or Registry.with_plugins()
    machine = Machine(Path(root), dict(os.environ if environ is None else environ))
    return detect(registry.probes, machine, deep=deep, announce=announce)


def _auto_profile(registry: Registry) -> str:
    """The profile of the device detection chooses (statically: nothing imported)."""
    detection = detect_device(registry)
    if detection.chosen is None:
        raise InitorchError("profile 'auto': no device probe fits this machine",
                            hint="see 'initorch detect', or name a profile")
    return profile_for_device(registry.profiles, detection.chosen)


def _compose(registry: Registry, profiles: Sequence[str], device: object | None,
             settings: Mapping[str, Any] | Iterable[str]
             ) -> tuple[ComposedProfile, DeviceRef | None]:
    """The selection composed (``--set`` values recorded, not yet checked)."""
    profiles = selected_profiles(profiles, device)
    if AUTO_PROFILE in profiles:
        chosen = _auto_profile(registry)
        profiles = [chosen if name == AUTO_PROFILE else name for name in profiles]
    overrides = (
        list(settings.items()) if isinstance(settings, Mapping)
        else [parse_assignment(item) for item in settings]
    )
    # Variables another program is configured by (SGLang's MOONCAKE_*) come between
    # the profiles and --set.
    environment = environment_settings(registry.settings, os.environ,
                                       skip=(key for key, _ in overrides))
    ref = normalise_device(registry.profiles, device) if device is not None else None
    return compose_selection(registry.profiles, profiles, ref, [*environment, *overrides]), ref


def unplanned_steps(plan: Plan, registry: Registry) -> list[Step]:
    """Registered steps that are not in ``plan`` and that nothing pulls in: no step
    requires or wants them, they declare no ``wanted_by``, and no catalogued profile
    lists them (profiles are read only when such a step exists)."""
    considered = set(plan.order) | {skipped.name for skipped in plan.skipped}
    suspects = [declared for declared in registry.steps
                if declared.name not in considered and not declared.wanted_by]
    if suspects:  # what every registered step pulls in, only when it can matter
        pulled = {target for declared in registry.steps
                  for target in (*declared.requires, *declared.wants)}
        suspects = [declared for declared in suspects if declared.name not in pulled]
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
    launch: LaunchArguments | None = None,
    handle_signals: bool = False,
    keep_going: bool = False,
    teardown: str = "side-by-side",
) -> Iterator[Run]:
    """Start a server's stack: resolve, run every step, yield the :class:`Run`, and
    tear down when the block exits (normally or by an exception): side by side,
    dependents first, or with ``teardown="sequential"`` in reverse completion order.

    ``started.outputs`` maps each completed step to its output (the transfer
    engine, the process group, the registered pool, a launcher's model).
    ``profile`` is a profile name or path, or several to layer; ``"auto"`` (or
    nothing, without ``INITORCH_PROFILE``) is this machine's device profile.  The
    job is ``rank``, or ``launch`` (SGLang-style
    :class:`~initorch.execution.launchers.LaunchArguments`), else the launcher's
    variables.  The other arguments are those of :func:`load_plan` and
    :class:`~initorch.Run`.  A step that fails raises :class:`~initorch.errors.StepFailedError` (its
    ``__cause__`` the step's exception) after tearing down what completed.
    """
    from initorch.execution.run import Run

    profiles = [profile] if isinstance(profile, str) else list(profile or ())
    registry = registry or Registry.with_plugins()
    plan = load_plan(profiles, device=device, settings=settings, steps=steps,
                     registry=registry)
    with Run(plan, executor=executor, workers=workers, diagnoses=registry.diagnoses,
             rank=rank, launch=launch, handle_signals=handle_signals,
             keep_going=keep_going, teardown=teardown) as run:
        yield run
