"""One profile file: parsed, validated, and flattened into located records.

This module knows the profile *format*; it does not follow ``extends`` or layer
profiles (see :mod:`initorch.loading.compose`), and it does not know which
settings exist: values are checked against the steps' declarations later (see
:mod:`initorch.loading.settle`).  Every problem found in a file is collected, each
with its ``file:line:column``.

Settings are flattened to dotted keys: ``device: {type: npu}`` becomes
``device.type`` and ``config: {hicache: {layout: x}}`` becomes ``hicache.layout``.
One flat namespace makes layering, ``--set`` and ``when:`` conditions uniform.
"""

from __future__ import annotations

import math
import re
from collections.abc import Iterable
from typing import Any

from initorch.errors import ConditionError, Problem, ProfileError
from initorch.gc_pause import gc_paused
from initorch.loading.yamlsource import YamlDocument, parse_yaml
from initorch.location import SourceLocation
from initorch.model.conditions import parse_condition
from initorch.model.names import KEY_SEGMENT, STEP_NAME, name_problem
from initorch.model.step import (
    EDGE_KINDS,
    MAX_RETRIES,
    MAX_TIMEOUT_S,
    OVERRIDABLE_FIELDS,
    EdgeKind,
)
from initorch.printable import shown
from initorch.records import record
from initorch.suggest import closest

# "$schema" lets an editor's YAML language server find the JSON Schema.
TOP_LEVEL_KEYS = ("description", "extends", "device", "config", "env", "steps", "$schema")
# The device fields the profile format itself needs; every other ``device.*`` key
# is a setting that some step declares (see initorch.model.settings).
CORE_DEVICE_FIELDS = ("type", "aliases", "suggested_for")
# What a profile may say about a step: the fields the step's field table lets a profile
# change (:data:`~initorch.model.step.OVERRIDABLE_FIELDS`), scalars first, and the
# profile's own keys.
_OVERRIDE_HELP: dict[str, str] = {
    "when": "condition on settings; null drops the step's own condition",
    "timeout": "seconds before the step is reported as hung (at most a week); null for none",
    "retries": f"attempts after the first (at most {MAX_RETRIES}), for errors the step "
               "declares transient",
    **{kind: f"add {kind} edges: step names, or {{step: NAME, reason: TEXT}} items"
       for kind in EDGE_KINDS},
}
STEP_OVERRIDES: dict[str, str] = {
    "enabled": "false skips the step (the plan says which profile disabled it)",
    "reason": "why the step is disabled; shown in the plan",
    **{name: _OVERRIDE_HELP[name] for name in OVERRIDABLE_FIELDS if name not in EDGE_KINDS},
    **{name: _OVERRIDE_HELP[name] for name in OVERRIDABLE_FIELDS if name in EDGE_KINDS},
    "remove": "edges to remove: a mapping of edge kind to step names",
}
STEP_FIELDS = tuple(STEP_OVERRIDES)
EDGE_ITEM_FIELDS = ("step", "reason")
# POSIX leaves the alphabet of environment names open; this is the portable one.
ENV_NAME = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*$")


@record
class Setting:
    """A value with where it came from: a profile (``location`` is the value's
    ``file:line:col``, ``source`` the profile's name), the command line (source
    ``--set``), or a declared default (``is_default``; ``source`` names the
    declarer, ``location`` is where it was declared)."""

    key: str
    value: Any
    location: SourceLocation
    source: str
    key_location: SourceLocation | None = None
    is_default: bool = False

    @property
    def origin(self) -> str:
        """Where the value came from, for people: ``profiles/npu.yaml:17:13``,
        ``<command line>`` or ``default (declared by step x at steps/x.py:12)``."""
        if self.is_default:
            return f"default (declared by {self.source} at {self.location})"
        return str(self.location)


@record
class EdgeChange:
    """A profile adding (``add``) or removing an edge ``step --kind--> target``.

    ``reason`` is the profile's own words for why the edge exists (an upstream
    file and version, say); it is shown by ``explain``, ``graph`` and ``plan
    --json`` and never changes what runs.
    """

    step: str
    kind: EdgeKind
    target: str
    add: bool
    location: SourceLocation
    source: str
    reason: str | None = None


