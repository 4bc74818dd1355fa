"""Device strings, normalised in exactly one place.

``"musa:0"``, ``"NPU:3"``, ``"cuda"`` and a ``torch.device`` all become a
:class:`DeviceRef` ``(type, index)``.  The set of known types is not written
here: it is whatever the available profiles declare (``device.type`` plus
``device.aliases``), so the core stays ignorant of any particular vendor.  An
unknown type is an error that lists the known ones; there is deliberately no
fallback, because falling back to another vendor's code path is exactly how the
MUSA host-pool crash happened.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from typing import Protocol, runtime_checkable

from initorch.errors import DeviceError
from initorch.records import record
from initorch.suggest import closest

MAX_INDEX_DIGITS = 9
"""A device index is small; a 5,000-digit one is refused before ``int()`` sees it."""
_DEVICE_STRING = re.compile(r"^\s*([A-Za-z_][A-Za-z0-9_]*)\s*(?::\s*(\d+)\s*)?$")


@runtime_checkable
class _TorchDeviceLike(Protocol):
    """What we read from a ``torch.device`` without importing torch."""

    @property
    def type(self) -> str: ...

    @property
    def index(self) -> int | None: ...


@record
class DeviceRef:
    """A normalised device: canonical lower-case ``type`` and optional ``index``."""

    type: str
    index: int | None = None

    def __str__(self) -> str:
        return self.type if self.index is None else f"{self.type}:{self.index}"


def parse_device(value: object, known: Mapping[str, str],
                 suggested: Mapping[str, str] | None = None) -> DeviceRef:
    """Normalise ``value`` against ``known`` (a map from type or alias to canonical type).

    Accepts ``"type"``, ``"type:index"`` (any case, surrounding blanks ignored),
    a :class:`DeviceRef`, or any object with ``.type`` and ``.index`` such as
    ``torch.device``.  An unknown type is refused; the error suggests the type that
    ``suggested`` (vague name to canonical type, as profiles declare it) gives for
    it, else the closest known spelling.
    """
    if isinstance(value, DeviceRef):
        raw_type, index = value.type, value.index
    elif isinstance(value, str):
        match = _DEVICE_STRING.match(value)
        if not match:
            raise DeviceError(
                f"malformed device string {value!r}",
                hint="write it as TYPE or TYPE:INDEX, e.g. 'npu:0'",
            )
        raw_type, digits = match.group(1), match.group(2)
        if digits is not None and len(digits) > MAX_INDEX_DIGITS:
            raise DeviceError(
                f"device index of {raw_type} has {len(digits)} digits; an index has at most "
                f"{MAX_INDEX_DIGITS}", hint="write it as TYPE:INDEX, e.g. 'npu:0'")
        index = int(digits) if digits is not None else None
    elif isinstance(value, _TorchDeviceLike):
        raw_type, index = str(value.type), value.index
    else:
        raise DeviceError(
            f"cannot read a device from {type(value).__name__} {value!r}",
            hint="pass a string like 'cuda:0' or a torch.device",
        )
    canonical = known.get(raw_type.lower())
    if canonical is None:
        names = sorted(set(known.values()))
        guess = (suggested or {}).get(raw_type.lower()) or closest(raw_type.lower(), known)
        hint = f"did you mean '{guess}'? " if guess else ""
        raise DeviceError(
            f"unknown device type '{raw_type}'; known types: {', '.join(names)}",
            hint=f"{hint}a profile declares each type with device.type (and device.aliases)",
        )
    return DeviceRef(canonical, index)
