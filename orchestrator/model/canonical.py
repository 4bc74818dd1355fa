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

Which fields are written, and how, comes from the step's field table
(:data:`~initorch.model.step.STEP_FIELDS`): the fields it marks ``shown`` make the
effective step (:func:`step_fields`, also what ``plan --json`` shows) and those it
marks ``declared`` the declaration (:func:`declaration`); a field's kind decides how
its value is written.
"""

from __future__ import annotations

import dataclasses
import json
import math
from collections.abc import Callable
from functools import partial
from json.encoder import encode_basestring_ascii
from operator import add, attrgetter
from typing import Any

from initorch.model.settings import SettingSpec
from initorch.model.step import FieldKind, Step, StepField, fields_for

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
    """A setting's declaration as JSON (everything but where it was declared, its
    environment reader, code that the value's origin already names, and the
    implementations its choices name, code that the choices already name)."""
    return {name.name: _listed(getattr(spec, name.name))
            for name in dataclasses.fields(spec)
            if name.name not in ("defined_at", "from_environment", "implementations")}


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


def _code_names(values: tuple[object, ...]) -> list[str | None]:
    return [qualified_name(value) for value in values]


def _keys(specs: tuple[SettingSpec, ...]) -> list[str]:
    return [spec.key for spec in specs]


def _specs(specs: tuple[SettingSpec, ...]) -> list[dict[str, Any]]:
    return [spec_json(spec) for spec in specs]


def _present(value: object) -> bool:
    return value is not None


# How each kind of field is written as JSON: in the effective step (``shown``) and in
# the declaration (``declared``).  Any kind not listed is written as it is.
_SHOWN_JSON: dict[FieldKind, Callable[[Any], Any]] = {
    "names": list, "code": _present, "settings": _keys}
_DECLARED_JSON: dict[FieldKind, Callable[[Any], Any]] = {
    "names": list, "code": qualified_name, "codes": _code_names, "settings": _specs}
# The same as canonical JSON text, written directly where that is faster than
# ``json.dumps``; every other kind is :func:`json_value` of its JSON.
_SHOWN_TEXT: dict[FieldKind, Callable[[Any], str]] = {
    "names": _names,
    "code": lambda value: "false" if value is None else "true",
    "settings": lambda specs: "[" + ",".join(encode_basestring_ascii(key)
                                             for key in _keys(specs)) + "]",
}
_DECLARED_TEXT: dict[FieldKind, Callable[[Any], str]] = {
    "names": _names,
    "codes": lambda values: "[" + ",".join(map(json_value, _code_names(values))) + "]",
    "settings": lambda specs: "[" + ",".join(canonical_json(spec_json(spec))
                                             for spec in specs) + "]",
}
_SHOWN = fields_for("shown")
_DECLARED = fields_for("declared")
_Writer = Callable[[Any], str]


def _same(value: Any) -> Any:
    return value


def step_fields(step: Step) -> dict[str, Any]:
    """A step's effective fields as JSON: what ``plan --json`` shows for each step (the
    fields :data:`~initorch.model.step.STEP_FIELDS` marks ``shown``)."""
    return {row.name: _SHOWN_JSON.get(row.kind, _same)(getattr(step, row.name))
            for row in _SHOWN}


def declaration(step: Step) -> dict[str, Any]:
    """A registered step's declaration as JSON (the fields marked ``declared``): every
    field its code sets, with the action, the teardown and the transient errors by
    qualified name, and the settings it reads in full (kind, default, choices, bounds)."""
    return {row.name: _DECLARED_JSON.get(row.kind, _same)(getattr(step, row.name))
            for row in _DECLARED}


def _writer(row: StepField, text: dict[FieldKind, _Writer],
            as_json: dict[FieldKind, Callable[[Any], Any]]) -> _Writer:
    """How ``row``'s value is written: directly, or as :func:`json_value` of its JSON."""
    write = text.get(row.kind)
    if write is not None:
        return write
    convert = as_json.get(row.kind)
    return json_value if convert is None else (lambda value: json_value(convert(value)))


