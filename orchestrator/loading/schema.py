"""The JSON Schema of profile files (``initorch schema``), for editors and CI.

Built from the same tables the parser uses (:mod:`initorch.loading.document`)
and from the registry's declarations: every declared setting appears with its
type, allowed values, bounds, default and description, and every registered
step by name with its description, so an editor completes and checks them.
The parser and the resolver remain the authority (they also check conditions,
cross-file rules, and required settings, which depend on the plan).
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

from initorch.loading.document import CORE_DEVICE_FIELDS, ENV_NAME, STEP_OVERRIDES
from initorch.model.names import STEP_NAME
from initorch.model.settings import (
    MAX_INT,
    MAX_LIST_LENGTH,
    MAX_TEXT_LENGTH,
    SettingCatalog,
    SettingSpec,
)
from initorch.model.step import EDGE_KINDS, MAX_RETRIES, MAX_TIMEOUT_S, Step

SCHEMA_ID = "https://initorch.dev/schema/profile.json"

_JSON_TYPES = {"bool": "boolean", "int": "integer", "float": "number", "str": "string",
               "list[str]": "array"}
# Text never holds control characters; as a condition on strings only, so that it
# does not reject null, and without '$', which Python's regex lets match before
# a final newline.
_NO_CONTROLS: dict[str, Any] = {"if": {"type": "string"},
                                "then": {"not": {"pattern": "[\\u0000-\\u001f\\u007f]"}}}


def _names(steps: list[str]) -> dict[str, Any]:
    name: dict[str, Any] = {"type": "string", "pattern": f"^{STEP_NAME.pattern}$"}
    if steps:
        name = {"enum": steps}
    return {"oneOf": [name, {"type": "array", "items": name}]}


def _edges(steps: list[str]) -> dict[str, Any]:
    """Edge targets: names, or ``{step: NAME, reason: TEXT}`` items."""
    name: dict[str, Any] = {"enum": steps} if steps else \
        {"type": "string", "pattern": f"^{STEP_NAME.pattern}$"}
    item = {"oneOf": [name, {"type": "object", "additionalProperties": False,
                             "required": ["step"],
                             "properties": {"step": name,
                                            "reason": {"type": "string", "pattern": r"\S"}}}]}
    return {"oneOf": [item, {"type": "array", "items": item}]}


def _override_types(steps: list[str]) -> dict[str, Any]:
    names = _names(steps)
    return {
        "enabled": {"type": "boolean"},
        "reason": {"type": "string"},
        "when": {"type": ["string", "null"]},
        "timeout": {"type": ["number", "null"], "exclusiveMinimum": 0,
                    "maximum": MAX_TIMEOUT_S},
        "retries": {"type": "integer", "minimum": 0, "maximum": MAX_RETRIES},
        **{kind: _edges(steps) for kind in EDGE_KINDS},
        "remove": {
            "type": "object",
            "additionalProperties": False,
            "properties": {kind: names for kind in EDGE_KINDS},
        },
    }


def setting_schema(spec: SettingSpec) -> dict[str, Any]:
    """The schema of one setting's value: type, allowed values, bounds, default."""
    json_type = _JSON_TYPES[spec.kind]
    node: dict[str, Any] = {"description": spec.description,
                            "type": [json_type, "null"] if spec.nullable else json_type}
    pattern = {"pattern": f"^(?:{spec.pattern})$"} if spec.pattern else {}
    if spec.kind == "str":
        node.update(pattern, maxLength=MAX_TEXT_LENGTH, allOf=[_NO_CONTROLS])
    if spec.kind == "list[str]":
        node.update(maxItems=MAX_LIST_LENGTH, items={"type": "string", **pattern,
                                                     "maxLength": MAX_TEXT_LENGTH,
                                                     "allOf": [_NO_CONTROLS]})
    if spec.kind in ("int", "float"):
        node.update(minimum=-MAX_INT, maximum=MAX_INT)
        for field, value in (("minimum", spec.minimum), ("maximum", spec.maximum),
                             ("exclusiveMinimum", spec.exclusive_minimum)):
            if value is not None:
                node[field] = value
    if spec.choices:
        node["enum"] = [*spec.choices, *([None] if spec.nullable else [])]
    if spec.required:
        node["description"] += " (required for a device profile whose plan reads it)"
    else:
        node["default"] = spec.default_value
    return node


