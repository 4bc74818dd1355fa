"""The plan fingerprint: sha256 of a canonical JSON of everything that decides what runs.

The canonical document is ``json.dumps(canonical, sort_keys=True,
separators=(",", ":"), default=repr)`` of the profiles, the device, the settings
the planned steps can read (:func:`~initorch.resolution.plan.read_settings`: not
those only an unplanned plugin's step declares), the environment, every planned
step (its wave, its effective fields from
:func:`~initorch.model.canonical.step_fields` and its declaration in code from
:func:`~initorch.model.canonical.declaration`) and the skipped steps' names.

Each registered step's part is written once, as it is registered, and kept on the step
(:func:`~initorch.model.canonical.encode_step`); here a step planned as declared
is that text with the wave written in, a step that profiles changed writes its
effective fields around its declaration's text, and the parts are fed to the hash
a few thousand steps at a time (a plan of 100k steps never holds its whole
document).
"""

from __future__ import annotations

import hashlib
from collections.abc import Mapping

from initorch.loading.document import EnvEntry, Setting
from initorch.model.canonical import (
    canonical_json,
    effective_parts,
    encode_step,
    json_value,
)
from initorch.model.devices import DeviceRef
from initorch.resolution.plan import PlannedStep, SkippedStep, env_values, read_settings


def fingerprint(
    profiles: tuple[str, ...],
    device: DeviceRef,
    settings: Mapping[str, Setting],
    steps: tuple[PlannedStep, ...],
    skipped: tuple[SkippedStep, ...],
    env: Mapping[str, EnvEntry],
) -> str:
    """sha256 of everything that determines what runs, independent of file paths.

    Edge reasons are left out: they explain the order, they do not change it.
    """
    head = canonical_json({
        "profiles": list(profiles),
        "device": [device.type, device.index],
        "settings": {key: s.value for key, s in sorted(read_settings(settings, steps).items())},
        "env": dict(sorted(env_values(env).items())),
        "skipped": sorted(s.name for s in skipped),
    })
    digest = hashlib.sha256()
    # "steps" sorts after every other key: the head without its closing brace, then it.
    digest.update(head[:-1].encode())
    digest.update(b',"steps":[')
    # The parts of a few hundred steps are joined and hashed at once: few calls, one
    # copy of each part, and a small part of the document in memory at a time.
    parts: list[bytes] = []
    separator = b""
    for planned in steps:
        declared = planned.declared
        encoded = declared._canonical or encode_step(declared)
        wave = planned.wave
        if planned.step is declared and type(wave) is int:  # the usual case
            parts += (separator, encoded[0], b"%d" % wave, encoded[1])
        else:
            parts += (separator, _planned(planned, encoded))
        separator = b","
        if len(parts) >= _PARTS_PER_UPDATE:
            digest.update(b"".join(parts))
            parts.clear()
    digest.update(b"".join(parts))
    digest.update(b"]}")
    return digest.hexdigest()


_PARTS_PER_UPDATE = 1024


def _planned(planned: PlannedStep, encoded: tuple[bytes, bytes, int, int]) -> bytes:
    """``{"wave", "name", step_fields(step)..., "declared": declaration(...)}``
    (ASCII: every string is written with JSON's escapes, as ``json.dumps`` does),
    given its declaration's cached ``encoded``.

    A step planned as it was declared (the usual case) is the cached encoding with
    the wave written in; a step that profiles changed writes its effective fields
    here, around its declaration's cached encoding."""
    head, tail, start, end = encoded
    wave = planned.wave
    wave_json = b"%d" % wave if type(wave) is int else json_value(wave).encode()
    if planned.step is planned.declared:
        return head + wave_json + tail
    before, after = effective_parts(planned.step, head[start:end].decode())
    return before.encode() + wave_json + after.encode()


