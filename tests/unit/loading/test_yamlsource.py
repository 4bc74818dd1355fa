"""initorch.loading.yamlsource: safe YAML that keeps positions and rejects duplicate keys."""

from __future__ import annotations

import contextlib
import re
import textwrap

import pytest
import yaml
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from initorch.errors import ProfileError
from initorch.loading import yamlsource
from initorch.loading.yamlsource import MAX_ALIAS_EXPANSION, alias_budget, parse_yaml
from initorch.location import SourceLocation

DOC = textwrap.dedent("""\
    top: 1
    device:
      type: npu
      list:
        - a
        - b
    flow: {x: 1, y: [2, 3]}
    """)


def parse_error(text: str) -> ProfileError:
    with pytest.raises(ProfileError) as caught:
        parse_yaml(textwrap.dedent(text), "f.yaml")
    return caught.value


def test_plain_data_is_the_safe_loader_result():
    doc = parse_yaml(DOC, "f.yaml")
    assert doc.data == {"top": 1, "device": {"type": "npu", "list": ["a", "b"]},
                        "flow": {"x": 1, "y": [2, 3]}}
    assert doc.path == "f.yaml"


@pytest.mark.parametrize(("keys", "where"), [
    ((), "f.yaml:1:1"),
    (("top",), "f.yaml:1:6"),
    (("device",), "f.yaml:3:3"),
    (("device", "type"), "f.yaml:3:9"),
    (("device", "list", 1), "f.yaml:6:7"),
    (("flow", "y", 0), "f.yaml:7:18"),
])
def test_value_positions_are_one_based(keys, where):
    assert str(parse_yaml(DOC, "f.yaml").where(*keys)) == where


@pytest.mark.parametrize(("keys", "where"), [
    (("device",), "f.yaml:2:1"),
    (("device", "type"), "f.yaml:3:3"),
    (("flow", "y"), "f.yaml:7:14"),
])
def test_key_positions(keys, where):
    assert str(parse_yaml(DOC, "f.yaml").key_where(*keys)) == where


def test_where_falls_back_to_the_nearest_enclosing_value():
    doc = parse_yaml(DOC, "f.yaml")
    assert doc.where("device", "missing", "deeper") == doc.where("device")
    # a key that was never written falls back to its value's (or its parent's) position
    assert doc.key_where("device", "missing") == doc.where("device")


def test_empty_document_has_no_data():
    doc = parse_yaml("# only a comment\n", "f.yaml")
    assert doc.data is None
    assert doc.where("anything") == SourceLocation("f.yaml")


@pytest.mark.parametrize(("text", "key", "at", "first_line"), [
    ("a: 1\nb: 2\na: 3\n", "a", "f.yaml:3:1", 1),
    ("device:\n  type: cpu\n  type: cuda\n", "type", "f.yaml:3:3", 2),
    ("flow: {b: 1, b: 2}\n", "b", "f.yaml:1:14", 1),
    ("steps:\n  x:\n    after: [a]\n    after: [b]\n", "after", "f.yaml:4:5", 3),
])
def test_duplicate_keys_are_rejected_naming_both_lines(text, key, at, first_line):
    error = parse_error(text)
    assert str(error.location) == at
    assert f"duplicate key '{key}'" in str(error)
    assert f"first given at line {first_line}" in str(error)
    assert error.problems[0].hint


def test_same_key_in_different_mappings_is_fine():
    assert parse_yaml("a: {x: 1}\nb: {x: 2}\n", "f.yaml").data == {"a": {"x": 1}, "b": {"x": 2}}


@pytest.mark.parametrize(("text", "kind"), [
    ("1: x\n", "int"),
    ("true: x\n", "bool"),
    ("null: x\n", "NoneType"),
    ("[a]: x\n", "list"),
])
def test_mapping_keys_must_be_strings(text, kind):
    error = parse_error(text)
    assert f"mapping keys must be strings, not {kind}" in str(error)
    assert str(error.location) == "f.yaml:1:1"
    assert "quote the key" in str(error)


@pytest.mark.parametrize(("text", "at"), [
    ("device:\n  type: [cpu\n", "f.yaml:3:1"),
    ("a:\n\tb: 1\n", "f.yaml:2:1"),
    ("a: 1\n---\nb: 2\n", "f.yaml:2:1"),
    ("a: 'open\n", "f.yaml:2:1"),
    ("a: b: c\n", "f.yaml:1:5"),
])
def test_invalid_yaml_reports_a_position(text, at):
    error = parse_error(text)
    assert str(error).startswith(f"{at}: invalid YAML: ")
    assert "\n" not in str(error)


def test_python_tags_never_construct_objects(tmp_path):
    marker = tmp_path / "pwned"
    text = f"a: !!python/object/apply:os.system ['touch {marker}']\n"
    with contextlib.suppress(ProfileError):
        parse_yaml(text, "f.yaml")
    assert not marker.exists()


