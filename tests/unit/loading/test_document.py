"""initorch.loading.document: the profile format, validated with every problem collected."""

from __future__ import annotations

import textwrap

import pytest

from initorch.errors import ProfileError
from initorch.loading.document import (
    CORE_DEVICE_FIELDS,
    STEP_FIELDS,
    TOP_LEVEL_KEYS,
    parse_profile,
)
from tests.support.profiles import assert_problem


def parse(text: str):
    return parse_profile(textwrap.dedent(text).lstrip("\n"), "p.yaml", "p")


def parse_error(text: str) -> ProfileError:
    with pytest.raises(ProfileError) as caught:
        parse(text)
    return caught.value


def settings_of(text: str) -> dict[str, object]:
    return {s.key: s.value for s in parse(text).settings}


FULL = """
description: a full profile
extends: [base, ../other.yaml]
device:
  type: NPU
  aliases: [Ascend, HW]
  torch_module: torch.npu
  collective_backend: hccl
config:
  hicache:
    layout: page_first_direct
    sizes: [1, 2]
  top: 3
steps:
  set_device: {}
  plain:
  init_torch_distributed:
    requires: init_shared_mooncake_transfer_engine
    after: [a, b]
    remove: {before: c}
    timeout: 2.5
    enabled: false
    reason: not today
    when: mooncake.enabled and device.type != "mps"
"""


def test_full_profile_parses_into_located_records():
    doc = parse(FULL)
    assert (doc.name, doc.path, doc.description) == ("p", "p.yaml", "a full profile")
    assert [(ref, str(at)) for ref, at in doc.extends] == [("base", "p.yaml:2:11"),
                                                           ("../other.yaml", "p.yaml:2:17")]
    assert doc.device_type is not None
    assert (doc.device_type.value, str(doc.device_type.location)) == ("npu", "p.yaml:4:9")
    values = {s.key: s.value for s in doc.settings}
    assert values == {
        "device.type": "npu",
        "device.aliases": ["ascend", "hw"],
        "device.torch_module": "torch.npu",
        "device.collective_backend": "hccl",
        "hicache.layout": "page_first_direct",
        "hicache.sizes": [1, 2],
        "top": 3,
    }
    assert all(s.source == "p" for s in doc.settings)
    located = {s.key: str(s.location) for s in doc.settings}
    assert located["hicache.layout"] == "p.yaml:10:13"
    assert located["top"] == "p.yaml:12:8"


def test_step_entries_keep_edges_and_overrides_with_locations():
    steps = {entry.name: entry for entry in parse(FULL).steps}
    assert list(steps) == ["set_device", "plain", "init_torch_distributed"]
    assert steps["set_device"].changes == () and steps["set_device"].overrides == ()
    assert str(steps["plain"].location) == "p.yaml:15:3"
    entry = steps["init_torch_distributed"]
    changes = [(c.kind, c.target, c.add, str(c.location)) for c in entry.changes]
    assert changes == [
        ("requires", "init_shared_mooncake_transfer_engine", True, "p.yaml:17:15"),
        ("after", "a", True, "p.yaml:18:13"),
        ("after", "b", True, "p.yaml:18:16"),
        ("before", "c", False, "p.yaml:19:22"),
    ]
    overrides = {o.key: o.value for o in entry.overrides}
    assert overrides == {"timeout": 2.5, "enabled": False, "reason": "not today",
                         "when": 'mooncake.enabled and device.type != "mps"'}


@pytest.mark.parametrize("text", ["", "# nothing\n"])
def test_empty_profile(text):
    error = parse_error(text)
    assert "profile is empty" in str(error)
    assert str(error.location) == "p.yaml"


@pytest.mark.parametrize("text", ["- a\n- b\n", "just text\n", "3\n"])
def test_top_level_must_be_a_mapping(text):
    error = parse_error(text)
    assert "must be a mapping at the top level" in str(error)


