"""The plan fingerprint: sha256 of a canonical JSON of everything that decides what runs.

The canonical document is ``json.dumps(canonical, sort_keys=True,
separators=(",", ":"), default=repr)`` of the profiles, the device, the settings
the planned steps can read (:func:`~initorch.resolution.plan.read_settings`: not
those only an unplanned plugin's step declares), the environment, every planned
step (its wave, its effective fields from
:func:`~initorch.resolution.plan.step_fields` and its declaration in code from
:func:`~initorch.resolution.plan.declaration`) and the skipped steps' names.

Building those dicts and encoding them cost more than ordering the whole graph,
so the steps' part is written here directly, field by field in sorted key order,
and fed to the hash a few thousand steps at a time (a plan of 100k steps never
holds its whole document).  A registered step's part is written once, on its
first plan, and kept on the frozen :class:`~initorch.model.step.Step`: a step
planned as declared is then its cached text with the wave written in, and a step
that profiles changed reuses the text of its declaration.  Every value that is
not a plain string, whole number, finite float, boolean or ``None`` goes through
``json.dumps`` itself, so the bytes are the canonical document's;
``tests/test_fingerprint.py`` checks that against the dicts for every built-in
profile and for generated steps, planned once and again.
"""

from __future__ import annotations

import hashlib
import json
import math
from collections.abc import Mapping
from functools import partial
from json.encoder import encode_basestring_ascii
from typing import Any

from initorch.loading.document import EnvEntry, Setting
from initorch.model.devices import DeviceRef
from initorch.model.step import Step
from initorch.resolution.plan import (
    PlannedStep,
    SkippedStep,
    env_values,
    qualified_name,
    read_settings,
    spec_json,
)

canonical_json = partial(json.dumps, sort_keys=True, separators=(",", ":"), default=repr)
"""The canonical encoding the fingerprint hashes."""


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
        encoded = declared._canonical or _encode(declared)
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


def _value(value: Any) -> str:
    """One value as :data:`canonical_json` writes it."""
    if value is None:
        return "null"
    if value is True:
        return "true"
    if value is False:
        return "false"
    kind = type(value)
    if kind is str:
        return encode_basestring_ascii(value)
    if kind is int:
        return int.__repr__(value)
    if kind is float and math.isfinite(value):
        return float.__repr__(value)
    return canonical_json(value)


def _names(names: tuple[str, ...]) -> str:
    """A tuple of step names as a JSON list.  Names are ASCII identifiers (see
    :data:`~initorch.model.names.STEP_NAME`), which JSON writes as they are; anything
    else is encoded."""
    if not names:
        return "[]"
    joined = '","'.join(names)
    if joined.isascii() and all(map(str.isidentifier, names)):
        return '["' + joined + '"]'
    return "[" + ",".join(map(encode_basestring_ascii, names)) + "]"


def _planned(planned: PlannedStep, encoded: tuple[bytes, bytes, int, int]) -> bytes:
    """``{"wave", "name", step_fields(step)..., "declared": declaration(...)}``
    (ASCII: every string is written with JSON's escapes, as ``json.dumps`` does),
    given its declaration's cached ``encoded``.

    A step planned as it was declared (the usual case) is the cached encoding with
    the wave written in; a step that profiles changed writes its effective fields
    here, around its declaration's cached encoding."""
    head, tail, start, end = encoded
    wave = planned.wave
    wave_json = b"%d" % wave if type(wave) is int else _value(wave).encode()
    if planned.step is planned.declared:
        return head + wave_json + tail
    before, after = _effective(planned.step, head[start:end].decode())
    return before.encode() + wave_json + after.encode()


def _encode(declared: Step) -> tuple[bytes, bytes, int, int]:
    """Encode ``declared`` once, and keep it on the (frozen) step: the planned step it
    makes unchanged, up to the wave and after it, and where its declaration lies in
    the first part (what a changed step writes too)."""
    shared = _shared(declared)
    declaration = _declaration(declared, shared)
    head, tail = _effective(declared, declaration, shared)
    start = head.index(_DECLARED) + len(_DECLARED)
    encoded = (head.encode(), tail.encode(), start, start + len(declaration))
    object.__setattr__(declared, "_canonical", encoded)
    return encoded


_DECLARED = ',"declared":'


def _effective(step: Step, declaration: str, shared: tuple[str, ...] | None = None
               ) -> tuple[str, str]:
    """A planned step's encoding (effective fields and ``declaration``), cut at its wave."""
    after, before, barrier, binds, bound, job_store, requires, retries, timeout, wants, \
        when = shared or _shared(step)
    keys = (",".join(encode_basestring_ascii(s.key) for s in step.settings)
            if step.settings else "")
    return (
        f'{{"after":{after},"barrier":{barrier},"before":{before},"binds_device":{binds},'
        f'"declared":{declaration},'
        f'"device_bound":{bound},"job_store":{job_store},"name":{_names((step.name,))[1:-1]},'
        f'"requires":{requires},"retries":{retries},"settings":[{keys}],'
        f'"teardown":{"false" if step.teardown is None else "true"},"timeout":{timeout},'
        f'"wants":{wants},"wave":',
        f',"when":{when}}}',
    )


def _declaration(step: Step, shared: tuple[str, ...]) -> str:
    """:func:`~initorch.resolution.plan.declaration` of ``step``."""
    after, before, barrier, binds, bound, job_store, requires, retries, timeout, wants, \
        when = shared
    retry_on = (",".join(_value(qualified_name(error)) for error in step.retry_on)
                if step.retry_on else "")
    settings = ",".join(canonical_json(spec_json(spec)) for spec in step.settings)
    teardown = "null" if step.teardown is None else _value(qualified_name(step.teardown))
    backoff = step.retry_backoff
    backoff_json = "0.5" if backoff == 0.5 and type(backoff) is float else _value(backoff)
    return (
        f'{{"action":{_value(qualified_name(step.action))},'
        f'"after":{after},"barrier":{barrier},"before":{before},"binds_device":{binds},'
        f'"device_bound":{bound},"job_store":{job_store},"requires":{requires},'
        f'"retries":{retries},'
        f'"retry_backoff":{backoff_json},'
        f'"retry_on":[{retry_on}],"settings":[{settings}],"teardown":{teardown},'
        f'"timeout":{timeout},'
        f'"wanted_by":{_names(step.wanted_by) if step.wanted_by else "[]"},'
        f'"wants":{wants},"when":{when}}}'
    )


def _shared(step: Step) -> tuple[str, ...]:
    """The fields both the effective step and its declaration show, encoded."""
    after, before, requires, wants = step.after, step.before, step.requires, step.wants
    binds, bound, retries, timeout = (step.binds_device, step.device_bound, step.retries,
                                      step.timeout)
    barrier, job_store = step.barrier, step.job_store
    return (
        _names(after) if after else "[]",
        _names(before) if before else "[]",
        "false" if barrier is False else _value(barrier),
        "false" if binds is False else _value(binds),
        "false" if bound is False else _value(bound),
        "false" if job_store is False else _value(job_store),
        _names(requires) if requires else "[]",
        "0" if retries == 0 and type(retries) is int else _value(retries),
        "null" if timeout is None else _value(timeout),
        _names(wants) if wants else "[]",
        "null" if step.when is None else _value(step.when),
    )