@record
class EnvEntry:
    """An environment variable a profile sets (``value`` None: drop an earlier one)."""

    name: str
    value: str | None
    location: SourceLocation
    source: str


@record
class StepEntry:
    """A profile's mention of a step: it includes the step and may override it."""

    name: str
    location: SourceLocation
    source: str
    overrides: tuple[Setting, ...]
    changes: tuple[EdgeChange, ...]


@record
class ProfileDocument:
    """One parsed profile file.

    ``problems`` lists what is wrong with the file's format; the entries they
    concern are left out, so that later stages can still report their own
    problems (unknown steps, unknown settings) in the same pass.
    """

    name: str
    path: str
    description: str
    extends: tuple[tuple[str, SourceLocation], ...]
    settings: tuple[Setting, ...]
    steps: tuple[StepEntry, ...]
    problems: tuple[Problem, ...] = ()
    env: tuple[EnvEntry, ...] = ()
    suggested_for: tuple[str, ...] = ()
    """Names that ``--device`` refuses but answers with this profile's type ("did you
    mean 'cuda'?" for ``gpu``): names too vague to accept (``device.suggested_for``).
    They are no setting, so no plan and no fingerprint holds them."""

    @property
    def device_type(self) -> Setting | None:
        return next((s for s in self.settings if s.key == "device.type"), None)


class _Collector:
    """Collects problems so that one pass reports all of them."""

    def __init__(self, doc: YamlDocument) -> None:
        self.doc = doc
        self.problems: list[Problem] = []
        # Step names already found valid: a large profile names each step several times.
        self.valid_step_names: set[str] = set()

    def add(self, message: str, location: SourceLocation, hint: str | None = None) -> None:
        self.problems.append(Problem(message, location, hint))

    def unknown_key(self, key: str, allowed: Iterable[str], *path: str | int) -> None:
        allowed = tuple(allowed)
        guess = closest(key, allowed)
        self.add(
            f"unknown key '{shown(key)}'",
            self.doc.key_where(*path, key),
            f"did you mean '{guess}'?" if guess else f"allowed: {', '.join(allowed)}",
        )


def parse_profile(text: str, path: str, name: str) -> ProfileDocument:
    """Parse and validate one profile; raise :class:`ProfileError` listing every problem."""
    document = read_profile(text, path, name)
    if document.problems:
        raise ProfileError(f"{len(document.problems)} problem(s) in {path}",
                           problems=document.problems)
    return document


def read_profile(text: str, path: str, name: str) -> ProfileDocument:
    """Parse one profile, keeping its format problems in ``problems`` (in file order).

    Raises :class:`ProfileError` only when nothing can be read: invalid YAML, an
    empty file, or a top level that is not a mapping.
    """
    with gc_paused():  # the records of a large profile form no cycle either
        return _read_profile(text, path, name)


def _read_profile(text: str, path: str, name: str) -> ProfileDocument:
    doc = parse_yaml(text, path)
    out = _Collector(doc)
    data = doc.data
    if data is None:
        raise ProfileError("profile is empty", location=SourceLocation(path),
                           hint="start with 'description:' and 'extends:' or 'device:'")
    if not isinstance(data, dict):
        raise ProfileError("a profile must be a mapping at the top level",
                           location=doc.where(), hint="see 'initorch schema'")
    for key in data:
        if key not in TOP_LEVEL_KEYS:
            out.unknown_key(key, TOP_LEVEL_KEYS)
    description = data.get("description", "")
    if not isinstance(description, str):
        out.add("description must be a string", doc.where("description"))
        description = ""
    if not isinstance(data.get("$schema", ""), str):
        out.add("$schema must be a string (the schema's path or URL)", doc.where("$schema"))
    extends = _parse_extends(out, data.get("extends"))
    device, suggested_for = _parse_device(out, data.get("device"), name)
    settings = device + _parse_config(out, data.get("config"), name)
    steps = _parse_steps(out, data.get("steps"), name)
    env = _parse_env(out, data.get("env"), name)
    in_file_order = sorted(out.problems, key=lambda p: (p.location or SourceLocation(path)))
    return ProfileDocument(name, path, description, extends, settings, steps,
                           tuple(in_file_order), env, suggested_for)


