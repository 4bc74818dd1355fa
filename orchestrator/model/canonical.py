"""How a registered step is written in the plan fingerprint's canonical JSON.

The fingerprint (:mod:`initorch.resolution.fingerprint`) hashes ``json.dumps(...,
sort_keys=True, separators=(",", ":"), default=repr)`` of the plan.  Building each
step's dicts and encoding them cost more than ordering the whole graph, so a step's
part is written here directly, field by field in sorted key order, once per step,
when the step is registered (:func:`encode_step`): a plan then only writes
the wave in, and a step that profiles changed reuses the text of its declaration.
Every value that is not a plain string, whole number, finite float, boolean or
``None`` goes through ``json.dumps`` itself, so the bytes are the canonical
document's; ``tests/unit/resolution/test_fingerprint.py`` checks that against the
dicts for every built-in profile and for generated steps.

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
from collections.abc import Callable, Mapping
from functools import partial
from itertools import compress
from json.encoder import encode_basestring_ascii
from operator import attrgetter, is_not, itemgetter
from typing import Any, NamedTuple

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


# Canonical JSON sorts keys, and the keys are known here: each part is one format,
# the ``"key":%s`` of its fields in sorted key order, filled with their texts (a few
# calls per step, no sort at run time).


def _getter(names: list[str]) -> Callable[[Any], tuple[Any, ...]]:
    """``attrgetter`` of ``names`` that returns a tuple for one name too."""
    get = attrgetter(*names)
    return get if len(names) > 1 else lambda value: (get(value),)


def _picker(positions: list[int]) -> Callable[[list[str]], tuple[str, ...]]:
    """``itemgetter`` of ``positions`` that returns a tuple for one position, or none,
    too."""
    if not positions:
        return lambda _texts: ()
    pick = itemgetter(*positions)
    return pick if len(positions) > 1 else lambda texts: (pick(texts),)


class _Rows(NamedTuple):
    """Some rows of the field table and how each is written: :func:`_texts` of a step's
    values writes only those that are not their row's default object (most of a
    step's fields, most of the time); the defaults' texts are written once, here."""

    names: list[str]
    values: Callable[[Step], tuple[Any, ...]]
    writers: tuple[_Writer, ...]
    defaults: tuple[Any, ...]
    default_texts: tuple[str | None, ...]  # None: a field without a default
    indexes: range

    @classmethod
    def of(cls, rows: list[StepField], writers: tuple[_Writer, ...]) -> _Rows:
        defaults = tuple(row.default for row in rows)
        return cls([row.name for row in rows], _getter([row.name for row in rows]), writers,
                   defaults, tuple(None if default is dataclasses.MISSING else write(default)
                                   for default, write in zip(defaults, writers, strict=True)),
                   range(len(rows)))

    def changed(self, values: tuple[Any, ...]) -> tuple[int, ...]:
        """The indexes of ``values`` (a step's, from :attr:`values`) that are not their
        rows' defaults: the texts to write."""
        return tuple(compress(self.indexes, map(is_not, values, self.defaults)))

    def texts(self, step: Step) -> list[str]:
        """The texts of ``step``'s values of these rows, in their order."""
        values = self.values(step)
        texts: list[Any] = list(self.default_texts)
        for index in self.changed(values):
            texts[index] = self.writers[index](values[index])
        return texts


def _sorted(rows: tuple[StepField, ...]) -> list[StepField]:
    return sorted(rows, key=lambda row: row.name)


_SHOWN_WRITE = {row.name: _writer(row, _SHOWN_TEXT, _SHOWN_JSON) for row in _SHOWN}
_DECLARED_ROWS = _Rows.of(_sorted(_DECLARED), tuple(
    _writer(row, _DECLARED_TEXT, _DECLARED_JSON) for row in _sorted(_DECLARED)))
_SHOWN_ROWS = _Rows.of(_sorted(_SHOWN), tuple(_SHOWN_WRITE[row.name] for row in _sorted(_SHOWN)))
# The effective fields whose text differs from the declaration's (the declaration names
# the teardown, the effective step says whether it has one): encode_step writes those
# on their own, and takes the rest from the declaration's texts.
_ALIKE = {row.name: index for index, (row, write) in enumerate(zip(
    _sorted(_DECLARED), _DECLARED_ROWS.writers, strict=True))
    if row.name in _SHOWN_WRITE and _SHOWN_WRITE[row.name] is write}
_OWN_ROWS = _Rows.of([row for row in _sorted(_SHOWN) if row.name not in _ALIKE],
                     tuple(_SHOWN_WRITE[row.name] for row in _sorted(_SHOWN)
                           if row.name not in _ALIKE))
_DECLARED_FORMAT = "{" + ",".join(encode_basestring_ascii(name) + ":%s"
                                  for name in _DECLARED_ROWS.names) + "}"
# A planned step's own keys beside its effective fields (its wave is written by the plan).
_PLANNED = sorted((*_SHOWN_ROWS.names, "declared", "name", "wave"))
if len(set(_PLANNED)) != len(_PLANNED):
    raise AssertionError("a step field is named like a planned step's own key")
_WAVE = _PLANNED.index("wave")
_BEFORE_WAVE_FORMAT = "{" + ",".join(encode_basestring_ascii(key) + ":%s"
                                     for key in _PLANNED[:_WAVE]) + ',"wave":'
_AFTER_WAVE_FORMAT = "".join("," + encode_basestring_ascii(key) + ":%s"
                             for key in _PLANNED[_WAVE + 1:]) + "}"


def _layout(position: Mapping[str, int], after: int
            ) -> tuple[Callable[[list[str]], tuple[str, ...]], ...]:
    """Which texts fill the two formats, given where each effective field's text lies
    in a list that ends with the name's and the declaration's (from ``after``)."""
    where = {**position, "name": after, "declared": after + 1}
    return (_picker([where[key] for key in _PLANNED[:_WAVE]]),
            _picker([where[key] for key in _PLANNED[_WAVE + 1:]]))


# The texts encode_step writes: the declaration's, the effective fields' own, then the
# name's and the declaration; effective_parts: the effective fields', then the same two.
_ENCODED = _layout({**_ALIKE, **{name: len(_DECLARED_ROWS.names) + index
                                 for index, name in enumerate(_OWN_ROWS.names)}},
                   len(_DECLARED_ROWS.names) + len(_OWN_ROWS.names))
_EFFECTIVE = _layout({name: index for index, name in enumerate(_SHOWN_ROWS.names)},
                     len(_SHOWN_ROWS.names))
# The fields encode_step reads: the declaration's, then the effective fields' own.
_ENCODED_ROWS = _Rows.of([*_sorted(_DECLARED), *(row for row in _sorted(_SHOWN)
                                                   if row.name not in _ALIKE)],
                         (*_DECLARED_ROWS.writers, *_OWN_ROWS.writers))


class _Template(NamedTuple):
    """How encode_step writes every step whose fields that differ from their defaults
    are the same ones (``given``, indexes of :data:`_ENCODED_ROWS`): three formats
    with the defaults' texts written in, and a ``%s`` for each given field's text
    (in the declaration and in the planned step), the name's and the declaration's;
    each ``*_args`` picks those texts, in the format's order, from the given
    fields' texts followed by the name's and the declaration's."""

    given: tuple[int, ...]
    declaration: str
    head: str
    tail: str
    declaration_args: Callable[[list[str]], tuple[str, ...]]
    head_args: Callable[[list[str]], tuple[str, ...]]
    tail_args: Callable[[list[str]], tuple[str, ...]]


_TEMPLATES: dict[tuple[int, ...], _Template] = {}
_SLOT = "\x00%d\x00"  # where a text goes while a template is made (JSON escapes NUL)


def _template(given: tuple[int, ...]) -> _Template:
    """The template of steps with ``given`` fields (kept: a plugin's steps are few
    shapes).  Made by writing the step with the defaults' texts (``%`` escaped) and a
    numbered slot for every other text, then turning the slots into ``%s``."""
    texts = [None if text is None else text.replace("%", "%%")
             for text in _ENCODED_ROWS.default_texts]
    for slot, index in enumerate(given):
        texts[index] = _SLOT % slot
    declaration = _DECLARED_FORMAT % tuple(texts[:len(_DECLARED_ROWS.names)])
    head, tail = _planned_parts(_SLOT % len(given), _SLOT % (len(given) + 1), texts, _ENCODED)
    (declared, declared_order), (before, before_order), (after, after_order) = (
        _slots_to_format(text) for text in (declaration, head, tail))
    template = _Template(given, declared, before, after, _picker(declared_order),
                         _picker(before_order), _picker(after_order))
    _TEMPLATES[given] = template
    return template


def _slots_to_format(text: str) -> tuple[str, list[int]]:
    """``text`` with each numbered slot a ``%s``, and the slots' numbers in order."""
    parts = text.split("\x00")
    return "%s".join(parts[0::2]), [int(number) for number in parts[1::2]]


def encode_step(declared: Step) -> tuple[bytes, bytes, int, int]:
    """Encode ``declared`` once, and keep it on the (frozen) step: the planned step it
    makes unchanged, up to the wave and after it, and where its declaration lies in
    the first part (what a changed step writes too).

    Only the fields that differ from their defaults are written per step, into the
    template of steps like it (:func:`_template`).  The registry calls it as it
    registers the step, so that a first plan costs what a later one does; the
    resolver calls it for a step that reached it otherwise."""
    values = _ENCODED_ROWS.values(declared)
    given = _ENCODED_ROWS.changed(values)
    template = _TEMPLATES.get(given) or _template(given)
    writers = _ENCODED_ROWS.writers
    texts = [writers[index](values[index]) for index in given]
    declaration = template.declaration % template.declaration_args(texts)
    texts.append(json_value(declared.name))
    texts.append(declaration)
    head = template.head % template.head_args(texts)
    start = head.index(_DECLARED_KEY) + len(_DECLARED_KEY)
    encoded = (head.encode(), (template.tail % template.tail_args(texts)).encode(),
               start, start + len(declaration))
    object.__setattr__(declared, "_canonical", encoded)
    return encoded


_DECLARED_KEY = '"declared":'


def effective_parts(step: Step, declaration: str) -> tuple[str, str]:
    """A planned step's encoding (its effective fields, name and ``declaration``), cut
    at its wave: the text before the wave's value and the text after it."""
    return _planned_parts(json_value(step.name), declaration, _SHOWN_ROWS.texts(step),
                          _EFFECTIVE)


def _planned_parts(name: str, declaration: str, texts: list[Any],
                   layout: tuple[Callable[[list[str]], tuple[str, ...]], ...]
                   ) -> tuple[str, str]:
    """The two parts of a planned step, from ``texts`` (its fields' as ``layout`` says)
    and the texts of its ``name`` and ``declaration``."""
    texts.append(name)
    texts.append(declaration)
    before, after = layout
    return _BEFORE_WAVE_FORMAT % before(texts), _AFTER_WAVE_FORMAT % after(texts)
