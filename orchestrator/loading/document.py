"""One profile file: parsed, validated, and flattened into located records.

This module knows the profile *format*; it does not follow ``extends`` or layer
profiles (see :mod:`initorch.loading.compose`).  Every problem found in a file is
collected and raised together as one :class:`ProfileError`, each with its
``file:line:column``.

Settings are flattened to dotted keys: ``device: {type: npu}`` becomes
``device.type`` and ``config: {hicache: {layout: x}}`` becomes ``hicache.layout``.
One flat namespace makes layering, ``--set`` and ``when:`` conditions uniform.
"""

from __future__ import annotations

import re
from collections.abc import Iterable
from dataclasses import dataclass
from typing import Any

from initorch.errors import ConditionError, Problem, ProfileError
from initorch.loading.yamlsource import YamlDocument, parse_yaml
from initorch.location import SourceLocation
from initorch.model.conditions import parse_condition
from initorch.model.registry import STEP_NAME
from initorch.model.step import EDGE_KINDS, EdgeKind
from initorch.suggest import closest

TOP_LEVEL_KEYS = ("description", "extends", "device", "config", "env", "steps")
# Field -> what it means; the JSON Schema (initorch.loading.schema) is built from these.
DEVICE_FIELDS: dict[str, str] = {
    "type": "canonical device type, lower case (cpu, cuda, npu, ...)",
    "aliases": "other spellings that --device accepts for this type (e.g. hip for rocm)",
    "torch_module": "the torch device module steps use (torch.cuda, torch.npu, ...)",
    "backend_package": "package to import first: torch, or a vendor plugin (torch_npu)",
    "collective_backend": "torch.distributed backend (gloo, nccl, hccl, mccl, xccl, mooncake)",
    "host_allocator": "host KV pool allocator: cuda_host_register, pin_memory or plain",
    "mooncake_protocol": "Mooncake transfer protocol (tcp, rdma, ascend)",
    "visible_devices_env": "environment variable that limits visible devices",
}
STEP_OVERRIDES: dict[str, str] = {
    "enabled": "false skips the step (the plan says which profile disabled it)",
    "reason": "why the step is disabled; shown in the plan",
    "when": "condition on settings; null drops the step's own condition",
    "timeout": "seconds before the step is reported as hung; null for none",
    "retries": "attempts after the first, for errors the step declares transient",
    **{kind: f"add {kind} edges: step names, or {{step: NAME, reason: TEXT}} items"
       for kind in EDGE_KINDS},
    "remove": "edges to remove: a mapping of edge kind to step names",
}
STEP_FIELDS = tuple(STEP_OVERRIDES)
EDGE_ITEM_FIELDS = ("step", "reason")
CONFIG_KEY = re.compile(r"^[a-z_][a-z0-9_]*$")
# POSIX leaves the alphabet of environment names open; this is the portable one.
ENV_NAME = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*$")


@dataclass(frozen=True, slots=True)
class Setting:
    """A value with where it was set (a profile location or the command line)."""

    key: str
    value: Any
    location: SourceLocation
    source: str


@dataclass(frozen=True, slots=True)
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


@dataclass(frozen=True, slots=True)
class EnvEntry:
    """An environment variable a profile sets (``value`` None: drop an earlier one)."""

    name: str
    value: str | None
    location: SourceLocation
    source: str


@dataclass(frozen=True, slots=True)
class StepEntry:
    """A profile's mention of a step: it includes the step and may override it."""

    name: str
    location: SourceLocation
    source: str
    overrides: tuple[Setting, ...]
    changes: tuple[EdgeChange, ...]


@dataclass(frozen=True, slots=True)
class ProfileDocument:
    """One parsed profile file."""

    name: str
    path: str
    description: str
    extends: tuple[tuple[str, SourceLocation], ...]
    settings: tuple[Setting, ...]
    steps: tuple[StepEntry, ...]
    env: tuple[EnvEntry, ...] = ()

    @property
    def device_type(self) -> Setting | None:
        return next((s for s in self.settings if s.key == "device.type"), None)


class _Collector:
    """Collects problems so that one pass reports all of them."""

    def __init__(self, doc: YamlDocument) -> None:
        self.doc = doc
        self.problems: list[Problem] = []

    def add(self, message: str, location: SourceLocation, hint: str | None = None) -> None:
        self.problems.append(Problem(message, location, hint))

    def unknown_key(self, key: str, allowed: Iterable[str], *path: str | int) -> None:
        allowed = tuple(allowed)
        guess = closest(key, allowed)
        self.add(
            f"unknown key '{key}'",
            self.doc.key_where(*path, key),
            f"did you mean '{guess}'?" if guess else f"allowed: {', '.join(allowed)}",
        )


def parse_profile(text: str, path: str, name: str) -> ProfileDocument:
    """Parse and validate one profile; raise :class:`ProfileError` listing every problem."""
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
    extends = _parse_extends(out, data.get("extends"))
    settings = _parse_device(out, data.get("device"), name) + _parse_config(
        out, data.get("config"), name
    )
    steps = _parse_steps(out, data.get("steps"), name)
    env = _parse_env(out, data.get("env"), name)
    if out.problems:
        in_file_order = sorted(out.problems, key=lambda p: (p.location or SourceLocation(path)))
        raise ProfileError(f"{len(out.problems)} problem(s) in {path}", problems=in_file_order)
    return ProfileDocument(name, path, description, extends, settings, steps, env)


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