def _config_section(specs: list[SettingSpec], depth: int) -> dict[str, Any]:
    """Nested objects for dotted keys: ``hicache.layout`` is config.hicache.layout."""
    leaves = {s.key.split(".")[depth]: s for s in specs if s.key.count(".") == depth}
    sections: dict[str, list[SettingSpec]] = {}
    for spec in specs:
        if spec.key.count(".") > depth:
            sections.setdefault(spec.key.split(".")[depth], []).append(spec)
    properties = {name: setting_schema(spec) for name, spec in leaves.items()}
    properties.update({name: _config_section(below, depth + 1)
                       for name, below in sections.items()})
    return {"type": "object", "additionalProperties": False,
            "properties": dict(sorted(properties.items()))}


def _device_section(specs: list[SettingSpec]) -> dict[str, Any]:
    properties: dict[str, Any] = {
        spec.key.partition(".")[2]: setting_schema(spec) for spec in specs
        if spec.key.partition(".")[2] not in CORE_DEVICE_FIELDS
    }
    # The parser strips blanks and lower-cases the type, the aliases and the suggested names.
    properties["type"] = {"type": "string", "pattern": r"^\s*[a-zA-Z_][a-zA-Z0-9_]*\s*$",
                          "description": "canonical device type, lower case (cpu, cuda, npu, "
                                         "...); the profile that sets it describes a device"}
    properties["aliases"] = {
        "oneOf": [{"type": "string"}, {"type": "array", "items": {"type": "string"}}],
        "description": "other spellings that --device accepts for this type (e.g. hip for "
                       "rocm)",
    }
    properties["suggested_for"] = {
        "oneOf": [{"type": "string"}, {"type": "array", "items": {"type": "string"}}],
        "description": "names --device refuses but answers with this type (did you mean "
                       "'cuda'? for gpu): too vague to accept",
    }
    # An empty section (`device:` with nothing under it) is null in YAML.
    return {"type": ["object", "null"], "additionalProperties": False,
            "properties": dict(sorted(properties.items()))}


def profile_schema(settings: SettingCatalog, steps: Iterable[Step]) -> dict[str, Any]:
    """The schema as a JSON-compatible dict, for the registry's declared
    ``settings`` and registered ``steps``.

    It is draft-07, because that is what editors validate with
    (yaml-language-server and the VS Code YAML extension use draft-07 and older;
    their 2019-09/2020-12 support is still an open pull request, #1115), and
    every keyword used here means the same in 2020-12.
    """
    registered = sorted(steps, key=lambda s: s.name)
    names = [step.name for step in registered]
    overrides = _override_types(names)
    step_body = {
        "type": ["object", "null"],
        "additionalProperties": False,
        "properties": {name: {**overrides[name], "description": text}
                       for name, text in STEP_OVERRIDES.items()},
    }
    declared = list(settings)
    config = _config_section([s for s in declared if not s.key.startswith("device.")], 0)
    return {
        "$schema": "http://json-schema.org/draft-07/schema#",
        "$id": SCHEMA_ID,
        "title": "initorch profile",
        "type": "object",
        "additionalProperties": False,
        "properties": {
            "$schema": {"type": "string",
                        "description": "where an editor finds this schema (ignored by initorch)"},
            "description": {"type": "string"},
            "extends": {
                "description": "parent profiles (names or relative paths), applied depth-first",
                "oneOf": [{"type": ["string", "null"]},
                          {"type": "array", "items": {"type": "string"}}],
            },
            "device": _device_section([s for s in declared if s.key.startswith("device.")]),
            "config": {"oneOf": [{"type": "null"}, config],
                       "description": "settings read by steps and conditions"},
            "env": {
                "description": "environment variables set before the first step; the "
                               "process environment wins; null drops an earlier profile's",
                "type": ["object", "null"],
                "propertyNames": {"pattern": ENV_NAME.pattern},
                "additionalProperties": {"type": ["string", "integer", "null"]},
            },
            "steps": {
                "type": ["object", "null"],
                "propertyNames": {"pattern": f"^{STEP_NAME.pattern}$"},
                "additionalProperties": False,
                "properties": {step.name: {**step_body, "description": step.description}
                               for step in registered},
            },
        },
    }