def _string_list(out: _Collector, value: Any, *path: str | int) -> list[tuple[str, SourceLocation]]:
    """A string or a list of strings, each with its location."""
    if value is None:
        return []
    if isinstance(value, str):
        return [(value, out.doc.where(*path))]
    if isinstance(value, list) and all(isinstance(v, str) for v in value):
        return [(v, out.doc.where(*path, i)) for i, v in enumerate(value)]
    out.add(f"'{path[-1]}' must be a string or a list of strings", out.doc.where(*path))
    return []


def _step_names(out: _Collector, value: Any, *path: str | int
                ) -> list[tuple[str, SourceLocation]]:
    """Edge targets: step names, each checked (a look-alike character is named)."""
    return [(target, at) for target, at in _string_list(out, value, *path)
            if _is_step_name(out, target, at)]


def _is_step_name(out: _Collector, target: str, at: SourceLocation) -> bool:
    """Whether ``target`` is a valid step name; reports the problem when it is not."""
    if target in out.valid_step_names:
        return True
    problem = name_problem(target, "step name", STEP_NAME)
    if problem is not None:
        out.add(problem, at, "use ASCII lower_snake_case")
        return False
    out.valid_step_names.add(target)
    return True


def _parse_extends(out: _Collector, value: Any) -> tuple[tuple[str, SourceLocation], ...]:
    return tuple(_string_list(out, value, "extends"))


def _parse_device(out: _Collector, value: Any, source: str
                  ) -> tuple[tuple[Setting, ...], tuple[str, ...]]:
    """``type``, ``aliases`` and ``suggested_for`` are the format's own; every other field
    is kept as the setting ``device.<field>``, checked later against the declared
    settings.  Returns the settings and the names ``suggested_for`` gives."""
    if value is None:
        return (), ()
    if not isinstance(value, dict):
        out.add("'device' must be a mapping", out.doc.where("device"))
        return (), ()
    settings = []
    suggested_for: list[str] = []
    for key, item in value.items():
        where = out.doc.where("device", key)
        key_where = out.doc.key_where("device", key)
        field_value: Any = item
        problem = name_problem(key, "device field", KEY_SEGMENT)
        if problem is not None:
            out.add(problem, key_where, "device fields are lower_snake_case settings")
            continue
        if key == "suggested_for":
            suggested_for += _suggested_names(out, item)
            continue
        if key == "aliases":
            field_value = [v.lower() for v, _ in _string_list(out, item, "device", key)]
        elif key == "type":
            if not isinstance(item, str) or not item.strip():
                out.add("device.type must be a non-empty string", where)
                continue
            field_value = item.strip().lower()
            if not KEY_SEGMENT.fullmatch(field_value):
                out.add(f"device.type {field_value!r} is not a valid type name", where,
                        "use a lower-case ASCII identifier such as 'npu'")
                continue
        settings.append(Setting(f"device.{key}", field_value, where, source, key_where))
    return tuple(settings), tuple(suggested_for)


def _suggested_names(out: _Collector, value: Any) -> list[str]:
    """The names of ``device.suggested_for``, lower case; one that no ``--device`` could
    spell is a problem."""
    names = []
    for given, where in _string_list(out, value, "device", "suggested_for"):
        name = given.strip().lower()
        if KEY_SEGMENT.fullmatch(name):
            names.append(name)
        else:
            out.add(f"device.suggested_for {name!r} is not a valid type name", where,
                    "use a lower-case ASCII identifier such as 'gpu'")
    return names


