"""Typed settings: what a step reads, declared once, checked everywhere.

A step declares each setting it reads with :func:`setting` — a dotted key, a
kind, a default, a one-line description, and optionally allowed values and
bounds — in ``@step(settings=...)``.  The :class:`SettingCatalog` (one per
registry) collects the declarations; profile values, ``--set``, ``when:``
conditions, the JSON Schema and ``initorch settings`` are all checked against
it, so that a misspelt key or a value of the wrong kind is refused at plan time
with its ``file:line:col`` instead of failing seconds into a run.

The catalog starts with the two settings the profile format itself needs
(``device.type`` and ``device.aliases``, used to normalise device strings);
every other setting, ``device.*`` ones included, is declared by the steps that
read it, so the core knows nothing about any particular device.
"""

from __future__ import annotations

import dataclasses
import math
import re
import unicodedata
from collections.abc import Callable, Iterable, Iterator, Mapping
from dataclasses import field
from typing import Any, Literal

from initorch.errors import StepDefinitionError
from initorch.location import SourceLocation, caller_location
from initorch.model.names import KEY_SEGMENT, SETTING_KEY, name_problem
from initorch.records import record
from initorch.suggest import closest

SettingKind = Literal["bool", "int", "float", "str", "list[str]"]

_KINDS: dict[object, SettingKind] = {
    bool: "bool", int: "int", float: "float", str: "str", list[str]: "list[str]",
    "bool": "bool", "int": "int", "float": "float", "str": "str", "list[str]": "list[str]",
}
_KIND_WORDS: dict[SettingKind, str] = {
    "bool": "true or false", "int": "a whole number", "float": "a number",
    "str": "text", "list[str]": "a list of text",
}

# Bounds on any value, whatever its declaration says: beyond them a value is a
# mistake or an attack, and vendor code fails on it late and obscurely.
MAX_INT = 2**63 - 1
MAX_TEXT_LENGTH = 4096
MAX_LIST_LENGTH = 1024

# Characters that change how a terminal or an editor shows text (line breaks,
# escapes, bidirectional overrides): never part of a setting value.
_BIDI_CONTROLS = frozenset("\u061c\u200e\u200f\u2028\u2029\u202a\u202b\u202c\u202d\u202e"
                           "\u2066\u2067\u2068\u2069")
_BOOL_WORDS = frozenset({"true", "false", "yes", "no", "on", "off", "y", "n", "1", "0"})


def show_value(value: Any) -> str:
    """A value as YAML would write it (``true``, ``null``, ``.nan``), strings quoted."""
    if isinstance(value, bool):
        return "true" if value else "false"
    if value is None:
        return "null"
    if isinstance(value, float) and not math.isfinite(value):
        return ".nan" if math.isnan(value) else ("-.inf" if value < 0 else ".inf")
    if isinstance(value, (list, tuple)):
        return "[" + ", ".join(show_value(item) for item in value) + "]"
    if isinstance(value, int) and abs(value) > MAX_INT:
        return f"<a number of {_digits(value)} digits>"
    return repr(value)


def _digits(value: int) -> int:
    """About how many decimal digits ``value`` has, without str(), which is slow for
    huge numbers and refused past 4300 digits."""
    return int(abs(value).bit_length() * math.log10(2)) + 1


def _type_word(value: Any) -> str:
    if isinstance(value, bool):
        return f"the boolean {show_value(value)}"
    if isinstance(value, str):
        return f"the text {value!r}"
    if isinstance(value, (int, float)):
        return f"the number {show_value(value)}"
    if isinstance(value, list):
        return f"the list {show_value(value)}"
    return f"a {type(value).__name__} ({value!r})"


def _text_problem(text: str) -> str | None:
    for char in text:
        if unicodedata.category(char) == "Cc" or char in _BIDI_CONTROLS:
            return f"contains the control character U+{ord(char):04X}"
    if len(text) > MAX_TEXT_LENGTH:
        return f"is {len(text)} characters long (at most {MAX_TEXT_LENGTH})"
    return None


