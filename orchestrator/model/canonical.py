"""How a registered step is written in the plan fingerprint's canonical JSON.

The fingerprint (:mod:`initorch.resolution.fingerprint`) hashes ``json.dumps(...,
sort_keys=True, separators=(",", ":"), default=repr)`` of the plan.  Building each
step's dicts and encoding them cost more than ordering the whole graph, so a step's
part is written here directly, field by field in sorted key order, and the
registry writes it once, when it registers the step (:func:`encode_step`): a plan
then only writes the wave in, and a step that profiles changed reuses the text of
its declaration.  Every value that is not a plain string, whole number, finite
float, boolean or ``None`` goes through ``json.dumps`` itself, so the bytes are the
canonical document's; ``tests/unit/resolution/test_fingerprint.py`` checks that
against the dicts for every built-in profile and for generated steps.
"""

from __future__ import annotations

import dataclasses
import json
import math
from functools import partial
from json.encoder import encode_basestring_ascii
from typing import Any

from initorch.model.settings import SettingSpec
from initorch.model.step import Step

canonical_json = partial(json.dumps, sort_keys=True, separators=(",", ":"), default=repr)
"""The canonical encoding the fingerprint hashes."""


def qualified_name(value: object) -> str | None:
    """``module:qualname`` of a function or class (how a declaration names code)."""
    if value is None:
        return None
    module = getattr(value, "__module__", None) or type(value).__module__
    name = getattr(value, "__qualname__", None) or type(value).__qualname__
    return f"{module}:{name}"


def spec_json(spec: SettingSpec) -> dict[str, Any]:
    """A setting's declaration as JSON (everything but where it was declared and its
    environment reader, code that the value's origin already names)."""
    return {name.name: _listed(getattr(spec, name.name))
            for name in dataclasses.fields(spec)
            if name.name not in ("defined_at", "from_environment")}


def _listed(value: Any) -> Any:
    return list(value) if isinstance(value, tuple) else value


def json_value(value: Any) -> str:
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


def encode_step(declared: Step) -> tuple[bytes, bytes, int, int]:
    """Encode ``declared`` once, and keep it on the (frozen) step: the planned step it
    makes unchanged, up to the wave and after it, and where its declaration lies in
    the first part (what a changed step writes too)."""
    shared = _shared(declared)
    declaration = _declaration(declared, shared)
    head, tail = effective_parts(declared, declaration, shared)
    start = head.index(_DECLARED) + len(_DECLARED)
    encoded = (head.encode(), tail.encode(), start, start + len(declaration))
    object.__setattr__(declared, "_canonical", encoded)
    return encoded


_DECLARED = ',"declared":'


def effective_parts(step: Step, declaration: str, shared: tuple[str, ...] | None = None
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
    retry_on = (",".join(json_value(qualified_name(error)) for error in step.retry_on)
                if step.retry_on else "")
    settings = ",".join(canonical_json(spec_json(spec)) for spec in step.settings)
    teardown = "null" if step.teardown is None else json_value(qualified_name(step.teardown))
    backoff = step.retry_backoff
    backoff_json = "0.5" if backoff == 0.5 and type(backoff) is float else json_value(backoff)
    return (
        f'{{"action":{json_value(qualified_name(step.action))},'
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
        "false" if barrier is False else json_value(barrier),
        "false" if binds is False else json_value(binds),
        "false" if bound is False else json_value(bound),
        "false" if job_store is False else json_value(job_store),
        _names(requires) if requires else "[]",
        "0" if retries == 0 and type(retries) is int else json_value(retries),
        "null" if timeout is None else json_value(timeout),
        _names(wants) if wants else "[]",
        "null" if step.when is None else json_value(step.when),
    )