def _parse_extends(out: _Collector, value: Any) -> tuple[tuple[str, SourceLocation], ...]:
    return tuple(_string_list(out, value, "extends"))


def _parse_device(out: _Collector, value: Any, source: str) -> tuple[Setting, ...]:
    if value is None:
        return ()
    if not isinstance(value, dict):
        out.add("'device' must be a mapping", out.doc.where("device"))
        return ()
    settings = []
    for key, item in value.items():
        if key not in DEVICE_FIELDS:
            out.unknown_key(key, DEVICE_FIELDS, "device")
            continue
        where = out.doc.where("device", key)
        field_value: str | list[str]
        if key == "aliases":
            field_value = [v.lower() for v, _ in _string_list(out, item, "device", key)]
        elif not isinstance(item, str) or not item.strip():
            out.add(f"device.{key} must be a non-empty string", where)
            continue
        elif key == "type":
            field_value = item.strip().lower()
            if not CONFIG_KEY.match(field_value):
                out.add(f"device.type {field_value!r} is not a valid type name", where,
                        "use a lower-case identifier such as 'npu'")
                continue
        else:
            field_value = item
        settings.append(Setting(f"device.{key}", field_value, where, source))
    return tuple(settings)


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
            if not CONFIG_KEY.match(key):
                out.add(f"config key '{key}' is not a valid name",
                        out.doc.key_where("config", *keys),
                        "use lower_snake_case so that conditions can name it")
                continue
            if keys == ("device",):
                out.add("config key 'device' is reserved", out.doc.key_where("config", key),
                        "device fields go in the top-level 'device:' section")
                continue
            if isinstance(item, dict):
                walk(item, keys)
            elif not _plain(item):
                out.add(f"config value {'.'.join(keys)} is a {type(item).__name__}, which "
                        "settings cannot hold", out.doc.where("config", *keys),
                        "use a string, number, boolean, null or list; quote dates")
            else:
                settings.append(Setting(".".join(keys), item, out.doc.where("config", *keys),
                                        source))

    walk(value, ())
    return tuple(settings)


def _plain(value: Any) -> bool:
    """True for values that JSON (and so --json, fingerprints, conditions) can carry."""
    if isinstance(value, list):
        return all(_plain(item) for item in value)
    if isinstance(value, dict):
        return all(_plain(item) for item in value.values())
    return isinstance(value, (str, int, float, bool, type(None)))


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
        if not STEP_NAME.match(name):
            out.add(f"'{name}' is not a valid step name", where, "use lower_snake_case")
            continue
        if not isinstance(body, (dict, type(None))):
            out.add(f"overrides of step '{name}' must be a mapping", out.doc.where("steps", name),
                    "write '{}' to include the step unchanged")
            continue
        entries.append(_parse_step_entry(out, name, body or {}, where, source))
    return tuple(entries)


def _parse_step_entry(out: _Collector, name: str, body: dict[str, Any],
                      where: SourceLocation, source: str) -> StepEntry:
    overrides: list[Setting] = []
    changes: list[EdgeChange] = []
    for key, item in body.items():
        item_where = out.doc.where("steps", name, key)
        if key not in STEP_FIELDS:
            out.unknown_key(key, STEP_FIELDS, "steps", name)
        elif key == "remove":
            changes.extend(_parse_removals(out, name, item, source))
        elif key in EDGE_KINDS:
            for target, at, reason in _edge_targets(out, item, "steps", name, key):
                changes.append(EdgeChange(name, _edge_kind(key), target, True, at, source,
                                          reason))
        else:
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
    if key == "timeout" and item is not None and not (number and item > 0):
        return wrong("a positive number of seconds, or null for none")
    if key == "retries" and not (number and float(item).is_integer() and item >= 0):
        return wrong("a whole number >= 0")
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
        for target, at in _string_list(out, targets, "steps", name, "remove", kind):
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
            targets.append((item, out.doc.where(*at), None))
            continue
        for key in item:
            if key not in EDGE_ITEM_FIELDS:
                out.unknown_key(str(key), EDGE_ITEM_FIELDS, *at)
        target, reason = item.get("step"), item.get("reason")
        if not isinstance(target, str) or not target:
            out.add("an edge item needs 'step: NAME'", out.doc.where(*at),
                    "write {step: NAME, reason: TEXT}")
        elif reason is not None and (not isinstance(reason, str) or not reason.strip()):
            out.add(f"the reason of the edge to '{target}' must be a non-empty string",
                    out.doc.where(*at, "reason"))
        else:
            targets.append((target, out.doc.where(*at, "step"),
                            reason.strip() if reason else None))
    return targets


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
        where = out.doc.where("env", key)
        if not isinstance(key, str) or not ENV_NAME.match(key):
            out.add(f"'{key}' is not a valid environment variable name",
                    out.doc.key_where("env", key), "use letters, digits and _")
        elif isinstance(item, bool) or not isinstance(item, (str, int, type(None))):
            out.add(f"env.{key} must be text, a whole number or null, got {item!r}", where,
                    f"quote it: {key}: \"{item}\"")
        elif isinstance(item, str) and "\0" in item:
            out.add(f"env.{key} contains a NUL byte, which no environment can hold", where)
        else:
            entries.append(EnvEntry(key, None if item is None else str(item), where, source))
    return tuple(entries)
