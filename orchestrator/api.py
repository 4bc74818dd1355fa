"""The embedding entry point: from profile names to a :class:`Plan` in one call.

>>> from initorch import load_plan
>>> plan = load_plan(["npu"], settings={"hicache.host_pool_mb": 128})
>>> plan.order, plan.waves, plan.fingerprint

Everything the CLI does goes through here, so a launcher that embeds initorch
gets exactly what ``initorch plan`` shows.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from typing import Any

from initorch.errors import InitorchError, ProfileError
from initorch.loading.compose import ComposedProfile, parse_assignment
from initorch.loading.selection import compose_selection, normalise_device
from initorch.loading.settle import SettledSettings, settle
from initorch.model.devices import DeviceRef
from initorch.plugins import Registry
from initorch.resolution.plan import Plan
from initorch.resolution.resolve import resolve


def load_plan(
    profiles: Sequence[str] = (),
    *,
    device: object | None = None,
    settings: Mapping[str, Any] | Iterable[str] = (),
    registry: Registry | None = None,
) -> Plan:
    """Compose ``profiles`` (names or YAML paths, later layered over earlier), apply
    ``settings`` (a mapping, or ``"key=value"`` strings typed as YAML), and resolve.

    ``device`` (``"npu:0"``, ``torch.device(...)``) selects the device's profile
    when no profile sets a device type, and fixes the device index.  Raises an
    :class:`~initorch.errors.InitorchError` subclass on invalid input.
    """
    registry = registry or Registry.with_plugins()
    composed, ref = _compose(registry, profiles, device, settings)
    return resolve(composed, registry.steps, ref.index if ref else None)


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
    overrides = (
        list(settings.items()) if isinstance(settings, Mapping)
        else [parse_assignment(item) for item in settings]
    )
    ref = normalise_device(registry.profiles, device) if device is not None else None
    if not profiles and ref is None:
        raise InitorchError("no profile selected",
                            hint="pass --profile NAME (see 'initorch profiles') or --device TYPE")
    return compose_selection(registry.profiles, profiles, ref, overrides), ref