def _parse_config(out: _Collector, value: Any, source: str) -> tuple[Setting, ...]:
    if value is None:
        return ()
    if not isinstance(value, dict):
        out.add("'config' must be a mapping", out.doc.where("config"))
        return ()
    settings: list[Setting] = []

    def walk(mapping: dict[str, Any], path: tuple[str, ...]) -> None:
        for key, item in mapping.items():
            keys = (*path, key)
            key_where = out.doc.key_where("config", *keys)
            problem = name_problem(key, "config key", KEY_SEGMENT)
            if problem is not None:
                out.add(problem, key_where,
                        "use ASCII lower_snake_case so that conditions can name it")
                continue
            if keys == ("device",):
                out.add("config key 'device' is reserved", key_where,
                        "device fields go in the top-level 'device:' section")
                continue
            if isinstance(item, dict):
                walk(item, keys)
            else:
                settings.append(Setting(".".join(keys), item, out.doc.where("config", *keys),
                                        source, key_where))

    walk(value, ())
    return tuple(settings)


def _parse_steps(out: _Collector, value: Any, source: str) -> tuple[StepEntry, ...]:
    if value is None:
        return ()
    if not isinstance(value, dict):
        out.add("'steps' must be a mapping of step name to overrides",
                out.doc.where("steps"), "write '<step>: {}' to include a step as declared")
        return ()
    entries = []
    for name, body in value.items():
        where = out.doc.key_where("steps", name)
        if not _is_step_name(out, name, where):
            continue
        if not isinstance(body, (dict, type(None))):
            out.add(f"overrides of step '{shown(name)}' must be a mapping",
                    out.doc.where("steps", name),
                    "write '{}' to include the step unchanged")
            continue
        entries.append(_parse_step_entry(out, name, body or {}, where, source))
    return tuple(entries)


def _parse_step_entry(out: _Collector, name: str, body: dict[str, Any],
                      where: SourceLocation, source: str) -> StepEntry:
    if not body:  # listed as declared: most entries of a large profile
        return StepEntry(name, where, source, (), ())
    overrides: list[Setting] = []
    changes: list[EdgeChange] = []
    for key, item in body.items():
        if key not in STEP_FIELDS:
            out.unknown_key(key, STEP_FIELDS, "steps", name)
        elif key == "remove":
            changes.extend(_parse_removals(out, name, item, source))
        elif key in EDGE_KINDS:
            kind = _edge_kind(key)
            for target, at, reason in _edge_targets(out, item, "steps", name, key):
                changes.append(EdgeChange(name, kind, target, True, at, source, reason))
        else:
            item_where = out.doc.where("steps", name, key)
            problem = _override_problem(name, key, item, item_where)
            if problem is None:
                value = int(item) if key == "retries" else item  # JSON's 1.0 is 1
                overrides.append(Setting(key, value, item_where, source))
            else:
                out.problems.append(problem)
    return StepEntry(name, where, source, tuple(overrides), tuple(changes))


def _edge_kind(key: str) -> EdgeKind:
    for kind in EDGE_KINDS:
        if kind == key:
            return kind
    raise ValueError(key)


def _override_problem(name: str, key: str, item: Any, where: SourceLocation) -> Problem | None:
    """What is wrong with one scalar step override (enabled, reason, when, timeout,
    retries), if anything."""
    def wrong(wording: str) -> Problem:
        return Problem(f"steps.{name}.{key} must be {wording}, got {item!r}", where)

    number = isinstance(item, (int, float)) and not isinstance(item, bool)
    if key == "enabled" and not isinstance(item, bool):
        return wrong("true or false")
    if key == "reason" and not isinstance(item, str):
        return wrong("a string")
    if key == "timeout" and item is not None \
            and not (number and math.isfinite(item) and 0 < item <= MAX_TIMEOUT_S):
        return wrong(f"a positive, finite number of seconds up to {MAX_TIMEOUT_S:g}, "
                     "or null for none")
    if key == "retries" and not (number and math.isfinite(item) and float(item).is_integer()
                                 and 0 <= item <= MAX_RETRIES):
        return wrong(f"a whole number from 0 to {MAX_RETRIES}")
    if key == "when" and item is not None:
        if not isinstance(item, str):
            return wrong("a condition string, or null to drop the step's own")
        try:
            parse_condition(item, where)
        except ConditionError as exc:
            return exc.problems[0]
    return None