# (profile text, fragments of the problem, where) -- each is the only problem in its profile.
INVALID = [
    ("descripton: x\n", ("unknown key 'descripton'", "did you mean 'description'?"), "p.yaml:1:1"),
    ("colour: x\n", ("unknown key 'colour'", "allowed: " + ", ".join(TOP_LEVEL_KEYS)),
     "p.yaml:1:1"),
    ("description: 5\n", ("description must be a string",), "p.yaml:1:14"),
    ("extends: 5\n", ("'extends' must be a string or a list of strings",), "p.yaml:1:10"),
    ("extends: [a, 5]\n", ("'extends' must be a string or a list of strings",), "p.yaml:1:10"),
    ("device: npu\n", ("'device' must be a mapping",), "p.yaml:1:9"),
    ("device:\n  Typ: npu\n", ("device field 'Typ' is not a valid name",), "p.yaml:2:3"),
    ("device:\n  type: 5\n", ("device.type must be a non-empty string",), "p.yaml:2:9"),
    ("device:\n  type: ''\n", ("device.type must be a non-empty string",), "p.yaml:2:9"),
    ("device:\n  type: npu-2\n", ("device.type 'npu-2' is not a valid type name",), "p.yaml:2:9"),
    ("device:\n  type: 9npu\n", ("is not a valid type name",), "p.yaml:2:9"),
    ("device:\n  aliases: [1]\n", ("'aliases' must be a string or a list of strings",),
     "p.yaml:2:12"),
    ("device:\n  suggested_for: [gpu, 'a b']\n",
     ("device.suggested_for 'a b' is not a valid type name",), "p.yaml:2:24"),
    ("config: [a]\n", ("'config' must be a mapping",), "p.yaml:1:9"),
    ("config:\n  Bad: 1\n", ("config key 'Bad' is not a valid name",), "p.yaml:2:3"),
    ("config:\n  \"a\\nb\": 1\n", ("config key 'a\\nb' is not a valid name",), "p.yaml:2:3"),
    ("config:\n  \"abc\\n\": 1\n", ("config key 'abc\\n' is not a valid name",), "p.yaml:2:3"),
    ("config:\n  h\u043est: 1\n",
     ("config key 'h\u043est' contains the non-ASCII character '\u043e'",
      "CYRILLIC SMALL LETTER O", "looks like 'o'"), "p.yaml:2:3"),
    ("$schema: 5\n", ("$schema must be a string",), "p.yaml:1:10"),
    ("config:\n  a:\n    b-c: 1\n", ("config key 'b-c' is not a valid name",), "p.yaml:3:5"),
    ("config:\n  device: {type: cpu}\n", ("config key 'device' is reserved",), "p.yaml:2:3"),
    ("steps: [set_device]\n", ("'steps' must be a mapping of step name to overrides",),
     "p.yaml:1:8"),
    ("steps:\n  Set-Device: {}\n", ("step name 'Set-Device' is not a valid name",), "p.yaml:2:3"),
    ("steps:\n  \"set_device\\n\": {}\n", ("step name 'set_device\\n' is not a valid name",),
     "p.yaml:2:3"),
    ("steps:\n  s\u0435t_device: {}\n",
     ("step name 's\u0435t_device' contains the non-ASCII character '\u0435' (U+0435 "
      "CYRILLIC SMALL LETTER IE, looks like 'e') at position 2",), "p.yaml:2:3"),
    ("steps:\n  x:\n    after: [\uff53et_device]\n", ("step name '\uff53et_device' contains the "
                                                   "non-ASCII character '\uff53'",
                                                   "FULLWIDTH LATIN SMALL LETTER S",
                                                   "looks like 's'"), "p.yaml:3:13"),
    ("steps:\n  x: [after]\n", ("overrides of step 'x' must be a mapping",), "p.yaml:2:6"),
    ("steps:\n  x:\n    aftr: [y]\n", ("unknown key 'aftr'", "did you mean 'after'?"),
     "p.yaml:3:5"),
    ("steps:\n  x:\n    after: [1]\n", ("'after' must be a step name or a list of step names",),
     "p.yaml:3:12"),
    ("steps:\n  x:\n    enabled: maybe\n", ("steps.x.enabled must be true or false",),
     "p.yaml:3:14"),
    ("steps:\n  x:\n    reason: 5\n", ("steps.x.reason must be a string",), "p.yaml:3:13"),
    ("steps:\n  x:\n    timeout: 0\n", ("steps.x.timeout must be a positive",),
     "p.yaml:3:14"),
    ("steps:\n  x:\n    timeout: -1\n", ("steps.x.timeout must be a positive",),
     "p.yaml:3:14"),
    ("steps:\n  x:\n    timeout: true\n", ("steps.x.timeout must be a positive",),
     "p.yaml:3:14"),
    ("steps:\n  x:\n    timeout: '5'\n", ("steps.x.timeout must be a positive",),
     "p.yaml:3:14"),
    ("steps:\n  x:\n    timeout: .inf\n", ("steps.x.timeout must be a positive, finite number",
                                          "got inf"), "p.yaml:3:14"),
    ("steps:\n  x:\n    timeout: .nan\n", ("steps.x.timeout must be a positive, finite number",),
     "p.yaml:3:14"),
    ("steps:\n  x:\n    timeout: 1e9\n", ("up to 604800",), "p.yaml:3:14"),
    ("steps:\n  x:\n    retries: 1e300\n",
     ("steps.x.retries must be a whole number from 0 to 100",), "p.yaml:3:14"),
    ("steps:\n  x:\n    retries: -1\n", ("steps.x.retries must be a whole number from 0 to 100",),
     "p.yaml:3:14"),
    ("steps:\n  x:\n    retries: 1.5\n", ("steps.x.retries must be a whole number from 0 to 100",),
     "p.yaml:3:14"),
    ("steps:\n  x:\n    retries: true\n", ("steps.x.retries must be a whole number from 0 to 100",),
     "p.yaml:3:14"),
    ("steps:\n  x:\n    when: 5\n", ("steps.x.when must be a condition string",), "p.yaml:3:11"),
    ("steps:\n  x:\n    when: 'a +'\n", ("condition 'a +' is not a valid expression",),
     "p.yaml:3:11"),
    ("steps:\n  x:\n    when: 'f(a)'\n", ("uses unsupported syntax 'f(a)'",), "p.yaml:3:11"),
    ("steps:\n  x:\n    remove: [y]\n", ("steps.x.remove must map edge kinds to step names",),
     "p.yaml:3:13"),
    ("steps:\n  x:\n    remove: {aftr: y}\n", ("unknown key 'aftr'", "did you mean 'after'?"),
     "p.yaml:3:14"),
]


