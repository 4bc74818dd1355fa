"""initorch.loading.schema: the JSON Schema of profiles agrees with the parser and the
declared settings."""

from __future__ import annotations

import json
from importlib.resources import files

import jsonschema
import pytest
import yaml

from initorch import Registry
from initorch.errors import ProfileError
from initorch.loading.compose import ComposedProfile
from initorch.loading.document import read_profile
from initorch.loading.schema import profile_schema
from initorch.plugin import setting
from initorch.resolution.resolve import lint
from tests.support.profiles import BUILTIN_PROFILES
from tests.support.synthetic import define

SETTINGS = (
    setting("a.flag", bool, default=False, description="a switch"),
    setting("a.count", int, default=1, minimum=0, maximum=10, description="a bounded count"),
    setting("a.ratio", float, default=0.5, exclusive_minimum=0, description="a ratio"),
    setting("a.mode", str, default="fast", choices=("fast", "safe"), description="a mode"),
    setting("a.names", list[str], default=[], description="some names"),
    setting("a.maybe", str, nullable=True, description="text or null"),
    setting("b.c.deep", int, default=0, description="nested two levels"),
    setting("device.thing", str, required=True, pattern=r"[a-z]+", description="a device fact"),
)
STEP_NAMES = ("x", "y", "z", "one", "two", "three", "four", "five", "six")


def schema_registry() -> Registry:
    registry = Registry()
    registry.steps.add(define("x", settings=SETTINGS, retry_on=(OSError,)))
    registry.steps.add(define("z", after=["five"], requires=["six"]))
    for name in STEP_NAMES[1:]:
        if name == "z":
            continue
        registry.steps.add(define(name))
    return registry


REGISTRY = schema_registry()
SCHEMA = profile_schema(REGISTRY.settings, REGISTRY.steps)
VALIDATOR = jsonschema.Draft7Validator(SCHEMA)


def schema_accepts(text: str) -> bool:
    return VALIDATOR.is_valid(yaml.safe_load(text))


def initorch_accepts(text: str, registry: Registry = REGISTRY) -> bool:
    """The file's format, its settings and the steps it names (what needs no parents)."""
    try:
        doc = read_profile(text, "p.yaml", "p")
    except ProfileError:
        return False
    composed = ComposedProfile((doc,), {s.key: s for s in doc.settings},
                               {entry.name: (entry,) for entry in doc.steps})
    return not lint(composed, registry.steps)


def test_schema_is_a_valid_draft_07_schema_and_means_the_same_in_2020_12(builtin_registry):
    # draft-07: what yaml-language-server (the VS Code YAML extension) validates with.
    schema = profile_schema(builtin_registry.settings, builtin_registry.steps)
    assert schema["$schema"] == "http://json-schema.org/draft-07/schema#"
    for validator in (jsonschema.Draft7Validator, jsonschema.Draft202012Validator):
        validator.check_schema(schema)
        validator.check_schema(SCHEMA)
    for text in [*VALID.values(), *INVALID.values()]:
        data = yaml.safe_load(text)
        assert jsonschema.Draft7Validator(SCHEMA).is_valid(data) == \
            jsonschema.Draft202012Validator(SCHEMA).is_valid(data)


def test_cli_prints_the_schema_of_the_installed_plugins(run_cli, builtin_registry):
    code, out, _ = run_cli("schema")
    assert code == 0
    assert json.loads(out) == profile_schema(builtin_registry.settings, builtin_registry.steps)


@pytest.mark.parametrize("name", BUILTIN_PROFILES)
def test_every_builtin_profile_validates(name, builtin_registry):
    text = files("initorch.profiles").joinpath(f"{name}.yaml").read_text("utf-8")
    schema = profile_schema(builtin_registry.settings, builtin_registry.steps)
    validator = jsonschema.Draft7Validator(schema)
    assert [e.message for e in validator.iter_errors(yaml.safe_load(text))] == []
    assert initorch_accepts(text, builtin_registry)