EnvironmentReader = Callable[[Mapping[str, str]], "tuple[Any, str] | None"]
"""Reads a setting from the process environment as another program would (SGLang's
variables): ``(value, variable)`` when the environment sets it, else ``None``; a
``ValueError`` says the variable's text cannot be read."""


@record
class SettingSpec:
    """One declared setting.  Build it with :func:`setting`.

    ``choices`` (empty: any value of the kind) may be extended by plugins through
    :meth:`SettingCatalog.extend_choices`.  A setting declared with a table of
    choices (``choices={name: implementation}``) also keeps ``implementations``,
    in the order of ``choices``: what a step gets for the value with
    ``ctx.implementation(key)`` (an allocator, a memory query), so that the names a
    profile may give and the code they select are one table, checked at plan
    time.  ``required`` settings have no default:
    a plan that runs a step declaring one must get its value from a profile (or
    ``--set``).  ``nullable`` settings accept ``null``.  Bounds are inclusive
    except ``exclusive_minimum``; ``pattern`` must match a text value (or each item
    of a list) in full.
    """

    key: str
    kind: SettingKind
    description: str
    default: Any = None
    choices: tuple[Any, ...] = ()
    minimum: float | None = None
    exclusive_minimum: float | None = None
    maximum: float | None = None
    pattern: str | None = None
    nullable: bool = False
    required: bool = False
    defined_at: SourceLocation = field(default=SourceLocation("<unknown>"), compare=False)
    pattern_help: str | None = None
    """What ``pattern`` accepts, in words, for the error message (else the regex)."""
    from_environment: EnvironmentReader | None = field(default=None, compare=False)
    """Where the environment may give the value: over the profiles, under ``--set``."""
    implementations: tuple[Any, ...] = field(default=(), repr=False)
    """What each of ``choices`` names, position by position; empty: a plain list."""

    def implementation(self, value: Any) -> Any:
        """What ``value`` (one of ``choices``) names in this setting's table."""
        return self.implementations[self.choices.index(value)]

    def check(self, value: Any) -> str | None:
        """What is wrong with ``value`` for this setting, as one sentence naming the
        key; ``None`` when it is valid."""
        problem = self._problem(value)
        return None if problem is None else f"{self.key} {problem}"

    def normalise(self, value: Any) -> Any:
        """A valid ``value`` in its canonical form (``1.0`` -> ``1`` for whole
        numbers, ``120`` -> ``120.0`` for numbers, lists as lists)."""
        if value is None:
            return None
        if self.kind == "int":
            return int(value)
        if self.kind == "float":
            return float(value)
        if self.kind == "list[str]":
            return list(value)
        return value

    @property
    def default_value(self) -> Any:
        """The default in its canonical form (a fresh list for list settings)."""
        return self.normalise(self.default)

    def describe_kind(self) -> str:
        """``text, one of: a, b`` / ``a whole number >= 1`` / ``true or false``."""
        words = _KIND_WORDS[self.kind]
        if self.choices:
            words += ", one of: " + ", ".join(str(c) for c in self.choices)
        bounds = [f">= {_number(self.minimum)}" if self.minimum is not None else "",
                  f"> {_number(self.exclusive_minimum)}"
                  if self.exclusive_minimum is not None else "",
                  f"<= {_number(self.maximum)}" if self.maximum is not None else ""]
        bounded = " and ".join(b for b in bounds if b)
        nullable = " or null" if self.nullable else ""
        return f"{words}{' ' + bounded if bounded else ''}{nullable}"

    def _problem(self, value: Any) -> str | None:
        if value is None:
            if self.nullable:
                return None
            fix = "give it a value" if self.required or self.default is None \
                else f"omit it to use the default {show_value(self.default)}"
            return f"must not be null ({fix})"
        problem = self._kind_problem(value)
        if problem is not None:
            return problem
        return self._range_problem(self.normalise(value))

    def _kind_problem(self, value: Any) -> str | None:
        expected = f"must be {_KIND_WORDS[self.kind]}, got {_type_word(value)}"
        if self.kind == "bool":
            if isinstance(value, bool):
                return None
            if isinstance(value, str) and value.strip().lower() in _BOOL_WORDS:
                word = "true" if value.strip().lower() in {"true", "yes", "on", "y", "1"} \
                    else "false"
                return f"{expected} (write {word} without quotes: text is not a boolean)"
            return expected
        if self.kind in ("int", "float"):
            return self._number_problem(value, expected)
        if self.kind == "str":
            if not isinstance(value, str):
                quote = " (quote it to pass text)" if isinstance(value, (bool, int, float)) \
                    or type(value).__name__ in ("date", "datetime") else ""
                return f"{expected}{quote}"
            return self._text_value_problem(value)
        if not isinstance(value, (list, tuple)) or not all(isinstance(v, str) for v in value):
            return expected
        if len(value) > MAX_LIST_LENGTH:
            return f"has {len(value)} items (at most {MAX_LIST_LENGTH})"
        for position, item in enumerate(value, start=1):
            problem = self._text_value_problem(item)
            if problem is not None:
                return f"item {position}: {problem}"
        return None

    def _number_problem(self, value: Any, expected: str) -> str | None:
        if isinstance(value, str) and _looks_numeric(value):
            return _numeric_text_problem(value, expected)
        if isinstance(value, bool) or not isinstance(value, (int, float)):
            return expected
        if isinstance(value, float) and not math.isfinite(value):
            return f"must be a finite number, got {show_value(value)}"
        if self.kind == "int" and isinstance(value, float) and not value.is_integer():
            return expected
        if isinstance(value, int) and abs(value) > MAX_INT:
            return f"is too large: about {_digits(value)} digits (at most {MAX_INT})"
        return None

    def _text_value_problem(self, text: str) -> str | None:
        problem = _text_problem(text)
        if problem is not None:
            return f"value {text[:40]!r} {problem}"
        if self.pattern is not None and not re.fullmatch(self.pattern, text):
            return f"must be {self.pattern_help}, got {text!r}" if self.pattern_help \
                else f"must match {self.pattern}, got {text!r}"
        return None

    def _range_problem(self, value: Any) -> str | None:
        if self.kind in ("int", "float"):
            if self.minimum is not None and value < self.minimum:
                return f"must be >= {_number(self.minimum)}, got {show_value(value)}"
            if self.exclusive_minimum is not None and value <= self.exclusive_minimum:
                return f"must be > {_number(self.exclusive_minimum)}, got {show_value(value)}"
            if self.maximum is not None and value > self.maximum:
                return f"must be <= {_number(self.maximum)}, got {show_value(value)}"
        if self.choices and value not in self.choices:
            guess = closest(value, [str(c) for c in self.choices]) \
                if isinstance(value, str) else None
            hint = f" (did you mean '{guess}'?)" if guess else ""
            return (f"must be one of {', '.join(str(c) for c in self.choices)}, "
                    f"got {show_value(value)}{hint}")
        return None