@pytest.mark.parametrize(("text", "fragments", "where"), INVALID,
                         ids=[case[0].replace("\n", "|") for case in INVALID])
def test_invalid_profile_reports_the_problem_where_it_is(text, fragments, where):
    error = parse_error(text)
    assert len(error.problems) == 1, [str(p) for p in error.problems]
    assert_problem(error, *fragments, at=where)


def test_all_problems_are_collected_in_one_error():
    error = parse_error("""
        confg: {}
        device:
          type: cpu
          Colective_backend: gloo
        steps:
          set_device:
            timeout: -1
            retries: x
            enabled: maybe
            when: "__import__('os')"
            aftr: [a]
        """)
    assert len(error.problems) == 7
    assert "7 problem(s) in p.yaml" in error.args[0]
    for fragment, where in [("unknown key 'confg'", "p.yaml:1:1"),
                            ("device field 'Colective_backend'", "p.yaml:4:3"),
                            ("timeout", "p.yaml:7:14"),
                            ("retries", "p.yaml:8:14"),
                            ("enabled", "p.yaml:9:14"),
                            ("unsupported syntax", "p.yaml:10:11"),
                            ("unknown key 'aftr'", "p.yaml:11:5")]:
        assert_problem(error, fragment, at=where)


def test_problems_are_reported_in_file_order():
    # A user reads the list top to bottom next to the file.  Oddity: top-level
    # unknown keys are collected before the device section's problems.
    error = parse_error("""
        device:
          Colective_backend: gloo
        confg: {}
        """)
    lines = [p.location.line for p in error.problems if p.location]
    assert lines == sorted(lines)


@pytest.mark.parametrize(("text", "expected"), [
    ("device:\n  type: '  NPU '\n", {"device.type": "npu"}),
    ("device:\n  aliases: HIP\n", {"device.aliases": ["hip"]}),
    ("config:\n  a:\n    b:\n      c: null\n", {"a.b.c": None}),
    ("config:\n  a: {}\n", {}),
    ("config:\n  flag: false\n  n: 1.5\n", {"flag": False, "n": 1.5}),
    ("device:\nconfig:\nsteps:\nextends:\n", {}),
])
def test_settings_are_flattened_to_dotted_keys(text, expected):
    assert settings_of(text) == expected


def test_suggested_names_are_no_setting():
    document = parse("device:\n  type: cuda\n  suggested_for: [GPU, nvidia]\n")
    assert document.suggested_for == ("gpu", "nvidia")
    assert {s.key for s in document.settings} == {"device.type"}


@pytest.mark.parametrize(("override", "value"), [
    ("timeout: null", None), ("timeout: 3", 3), ("retries: 0", 0), ("when: null", None),
    ("enabled: true", True), ("reason: ''", ""),
])
def test_valid_step_overrides(override, value):
    entry = parse(f"steps:\n  x:\n    {override}\n").steps[0]
    assert [(o.key, o.value) for o in entry.overrides] == [(override.split(":")[0], value)]


def test_field_tables_name_every_edge_kind():
    # The schema and the parser are both built from these tables.
    assert {"requires", "wants", "after", "before", "remove"} <= set(STEP_FIELDS)
    # Only these device fields belong to the format; the others are declared settings.
    assert CORE_DEVICE_FIELDS == ("type", "aliases", "suggested_for")
    assert "$schema" in TOP_LEVEL_KEYS