def test_schema_documents_every_field_setting_and_step(builtin_registry):
    schema = profile_schema(builtin_registry.settings, builtin_registry.steps)
    device = schema["properties"]["device"]["properties"]
    assert all(field.get("description") for field in device.values())
    assert device["host_allocator"]["enum"] == ["cuda_host_register", "pin_memory",
                                                "pin_memory_xpu", "plain"]
    assert "required" in device["backend_package"]["description"]
    overrides = schema["properties"]["steps"]["properties"]["set_device"]["properties"]
    assert all(field.get("description") for field in overrides.values())
    steps = schema["properties"]["steps"]["properties"]
    assert set(steps) == {s.name for s in builtin_registry.steps}
    assert steps["set_device"]["description"].startswith("Set this rank's device")
    config = schema["properties"]["config"]["oneOf"][1]["properties"]
    layout = config["hicache"]["properties"]["layout"]
    assert (layout["type"], layout["default"]) == ("string", "page_first")
    assert "page_first_kv_split" in layout["enum"]
    assert layout["description"]
    timeout = config["distributed"]["properties"]["timeout_s"]
    assert (timeout["exclusiveMinimum"], timeout["default"]) == (0, 120.0)


def test_the_schema_follows_what_plugins_declare(builtin_registry):
    registry = Registry.with_plugins()
    registry.steps.add(define("warm_cache", settings=setting(
        "warmup.pages", int, default=8, minimum=1, description="pages to touch")))
    registry.settings.extend_choices("device.host_allocator",
                                     {"numa_pinned": lambda nbytes, memory: memory(nbytes)})
    schema = profile_schema(registry.settings, registry.steps)
    config = schema["properties"]["config"]["oneOf"][1]["properties"]
    assert config["warmup"]["properties"]["pages"]["minimum"] == 1
    assert "warm_cache" in schema["properties"]["steps"]["properties"]
    assert "numa_pinned" in schema["properties"]["device"]["properties"]["host_allocator"]["enum"]


VALID = {
    "minimal": "device: {type: cpu}\n",
    "schema-key": "$schema: ./profile.schema.json\ndevice: {type: cpu}\n",
    "retries-float-whole": "steps: {x: {retries: 1.0}}\n",  # JSON cannot tell 1.0 from 1
    "everything": """
description: all fields
extends: [base, ../x.yaml]
device:
  type: npu
  aliases: [ascend]
  thing: abc
config:
  a: {flag: true, count: 10, ratio: 0.001, mode: safe, names: [p, q], maybe: null}
  b: {c: {deep: -3}}
steps:
  x: {}
  y: null
  z:
    requires: one
    wants: [two]
    after: [three]
    before: four
    remove: {after: five, requires: [six]}
    when: a.flag and a.mode == 'safe'
    enabled: false
    reason: because
    timeout: 2.5
    retries: 0
""",
    "whole-float-for-an-int": "config: {a: {count: 2.0}}\n",
    "int-for-a-float": "config: {a: {ratio: 3}}\n",
    "extends-string": "extends: cpu\n",
    "aliases-string": "device: {aliases: hip}\n",
    "null-overrides": "steps:\n  x: {when: null, timeout: null}\n",
    "empty-config-table": "config:\n  a: {}\n",
    "empty-steps-section": "device: {type: cpu}\nsteps:\n",
    "empty-config-section": "device: {type: cpu}\nconfig:\n",
    # The parser strips and lower-cases device.type.
    "padded-device-type": "device: {type: ' npu '}\n",
}