def _parse_removals(out: _Collector, name: str, value: Any, source: str) -> list[EdgeChange]:
    if not isinstance(value, dict):
        out.add(f"steps.{name}.remove must map edge kinds to step names",
                out.doc.where("steps", name, "remove"), "e.g. remove: {after: [other_step]}")
        return []
    changes = []
    for kind, targets in value.items():
        if kind not in EDGE_KINDS:
            out.unknown_key(kind, EDGE_KINDS, "steps", name, "remove")
            continue
        for target, at in _step_names(out, targets, "steps", name, "remove", kind):
            changes.append(EdgeChange(name, _edge_kind(kind), target, False, at, source))
    return changes


def _edge_targets(out: _Collector, value: Any, *path: str | int
                  ) -> list[tuple[str, SourceLocation, str | None]]:
    """Edge targets: a name, or a list of names and ``{step: NAME, reason: TEXT}`` items."""
    if value is None:
        return []
    items = value if isinstance(value, list) else [value]
    if not all(isinstance(item, (str, dict)) for item in items):
        out.add(f"'{path[-1]}' must be a step name or a list of step names and "
                "{step: NAME, reason: TEXT} items", out.doc.where(*path),
                "e.g. after: [{step: set_device, reason: 'SGLang 0.5.23 bootstrap.py'}]")
        return []
    targets: list[tuple[str, SourceLocation, str | None]] = []
    for index, item in enumerate(items):
        at = (*path, index) if isinstance(value, list) else path
        if isinstance(item, str):
            where = out.doc.where(*at)
            if _is_step_name(out, item, where):
                targets.append((item, where, None))
            continue
        for key in item:
            if key not in EDGE_ITEM_FIELDS:
                out.unknown_key(str(key), EDGE_ITEM_FIELDS, *at)
        target, reason = item.get("step"), item.get("reason")
        if not isinstance(target, str) or not target:
            out.add("an edge item needs 'step: NAME'", out.doc.where(*at),
                    "write {step: NAME, reason: TEXT}")
        elif not _step_names(out, target, *at, "step"):
            continue  # the name's problem is reported
        elif reason is not None and (not isinstance(reason, str) or not reason.strip()):
            out.add(f"the reason of the edge to '{target}' must be a non-empty string",
                    out.doc.where(*at, "reason"))
        else:
            targets.append((target, out.doc.where(*at, "step"),
                            reason.strip() if reason else None))
    return targets


# Variables that make a program (this interpreter's children: the Mooncake master, the
# watchdog; or a Python that starts later) load code named by their value: a profile
# is data and may name none (issue 10, point 1).  Refused by family, since the stacks
# initorch starts keep adding members (issue 19): the dynamic loaders' LD_* / DYLD_*;
# the CUDA driver's injection libraries (CUDA_INJECTION64_PATH, loaded at cuInit);
# plugins and their search paths (NCCL_NET_PLUGIN, NCCL_TUNER_PLUGIN,
# NCCL_PROFILER_PLUGIN -- NCCL dlopens libnccl-<kind>-<value>.so --, QT_PLUGIN_PATH);
# the ROCm runtime's tool libraries (HSA_TOOLS_LIB); and OpenSSL's configuration and
# module folders (OPENSSL_CONF loads engines and providers, OPENSSL_MODULES names them).
# The other runtimes a hook, a launcher or a watchdog may start read theirs by family
# too (issue 27): Python's PYTHON* (PYTHONPATH, PYTHONSTARTUP, and PYTHONPYCACHEPREFIX,
# which points the byte-code cache at a folder of planted .pyc files), Perl's PERL*
# (PERLLIB, PERL5LIB, PERL5OPT), Ruby's RUBY* (RUBYLIB, RUBYOPT), Node's NODE_*
# (NODE_PATH, NODE_OPTIONS) and the JVM's *JAVA*_OPTIONS (JAVA_TOOL_OPTIONS,
# _JAVA_OPTIONS, JDK_JAVA_OPTIONS: -javaagent loads a jar).
CODE_LOADING_FAMILIES = re.compile(
    r"(?:LD|DYLD)_\w*"
    r"|\w*_INJECTION\w*"
    r"|\w*_PLUGINS?(?:_\w*)?"
    r"|HSA_TOOLS_\w*"
    r"|OPENSSL_\w*"
    r"|PYTHON\w*"
    r"|PERL\w*"
    r"|RUBY\w*"
    r"|NODE_\w*"
    r"|\w*JAVA\w*_OPTIONS")