def _number(value: float) -> str:
    return str(int(value)) if float(value).is_integer() else str(value)


def _looks_numeric(text: str) -> bool:
    try:
        float(text)
    except ValueError:
        return False
    return True


def _numeric_text_problem(text: str, expected: str) -> str:
    """Text that reads as a number: quoted, or YAML 1.1's exponent without a dot."""
    if not math.isfinite(float(text)):
        return f"must be a finite number, got the text {text!r}"
    if "e" in text.lower() and "." not in text:
        return (f"{expected} (YAML reads a number with an exponent but no decimal point "
                "as text: write 1.0e+3, not 1e3)")
    return f"{expected} (write the number without quotes)"


_NO_DEFAULT: Any = object()


def setting(
    key: str,
    kind: object,
    *,
    description: str,
    default: Any = _NO_DEFAULT,
    choices: Iterable[Any] | Mapping[Any, Any] = (),
    minimum: float | None = None,
    exclusive_minimum: float | None = None,
    maximum: float | None = None,
    pattern: str | None = None,
    pattern_help: str | None = None,
    nullable: bool = False,
    required: bool = False,
    from_environment: EnvironmentReader | None = None,
) -> SettingSpec:
    """Declare a setting.  ``kind`` is ``bool``, ``int``, ``float``, ``str`` or
    ``list[str]`` (the types, or their names).  A nullable setting defaults to
    ``None``; a required one has no default.  ``from_environment`` reads the value
    from a variable another program is configured by: it beats the profiles and
    loses to ``--set``, and its origin names the variable.  ``choices`` given as a
    mapping is a table: its keys are the allowed values, and a step reads what the
    value names with ``ctx.implementation(key)``.  Nothing else is validated here:
    the :class:`SettingCatalog` checks declarations once, when they are registered.

    >>> setting("hicache.host_pool_mb", int, default=64, minimum=1,
    ...         description="HiCache host KV pool size in MiB")
    """
    where = caller_location()
    try:
        resolved: SettingKind | None = _KINDS.get(kind)
    except TypeError:  # an unhashable kind
        resolved = None
    if resolved is None:
        raise StepDefinitionError(
            f"setting '{key}': kind {kind!r} is not supported", location=where,
            hint="use bool, int, float, str or list[str]")
    if default is _NO_DEFAULT:
        default = None
    elif isinstance(default, list):
        default = tuple(default)  # keep the frozen spec hashable
    table = choices if isinstance(choices, Mapping) else {}
    return SettingSpec(key, resolved, description, default, tuple(choices), minimum,
                       exclusive_minimum, maximum, pattern, nullable, required, where,
                       pattern_help, from_environment, tuple(table.values()))


