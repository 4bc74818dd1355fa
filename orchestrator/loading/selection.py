"""Choosing profiles from ``--profile`` and ``--device``.

``--device musa:0`` alone selects the ``musa`` profile; given with overlays
only (``--profile mooncake-ep --device npu:0``) the device profile goes first;
given with a device profile of another type it is a conflict.  The table of
known device types comes from the profiles themselves (``device.type`` and
``device.aliases``), so a plugin that ships a profile also teaches initorch its
device string; so do the names a profile is suggested for (``device.suggested_for``:
``--device gpu`` asks "did you mean 'cuda'?").
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence

from initorch.errors import ConflictError, InitorchError, Problem
from initorch.loading.catalog import ProfileCatalog
from initorch.loading.compose import ComposedProfile, Override, compose, with_overrides
from initorch.location import COMMAND_LINE
from initorch.model.devices import DeviceRef, parse_device


def device_types(catalog: ProfileCatalog) -> dict[str, str]:
    """Map every known device type and alias to its canonical type."""
    return _device_names(catalog)[0]


def _device_names(catalog: ProfileCatalog) -> tuple[dict[str, str], dict[str, str]]:
    """Every known device type and alias, and every name a type is suggested for, each
    mapped to its canonical type (the first profile to declare a name keeps it)."""
    known: dict[str, str] = {}
    suggested: dict[str, str] = {}
    for name in catalog.names():
        try:
            doc = catalog.load(name)
        except InitorchError:
            continue  # a broken profile is reported by 'validate', not here
        settings = {s.key: s.value for s in doc.settings}
        device_type = settings.get("device.type")
        if device_type:
            known.setdefault(device_type, device_type)
            for alias in settings.get("device.aliases", []):
                known.setdefault(alias, device_type)
            for vague in doc.suggested_for:
                suggested.setdefault(vague, device_type)
    return known, suggested


def profile_for_device(catalog: ProfileCatalog, device_type: str) -> str:
    """The profile that describes ``device_type``: the one named after it."""
    if device_type in catalog.names():
        return device_type
    for name in catalog.names():
        doc = catalog.load(name)
        if doc.device_type is not None and doc.device_type.value == device_type:
            return name
    raise InitorchError(f"no profile describes device type '{device_type}'",
                        location=COMMAND_LINE, hint="pass --profile explicitly")


def normalise_device(catalog: ProfileCatalog, device: object) -> DeviceRef:
    """Normalise a device string or ``torch.device`` against the known types; an
    unknown one is answered with the type it is suggested for, else the closest."""
    known, suggested = _device_names(catalog)
    return parse_device(device, known, suggested)


def compose_selection(catalog: ProfileCatalog, refs: Sequence[str], device: DeviceRef | None,
                      overrides: Iterable[Override] = ()) -> ComposedProfile:
    """Compose ``refs`` (plus the device's profile when they set no device type)."""
    if device is None:
        return compose(catalog, refs, overrides)
    if refs:
        # Settings may name keys that only the device profile declares: check the
        # device type before applying them.
        composed = compose(catalog, refs)
        declared = composed.settings.get("device.type")
        if declared is not None and declared.value != device.type:
            raise ConflictError(
                "--device conflicts with the profile",
                problems=(Problem(
                    f"--device {device} conflicts with profile '{declared.source}', which sets "
                    f"device.type '{declared.value}'", declared.location,
                    "drop --device, or choose a profile for that device"),),
            )
        if declared is not None:
            return with_overrides(composed, overrides)
    return compose(catalog, [profile_for_device(catalog, device.type), *refs], overrides)