# Canonical JSON sorts keys, and the keys are known here: each part is written as its
# fields' texts, in sorted key order, each after its ``"key":`` (few calls per step, no
# sort at run time).
_SHOWN_ROWS = sorted(_SHOWN, key=lambda row: row.name)
_DECLARED_ROWS = sorted(_DECLARED, key=lambda row: row.name)
_SHOWN_VALUES = attrgetter(*(row.name for row in _SHOWN_ROWS))
_SHOWN_WRITE = tuple(_writer(row, _SHOWN_TEXT, _SHOWN_JSON) for row in _SHOWN_ROWS)
_DECLARED_VALUES = attrgetter(*(row.name for row in _DECLARED_ROWS))
_DECLARED_WRITE = tuple(_writer(row, _DECLARED_TEXT, _DECLARED_JSON) for row in _DECLARED_ROWS)
_DECLARED_KEYS = tuple(encode_basestring_ascii(row.name) + ":" for row in _DECLARED_ROWS)
# For each effective field, the index of the declaration's field that has the same
# text (the same field, written alike), or None: encode_step writes such a text once.
_DECLARED_AT = {(row.name, write): index for index, (row, write) in enumerate(
    zip(_DECLARED_ROWS, _DECLARED_WRITE, strict=True))}
_ALIKE = tuple(_DECLARED_AT.get((row.name, write))
               for row, write in zip(_SHOWN_ROWS, _SHOWN_WRITE, strict=True))
# A planned step's own keys beside its effective fields (its wave is written by the plan).
_PLANNED = sorted((*(row.name for row in _SHOWN_ROWS), "declared", "name", "wave"))
if len(set(_PLANNED)) != len(_PLANNED):
    raise AssertionError("a step field is named like a planned step's own key")
_WAVE = _PLANNED.index("wave")
_NAME, _DECLARATION = _PLANNED.index("name"), _PLANNED.index("declared")
_BEFORE_WAVE = tuple(("," if i else "{") + encode_basestring_ascii(key) + ":"
                     for i, key in enumerate(_PLANNED[:_WAVE]))
_AFTER_WAVE = tuple("," + encode_basestring_ascii(key) + ":" for key in _PLANNED[_WAVE + 1:])


def encode_step(declared: Step) -> tuple[bytes, bytes, int, int]:
    """Encode ``declared`` once, and keep it on the (frozen) step: the planned step it
    makes unchanged, up to the wave and after it, and where its declaration lies in
    the first part (what a changed step writes too)."""
    texts = [write(value) for write, value in zip(
        _DECLARED_WRITE, _DECLARED_VALUES(declared), strict=True)]
    declaration_text = "{" + ",".join(map(add, _DECLARED_KEYS, texts)) + "}"
    shown = [write(value) if alike is None else texts[alike] for alike, write, value in zip(
        _ALIKE, _SHOWN_WRITE, _SHOWN_VALUES(declared), strict=True)]
    head, tail = _planned_parts(declared, declaration_text, shown)
    start = head.index(_DECLARED_KEY) + len(_DECLARED_KEY)
    encoded = (head.encode(), tail.encode(), start, start + len(declaration_text))
    object.__setattr__(declared, "_canonical", encoded)
    return encoded


_DECLARED_KEY = '"declared":'


def effective_parts(step: Step, declaration: str) -> tuple[str, str]:
    """A planned step's encoding (its effective fields, name and ``declaration``), cut
    at its wave: the text before the wave's value and the text after it."""
    return _planned_parts(step, declaration, [write(value) for write, value in zip(
        _SHOWN_WRITE, _SHOWN_VALUES(step), strict=True)])


def _planned_parts(step: Step, declaration: str, shown: list[str]) -> tuple[str, str]:
    """:func:`effective_parts`, given the texts of the effective fields (``shown``)."""
    for index, text in sorted([(_NAME, json_value(step.name)), (_DECLARATION, declaration)]):
        shown.insert(index, text)
    return ("".join(map(add, _BEFORE_WAVE, shown[:_WAVE])) + ',"wave":',
            "".join(map(add, _AFTER_WAVE, shown[_WAVE:])) + "}")