@pytest.mark.parametrize("text", [
    "a: !!python/name:os.system\n",
    "a: !custom value\n",
])
def test_unknown_tags_are_a_profile_error_with_position(text):
    # BUG: yamlsource._build calls loader.construct_object outside the try, so the
    # safe loader's ConstructorError escapes as a traceback instead of a ProfileError.
    error = parse_error(text)
    assert str(error.location) == "f.yaml:1:4"


def test_recursive_alias_is_a_profile_error():
    # BUG: _build follows aliases without memo, so a self-referencing anchor recurses
    # until RecursionError (a traceback from 'initorch plan').
    error = parse_error("a: &x [*x]\n")
    assert error.location is not None
    assert error.location.path == "f.yaml"


def test_aliases_are_expanded():
    doc = parse_yaml("base: &b [1, 2]\ncopy: *b\n", "f.yaml")
    assert doc.data["copy"] == [1, 2]


BOMB = "a: &a [x, x, x, x, x, x, x, x, x, x]\n" + "".join(
    f"{chr(98 + i)}: &{chr(98 + i)} [{', '.join([f'*{chr(97 + i)}'] * 10)}]\n" for i in range(8))


def test_an_alias_bomb_is_refused_naming_aliases():
    # "Billion laughs": 10**9 values from 9 lines.  The budget is the file's length in
    # characters (at least MAX_ALIAS_EXPANSION), so it stops at once, with its position.
    assert len(BOMB) < MAX_ALIAS_EXPANSION
    error = parse_error(BOMB)
    assert f"aliases expand to more than {MAX_ALIAS_EXPANSION} values" in error.args[0]
    assert error.location is not None and error.location.path == "f.yaml"
    assert "alias" in (error.problems[0].hint or "")


def test_a_large_profile_without_aliases_loads():
    # 30k steps with requires lists: about 150k values, far past the old cap of 20000
    # values, and far below one value per character.
    lines = ["steps:"] + [f"  s{i}: {{requires: [s{i - 1}, s{i - 2}]}}" for i in range(30_000)]
    doc = parse_yaml("\n".join(lines) + "\n", "f.yaml")
    assert len(doc.data["steps"]) == 30_000
    assert doc.where("steps", "s29999", "requires", 1) == SourceLocation("f.yaml", 30001, 31)


def test_aliases_may_repeat_what_they_name_within_a_budget_that_grows_with_the_file():
    # Each step merges the same five defaults: 25k values built again through the
    # alias, past a fixed 20000, within one per character of the file.
    text = "defaults: &d {timeout: 5, retries: 1, a: 1, b: 2, c: 3}\nsteps:\n" + "".join(
        f"  s{i}: {{<<: *d, when: flag}}\n" for i in range(5_000))
    doc = parse_yaml(text, "f.yaml")
    assert doc.data["steps"]["s4999"] == {"timeout": 5, "retries": 1, "a": 1, "b": 2, "c": 3,
                                          "when": "flag"}
    assert alias_budget(text) == len(text) > MAX_ALIAS_EXPANSION


def test_merge_key_overrides_are_not_duplicates():
    # YAML merge keys: an explicit key overrides the merged one.  BUG: flatten_mapping
    # puts the merged pairs first, and _build reports the override as a duplicate
    # ("duplicate key 'y' (first given at line 1)"), pointing at the anchor.
    doc = parse_yaml("base: &b {x: 1, y: 2}\nd:\n  <<: *b\n  y: 3\n", "f.yaml")
    assert doc.data["d"] == {"x": 1, "y": 3}


def test_merge_key_without_override_works():
    doc = parse_yaml("base: &b {x: 1}\nd:\n  <<: *b\n  z: 3\n", "f.yaml")
    assert doc.data["d"] == {"x": 1, "z": 3}


# -- plain documents: read from events, without the node tree -----------------------------------
# A document with no anchor, alias, tag or merge key is built straight from the parser's
# events (each distinct plain scalar resolved once); anything else goes to the node
# builder.  Both must give the safe loader's values, and the same positions.

# The spellings YAML 1.1 resolves to something other than text, and near misses.
SPELLINGS = ["yes", "No", "ON", "off", "True", "FALSE", "y", "n", "~", "null", "Null", "NULL",
             "0", "-0", "+12", "0x1F", "0o17", "017", "0b101", "1_000", "1:30", "190:20:30.15",
             ".inf", "-.Inf", ".NaN", "1e3", "1.5e-3", "6.8523015e+5", "685.230_15e+03", "1.",
             "2001-12-14", "2001-12-14t21:59:43.10-05:00", "2001-12-14 21:59:43.10", "12:30am",
             "'yes'", '"1"', "'~'", '"2001-12-14"', "step_a", "0.5.23", "-", "+", "."]