INVALID = {
    "top-level-list": "- a\n",
    "unknown-top-key": "colour: red\n",
    "schema-key-number": "$schema: 5\n",
    "description-number": "description: 5\n",
    "extends-number": "extends: 5\n",
    "extends-list-of-numbers": "extends: [1]\n",
    "device-string": "device: npu\n",
    "device-unknown-field": "device: {typ: npu}\n",
    "device-type-number": "device: {type: 5}\n",
    "device-type-empty": "device: {type: ''}\n",
    "device-type-dash": "device: {type: npu-2}\n",
    "device-type-digit-first": "device: {type: 9npu}\n",
    "device-aliases-numbers": "device: {aliases: [1]}\n",
    "device-setting-pattern": "device: {thing: ABC}\n",
    "device-setting-empty": "device: {thing: ''}\n",
    "device-setting-null": "device: {thing: null}\n",
    "config-list": "config: [a]\n",
    "config-bad-key": "config: {Bad: 1}\n",
    "config-bad-nested-key": "config: {a: {B-c: 1}}\n",
    "config-device-reserved": "config: {device: {type: cpu}}\n",
    "config-unknown-setting": "config: {a: {flg: true}}\n",
    "config-unknown-section": "config: {zz: {flag: true}}\n",
    "config-section-as-value": "config: {a: 5}\n",
    "config-value-as-section": "config: {a: {flag: {x: 1}}}\n",
    "bool-as-text": "config: {a: {flag: 'false'}}\n",
    "bool-as-number": "config: {a: {flag: 1}}\n",
    "int-as-text": "config: {a: {count: '3'}}\n",
    "int-fraction": "config: {a: {count: 1.5}}\n",
    "int-above-maximum": "config: {a: {count: 11}}\n",
    "int-below-minimum": "config: {a: {count: -1}}\n",
    "int-huge": "config: {b: {c: {deep: 99999999999999999999999}}}\n",
    "float-inf": "config: {a: {ratio: .inf}}\n",
    "float-overflow": "config: {a: {ratio: 1e999}}\n",
    "float-zero-exclusive": "config: {a: {ratio: 0}}\n",
    "text-not-a-choice": "config: {a: {mode: quick}}\n",
    "text-with-newline": "config: {a: {maybe: \"x\\ny\"}}\n",
    "text-with-escape": "config: {a: {maybe: \"\\e[31m\"}}\n",
    "text-as-number": "config: {a: {maybe: 3}}\n",
    "null-not-allowed": "config: {a: {mode: null}}\n",
    "list-of-numbers": "config: {a: {names: [1]}}\n",
    "list-as-text": "config: {a: {names: p}}\n",
    "steps-list": "steps: [a]\n",
    "step-unknown": "steps: {w: {}}\n",
    "step-bad-name": "steps: {Bad-Name: {}}\n",
    "step-body-list": "steps: {x: [a]}\n",
    "step-unknown-override": "steps: {x: {aftr: [y]}}\n",
    "step-edge-number": "steps: {x: {after: [1]}}\n",
    "step-edge-unknown": "steps: {x: {after: [w]}}\n",
    "enabled-text": "steps: {x: {enabled: maybe}}\n",
    "reason-number": "steps: {x: {reason: 5}}\n",
    "timeout-zero": "steps: {x: {timeout: 0}}\n",
    "timeout-negative": "steps: {x: {timeout: -1}}\n",
    "timeout-bool": "steps: {x: {timeout: true}}\n",
    "timeout-text": "steps: {x: {timeout: '5'}}\n",
    "timeout-inf": "steps: {x: {timeout: .inf}}\n",
    "timeout-beyond-a-week": "steps: {x: {timeout: 1e9}}\n",
    "retries-negative": "steps: {x: {retries: -1}}\n",
    "retries-fraction": "steps: {x: {retries: 1.5}}\n",
    "retries-bool": "steps: {x: {retries: true}}\n",
    "retries-huge": "steps: {x: {retries: 1000}}\n",
    "remove-list": "steps: {x: {remove: [y]}}\n",
    "remove-unknown-kind": "steps: {x: {remove: {aftr: y}}}\n",
}


def test_nan_is_refused_although_json_schema_cannot_say_so():
    # JSON has no NaN, so JSON Schema has no way to refuse YAML's .nan (every comparison
    # with NaN is false, so bounds let it through); initorch refuses it.
    text = "config: {a: {ratio: .nan}}\n"
    assert (initorch_accepts(text), schema_accepts(text)) == (False, True)


@pytest.mark.parametrize("text", VALID.values(), ids=VALID.keys())
def test_initorch_and_the_schema_accept_the_same_profiles(text):
    assert (initorch_accepts(text), schema_accepts(text)) == (True, True)


@pytest.mark.parametrize("text", INVALID.values(), ids=INVALID.keys())
def test_initorch_and_the_schema_reject_the_same_profiles(text):
    assert (initorch_accepts(text), schema_accepts(text)) == (False, False)