@record
class Declaration:
    """Who declared a setting (``step set_device``, ``initorch core``, ...) and where."""

    by: str
    where: SourceLocation

    def __str__(self) -> str:
        return f"{self.by} at {self.where}"


CORE = "initorch core"
CORE_SETTINGS = (
    setting("device.type", str, nullable=True, pattern=KEY_SEGMENT.pattern,
            description="canonical device type, lower case (cpu, cuda, npu, ...); "
                        "only profiles set it"),
    setting("device.aliases", list[str], default=[], pattern=KEY_SEGMENT.pattern,
            description="other spellings that --device accepts for this type "
                        "(e.g. hip for rocm)"),
)
CORE_KEYS = frozenset(spec.key for spec in CORE_SETTINGS)


class SettingCatalog:
    """Every declared setting by key: the core ones, then the steps' and plugins'.

    The same key may be declared by several steps, identically; a different
    declaration is a :class:`StepDefinitionError` naming both places.
    ``provider`` names the plugin whose ``register`` function is running (the
    plugin loader sets it): free-standing declarations and extended choices are
    credited to it.
    """

    def __init__(self) -> None:
        self._declared: dict[str, SettingSpec] = {}
        self._effective: dict[str, SettingSpec] = {}
        self._by: dict[str, list[Declaration]] = {}
        self.provider: str | None = None
        for spec in CORE_SETTINGS:
            self.add(spec, by=CORE)

    def copy(self) -> SettingCatalog:
        """An independent catalog with the same declarations (the plugin loader's
        undo point)."""
        clone = SettingCatalog()
        clone._declared, clone._effective = dict(self._declared), dict(self._effective)
        clone._by = {key: list(by) for key, by in self._by.items()}
        clone.provider = self.provider
        return clone

    def add(self, spec: SettingSpec, *, by: str | None = None,
            where: SourceLocation | None = None) -> SettingSpec:
        """Declare one free-standing setting (read by conditions, say); ``by``
        names the declarer (default: the plugin being loaded).  Returns the
        effective spec."""
        self.add_all((spec,), by=by or self._plugin(), where=where or spec.defined_at)
        return self._effective[spec.key]

    def add_all(self, specs: Iterable[SettingSpec], *, by: str, where: SourceLocation) -> None:
        """Declare ``specs`` for one declarer (a step): all of them, or none when one
        is invalid or conflicts with an earlier declaration."""
        specs = tuple(specs)
        declaration = Declaration(by, where)
        seen: dict[str, SettingSpec] = {}
        for spec in specs:
            if not isinstance(spec, SettingSpec):
                raise StepDefinitionError(
                    f"{by}: settings entry {spec!r} is not a setting", location=where,
                    hint="declare each with initorch.setting(key, kind, description=...)")
            _validate(spec, declaration)
            if spec.key in seen:
                raise StepDefinitionError(f"{by} declares setting '{spec.key}' twice",
                                          location=where, hint="remove one of them")
            seen[spec.key] = spec
            self._check_conflicts(spec, declaration, seen)
        for spec in specs:
            if spec.key not in self._declared:
                self._declared[spec.key] = spec
                self._effective[spec.key] = spec
            self._by.setdefault(spec.key, []).append(declaration)

    def extend_choices(self, key: str, choices: Iterable[Any] | Mapping[Any, Any], *,
                       by: str | None = None) -> SettingSpec:
        """Allow more values for a setting that has a list of choices (a plugin's
        backend package or transport); ``by`` names who allows them (default: the
        plugin being loaded).  For a setting declared with a table (an allocator, a
        memory query), ``choices`` maps each new name to its implementation: one call
        both allows the name and provides what it selects.  A name the setting already
        has must name the same implementation.  Returns the effective spec."""
        spec = self._effective.get(key)
        where = caller_location()
        by = by or self._plugin()
        if spec is None:
            raise StepDefinitionError(f"{by} extends the choices of undeclared setting "
                                      f"'{key}'", location=where,
                                      hint=self._hint(key, "register the step first"))
        if not spec.choices:
            raise StepDefinitionError(f"{by} extends the choices of '{key}', which accepts "
                                      "any value of its kind", location=where,
                                      hint="only settings declared with choices= have a list")
        table = _extension(spec, choices, by, where)
        added = {name: code for name, code in table.items() if name not in spec.choices}
        unconstrained = dataclasses.replace(spec, choices=())
        for choice in added:
            problem = unconstrained.check(choice)
            if problem is not None:
                raise StepDefinitionError(f"{by}: choice {choice!r} is invalid: {problem}",
                                          location=where)
        implementations = spec.implementations + tuple(added.values()) \
            if spec.implementations else ()
        self._effective[key] = dataclasses.replace(
            spec, choices=spec.choices + tuple(added), implementations=implementations)
        return self._effective[key]

    def implementations(self, values: Mapping[str, Any]) -> dict[str, Any]:
        """What each of ``values`` (by key) names, for the settings declared with a
        table; a value that is not one of its choices (refused elsewhere) names
        nothing."""
        return {spec.key: spec.implementation(values[spec.key])
                for spec in self._effective.values()
                if spec.implementations and spec.key in values
                and values[spec.key] in spec.choices}

    def get(self, key: str) -> SettingSpec | None:
        """The effective declaration of ``key`` (choices extended), or ``None``."""
        return self._effective.get(key)

    def declarations(self, key: str) -> tuple[Declaration, ...]:
        """Every declarer of ``key``, in registration order."""
        return tuple(self._by.get(key, ()))

    def closest(self, key: str) -> str | None:
        """The declared key most like ``key`` (for did-you-mean)."""
        return closest(key, self._effective)

    def section(self, key: str) -> list[str]:
        """Declared keys below ``key`` when it is a section (``hicache``)."""
        return sorted(k for k in self._effective if k.startswith(key + "."))

    def __contains__(self, key: object) -> bool:
        return key in self._effective

    def __iter__(self) -> Iterator[SettingSpec]:
        return iter(sorted(self._effective.values(), key=lambda spec: spec.key))

    def __len__(self) -> int:
        return len(self._effective)

    def _plugin(self) -> str:
        return f"plugin {self.provider}" if self.provider else "code"

    def _hint(self, key: str, otherwise: str) -> str:
        guess = self.closest(key)
        return f"did you mean '{guess}'?" if guess else otherwise

    def _check_conflicts(self, spec: SettingSpec, declaration: Declaration,
                         seen: dict[str, SettingSpec]) -> None:
        existing = self._declared.get(spec.key)
        if existing is not None and existing != spec:
            first = self._by[spec.key][0]
            raise StepDefinitionError(
                f"setting '{spec.key}' is declared differently by {declaration.by} "
                f"({spec.defined_at}) and by {first} ({existing.defined_at})",
                location=declaration.where,
                hint="declare it once (a shared constant) and use it in both places")
        for other in (*self._declared, *seen):
            if other.startswith(spec.key + ".") or spec.key.startswith(other + "."):
                parent, child = sorted((other, spec.key), key=len)
                raise StepDefinitionError(
                    f"{declaration.by}: setting '{child}' lies below setting '{parent}'",
                    location=declaration.where,
                    hint="a key is either a value or a section of other keys, not both")