plain_scalars = st.sampled_from(SPELLINGS) | st.from_regex(r"[a-z0-9_.+:-]{1,8}", fullmatch=True)
keys = st.from_regex(r"[a-z][a-z0-9_]{0,6}", fullmatch=True).filter(
    lambda key: isinstance(yaml.safe_load(key), str) and key != "zz_anchor")


@st.composite
def documents(draw: st.DrawFn, depth: int = 0) -> str:
    """A block mapping of flow and block values, written as text."""
    lines = []
    for key in draw(st.lists(keys, min_size=1, max_size=4, unique=True)):
        kind = draw(st.sampled_from(["scalar", "flow", "block"] if depth < 2 else ["scalar"]))
        if kind == "scalar":
            lines.append(f"{key}: {draw(plain_scalars)}")
        elif kind == "flow":
            items = draw(st.lists(plain_scalars, max_size=4))
            lines.append(f"{key}: [{', '.join(items)}]")
        else:
            child = draw(documents(depth + 1))  # type: ignore[call-arg]
            lines += [f"{key}:", *(f"  {line}" for line in child.splitlines())]
    return "\n".join(lines) + "\n"


PROPERTY = settings(max_examples=300, deadline=None, derandomize=True,
                    suppress_health_check=[HealthCheck.too_slow])


@PROPERTY
@given(documents())
def test_plain_documents_give_the_safe_loaders_values(text):
    # The C safe loader when PyYAML has it (as parse_yaml): libyaml's parser and the
    # pure-Python one disagree on a few flow-context corners, which is not under test.
    loader = getattr(yaml, "CSafeLoader", yaml.SafeLoader)
    try:
        expected = yaml.load(text, Loader=loader)  # a safe loader
    except yaml.YAMLError:
        with pytest.raises(ProfileError):
            parse_yaml(text, "f.yaml")
        return
    # repr: NaN is not equal to itself, and 1 == True would hide a wrong type.
    assert repr(parse_yaml(text, "f.yaml").data) == repr(expected)


@PROPERTY
@given(documents())
def test_plain_documents_get_the_node_builders_positions(text):
    try:
        plain = parse_yaml(text, "f.yaml")
    except ProfileError as error:  # e.g. an '=' scalar: the node builder's own message
        with pytest.raises(ProfileError) as again:
            parse_yaml(text + "zz_anchor: &a x\n", "f.yaml")
        assert str(again.value) == str(error)
        return
    # An anchor sends the whole document to the node builder.
    composed = parse_yaml(text + "zz_anchor: &a x\n", "f.yaml")
    assert composed.data.pop("zz_anchor") == "x"
    assert repr(composed.data) == repr(plain.data)
    assert set(plain.value_marks) == set(composed.value_marks) - {("zz_anchor",)}
    for path in plain.value_marks:
        assert plain.where(*path) == composed.where(*path)
        assert plain.key_where(*path) == composed.key_where(*path)


@pytest.mark.parametrize(("text", "said"), [
    ("value: !!python/object:os.system [1]\n",
     "unsupported YAML tag '!!python/object:os.system' on a list"),
    ("value: !!python/object/apply:os.system {args: [id]}\n",
     "unsupported YAML tag '!!python/object/apply:os.system' on a mapping"),
    ("value: !!set {a: null}\n", "unsupported YAML tag '!!set' on a mapping"),
    ("value: !custom [1, 2]\n", "unsupported YAML tag '!custom' on a list"),
])
def test_a_tag_on_a_list_or_mapping_is_refused_by_name(text, said):
    # Issue 19: the tag used to be dropped silently, leaving a plain list behind.
    with pytest.raises(ProfileError) as caught:
        parse_yaml(text, "p.yaml")
    assert caught.value.problems[0].message == said
    assert str(caught.value.location) == "p.yaml:1:8"


def test_the_default_tags_of_lists_and_mappings_are_plain():
    assert parse_yaml("a: !!seq [1]\nb: !!map {c: 2}\n", "p.yaml").data == {"a": [1],
                                                                         "b": {"c": 2}}


def test_a_plain_scalar_is_read_by_the_resolvers_the_loader_has(monkeypatch):
    # Most plain scalars start with a character no implicit resolver reads, and are taken
    # as text at once; a resolver added for that character is still asked.
    class Loader(yamlsource._Loader):  # type: ignore[misc,name-defined]
        pass

    Loader.add_implicit_resolver("tag:yaml.org,2002:null", re.compile(r"^skip$"), ["s"])
    assert parse_yaml("a: skip\nb: step_a\n", "f.yaml").data == {"a": "skip", "b": "step_a"}
    monkeypatch.setattr(yamlsource, "_Loader", Loader)
    assert parse_yaml("a: skip\nb: step_a\n", "f.yaml").data == {"a": None, "b": "step_a"}
    assert yaml.load("a: skip\n", Loader=Loader) == {"a": None}