CODE_LOADING_VARIABLES = frozenset({"BASH_ENV", "ENV", "GCONV_PATH"})
PYTHON_VARIABLES_ALLOWED = frozenset({
    "PYTHONUNBUFFERED", "PYTHONFAULTHANDLER", "PYTHONHASHSEED", "PYTHONIOENCODING",
    "PYTHONUTF8", "PYTHONDONTWRITEBYTECODE"})
"""The members of the ``PYTHON*`` family a profile may set: each changes how Python
buffers, encodes, hashes or reports a crash, and none names a file or a module."""


MAX_ENV_STRING = 128 * 1024
"""Linux's MAX_ARG_STRLEN: the most bytes of one ``NAME=value`` string (its NUL
included) that ``execve`` passes on; longer ones fail with E2BIG."""


def loads_code(name: str) -> bool:
    """True for an environment variable that names code a program then loads."""
    upper = name.upper()
    if upper in PYTHON_VARIABLES_ALLOWED:
        return False
    return upper in CODE_LOADING_VARIABLES or CODE_LOADING_FAMILIES.fullmatch(upper) is not None


def _parse_env(out: _Collector, value: Any, source: str) -> tuple[EnvEntry, ...]:
    """``env: {NAME: value}``: text or whole numbers (kept as written); null drops the
    variable an earlier profile set.  Booleans are refused: ``true`` would have to
    become some spelling of it, and programs disagree on which."""
    if value is None:
        return ()
    if not isinstance(value, dict):
        out.add("'env' must map variable names to values", out.doc.where("env"),
                "e.g. env: {MC_FORCE_TCP: \"1\"}")
        return ()
    entries = []
    for key, item in value.items():
        name_problem = env_name_problem(key)
        if name_problem is not None:
            message, hint = name_problem
            out.add(message, out.doc.key_where("env", key), hint)
            continue
        where = out.doc.where("env", key)
        if isinstance(item, bool) or not isinstance(item, (str, int, type(None))):
            out.add(f"env.{key} must be text, a whole number or null, got {item!r}", where,
                    f"quote it: {key}: \"{item}\"")
            continue
        text = None if item is None else str(item)
        value_problem = env_value_problem(key, text) if text is not None else None
        if value_problem is not None:
            out.add(value_problem[0], where, value_problem[1])
        else:
            entries.append(EnvEntry(key, text, where, source))
    return tuple(entries)


def env_name_problem(name: object) -> tuple[str, str] | None:
    """Why ``name`` may not be set by a profile (or a saved plan), with a hint; ``None``
    if it may."""
    if not isinstance(name, str) or not ENV_NAME.match(name):
        return (f"'{shown(name)}' is not a valid environment variable name",
                "use letters, digits and _")
    if loads_code(name):
        return (f"env.{name} would make programs load code the profile names",
                "a profile is data; set it in the launcher's own environment instead")
    return None


def env_value_problem(name: str, value: str) -> tuple[str, str | None] | None:
    """Why ``value`` cannot be given to ``name`` by a profile (or a saved plan), with a
    hint; ``None`` if it can."""
    if "\0" in value:
        return f"env.{name} contains a NUL byte, which no environment can hold", None
    if "\n" in value or "\r" in value:
        return (f"env.{name} contains a line break: printed by 'initorch plan' or a log, "
                "it would start a line of its own", "keep the value on one line")
    if len(f"{name}={value}".encode()) >= MAX_ENV_STRING:
        return (f"env.{name} is {len(value.encode())} bytes: Linux gives a program it "
                f"starts at most {MAX_ENV_STRING} bytes per variable (NAME=value), so "
                "every child process would fail with 'Argument list too long'", None)
    return None