def _extension(spec: SettingSpec, choices: Iterable[Any] | Mapping[Any, Any], by: str,
               where: SourceLocation) -> dict[Any, Any]:
    """``choices`` as ``{name: implementation}`` (``None`` for a plain list); refused
    when its shape is not the setting's or when it names an existing choice's
    implementation differently."""
    if not spec.implementations:
        if isinstance(choices, Mapping):
            raise StepDefinitionError(
                f"{by} gives implementations for the choices of '{spec.key}', which is "
                "declared with a plain list", location=where, hint="list the names only")
        return dict.fromkeys(choices)
    if not isinstance(choices, Mapping):
        raise StepDefinitionError(
            f"{by} extends the choices of '{spec.key}' without their implementations",
            location=where, hint=f"map each name to what it selects: "
                                 f"extend_choices({spec.key!r}, {{name: implementation}})")
    for name, code in choices.items():
        if name in spec.choices and spec.implementation(name) != code:
            raise StepDefinitionError(
                f"{by} gives choice {name!r} of '{spec.key}' another implementation",
                location=where, hint="choose a name of your own")
    return dict(choices)


def _validate(spec: SettingSpec, declaration: Declaration) -> None:
    """Refuse a declaration that no value could satisfy, or that the schema cannot show."""
    def fail(message: str, hint: str | None = None) -> None:
        raise StepDefinitionError(f"{declaration.by}: setting '{spec.key}' {message}",
                                  location=spec.defined_at, hint=hint)

    problem = name_problem(spec.key, "setting key", SETTING_KEY)
    if problem is not None:
        raise StepDefinitionError(f"{declaration.by}: {problem}", location=spec.defined_at,
                                  hint="use dotted lower_snake_case, e.g. hicache.layout")
    if spec.kind not in _KIND_WORDS:
        fail(f"has unsupported kind {spec.kind!r}", "use bool, int, float, str or list[str]")
    if not isinstance(spec.description, str) or not spec.description.strip() \
            or "\n" in spec.description:
        fail("needs a one-line description", "say what the setting controls in one line")
    numeric = spec.kind in ("int", "float")
    if not numeric and (spec.minimum, spec.exclusive_minimum, spec.maximum) != (None,) * 3:
        fail("has bounds but is not a number")
    if spec.pattern is not None:
        if spec.kind not in ("str", "list[str]"):
            fail("has a pattern but is not text")
        try:
            re.compile(spec.pattern)
        except re.error as exc:
            fail(f"has an invalid pattern: {exc}")
    if spec.choices and spec.kind not in ("str", "int", "float"):
        fail("has choices but is neither text nor a number")
    if spec.implementations:
        if len(spec.implementations) != len(spec.choices):
            fail(f"has {len(spec.implementations)} implementations for "
                 f"{len(spec.choices)} choices",
                 "declare the table as choices={name: implementation}")
        if spec.nullable:
            fail("has a table of choices but is nullable: null would name nothing",
                 "give the 'nothing' case a name of its own in the table")
    unconstrained = dataclasses.replace(spec, choices=(), nullable=True)
    for choice in spec.choices:
        if choice is None or unconstrained.check(choice) is not None:
            fail(f"choice {choice!r} is not a valid value: "
                 f"{unconstrained.check(choice) or 'null is not a choice'}")
    if spec.required:
        if spec.default is not None or spec.nullable:
            fail("is required, so it can have neither a default nor null",
                 "drop default= and nullable=, or drop required=")
        return
    if spec.default is None and not spec.nullable:
        fail("has no default", "give default=, or declare it nullable=True or required=True")
    problem = spec.check(spec.default)
    if problem is not None:
        fail(f"has an invalid default: {problem}")
