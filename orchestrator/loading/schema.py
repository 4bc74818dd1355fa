"""The JSON Schema of profile files (``initorch schema``), for editors and CI.

Built from the same field tables the parser uses (:mod:`initorch.loading.document`),
so the schema and the validator cannot drift apart.  The parser remains the
authority (it also checks step names, conditions and cross-file rules).
"""

from __future__ import annotations

from typing import Any

from initorch.loading.document import DEVICE_FIELDS, ENV_NAME, STEP_OVERRIDES
from initorch.model.registry import STEP_NAME
from initorch.model.step import EDGE_KINDS

SCHEMA_ID = "https://initorch.dev/schema/profile.json"

_NAMES: dict[str, Any] = {
    "oneOf": [
        {"type": "string", "pattern": STEP_NAME.pattern},
        {"type": "array", "items": {"type": "string", "pattern": STEP_NAME.pattern}},
    ]
}

_EDGE_ITEM: dict[str, Any] = {
    "oneOf": [
        {"type": "string", "pattern": STEP_NAME.pattern},
        {"type": "object", "additionalProperties": False, "required": ["step"],
         "properties": {"step": {"type": "string", "pattern": STEP_NAME.pattern},
                        "reason": {"type": "string", "pattern": r"\S"}}},
    ]
}
_EDGES: dict[str, Any] = {"oneOf": [_EDGE_ITEM, {"type": "array", "items": _EDGE_ITEM}]}

_OVERRIDE_TYPES: dict[str, Any] = {
    "enabled": {"type": "boolean"},
    "reason": {"type": "string"},
    "when": {"type": ["string", "null"]},
    "timeout": {"type": ["number", "null"], "exclusiveMinimum": 0},
    "retries": {"type": "integer", "minimum": 0},
    **{kind: _EDGES for kind in EDGE_KINDS},
    "remove": {
        "type": "object",
        "additionalProperties": False,
        "properties": {kind: _NAMES for kind in EDGE_KINDS},
    },
}


def _config_node() -> dict[str, Any]:
    return {
        "type": "object",
        "propertyNames": {"pattern": "^[a-z_][a-z0-9_]*$"},
        "additionalProperties": {
            "oneOf": [
                {"$ref": "#/$defs/config"},
                {"type": ["string", "number", "boolean", "null", "array"]},
            ]
        },
    }


def profile_schema() -> dict[str, Any]:
    """The schema as a JSON-compatible dict (draft 2020-12)."""
    device_properties: dict[str, Any] = {
        name: {"type": "string", "pattern": r"\S", "description": text}
        for name, text in DEVICE_FIELDS.items()
    }
    device_properties["aliases"] = {
        "oneOf": [{"type": "string"}, {"type": "array", "items": {"type": "string"}}],
        "description": DEVICE_FIELDS["aliases"],
    }
    # The parser strips blanks and lower-cases the type.
    device_properties["type"]["pattern"] = r"^\s*[a-zA-Z_][a-zA-Z0-9_]*\s*$"
    step_properties = {
        name: {**_OVERRIDE_TYPES[name], "description": text}
        for name, text in STEP_OVERRIDES.items()
    }
    return {
        "$schema": "https://json-schema.org/draft/2020-12/schema",
        "$id": SCHEMA_ID,
        "title": "initorch profile",
        "type": "object",
        "additionalProperties": False,
        "properties": {
            "description": {"type": "string"},
            "extends": {
                "description": "parent profiles (names or relative paths), applied depth-first",
                "oneOf": [{"type": ["string", "null"]},
                          {"type": "array", "items": {"type": "string"}}],
            },
            # An empty section (`device:` with nothing under it) is null in YAML.
            "device": {"type": ["object", "null"], "additionalProperties": False,
                       "properties": device_properties},
            "config": {"oneOf": [{"type": "null"},
                                 {"$ref": "#/$defs/config", "not": {"required": ["device"]}}]},
            "env": {
                "description": "environment variables set before the first step; the "
                               "process environment wins; null drops an earlier profile's",
                "type": ["object", "null"],
                "propertyNames": {"pattern": ENV_NAME.pattern},
                "additionalProperties": {"type": ["string", "integer", "null"]},
            },
            "steps": {
                "type": ["object", "null"],
                "propertyNames": {"pattern": STEP_NAME.pattern},
                "additionalProperties": {
                    "type": ["object", "null"],
                    "additionalProperties": False,
                    "properties": step_properties,
                },
            },
        },
        "$defs": {"config": _config_node()},
    }
