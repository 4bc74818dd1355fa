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

from initorch.errors import InitorchError
from initorch.loading.compose import parse_assignment
from initorch.loading.selection import compose_selection, normalise_device
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
    overrides = (
        list(settings.items()) if isinstance(settings, Mapping)
        else [parse_assignment(item) for item in settings]
    )
    ref = normalise_device(registry.profiles, device) if device is not None else None
    if not profiles and ref is None:
        raise InitorchError("no profile selected",
                            hint="pass --profile NAME (see 'initorch profiles') or --device TYPE")
    composed = compose_selection(registry.profiles, profiles, ref, overrides)
    return resolve(composed, registry.steps, ref.index if ref else None)
