"""initorch.loading.compose and .catalog: extends, layering, --set, names vs paths."""

from __future__ import annotations

from pathlib import Path

import pytest

from initorch import load_plan
from initorch.errors import ConflictError, ProfileError
from initorch.loading.catalog import ProfileCatalog, is_path_reference
from initorch.loading.compose import ComposedProfile, compose, parse_assignment
from initorch.location import COMMAND_LINE
from tests.helpers_foundation import BUILTIN_PROFILES, catalog_in, write


def compose_files(tmp_path: Path, files: dict[str, str], refs: list[str],
                  overrides=()) -> ComposedProfile:
    """Write ``files`` into ``tmp_path/lib`` (also the catalog's named profiles)."""
    lib = tmp_path / "lib"
    for name, text in files.items():
        write(lib, name, text)
    return compose(catalog_in(lib), refs, overrides)


def compose_error(tmp_path: Path, files: dict[str, str], refs: list[str], overrides=(),
                  expected: type[ProfileError] = ProfileError) -> ProfileError:
    with pytest.raises(expected) as caught:
        compose_files(tmp_path, files, refs, overrides)
    return caught.value


DIAMOND = {
    "a.yaml": "config:\n  x: 1\n  shared: a\n",
    "b.yaml": "extends: a\nconfig:\n  y: 2\n  shared: b\n",
    "c.yaml": "extends: a.yaml\nconfig:\n  z: 3\n  shared: c\n",
    "d.yaml": "extends: [b, c]\ndevice: {type: cpu}\n",
}


# --- catalog: names vs paths ------------------------------------------------------------

@pytest.mark.parametrize(("ref", "is_path"), [
    ("npu", False), ("mooncake-ep", False), ("npu.yaml", True), ("npu.yml", True),
    ("./npu", True), ("sub/x", True), ("/abs/x.yaml", True),
])
def test_path_references(ref, is_path):
    assert is_path_reference(ref) is is_path


def test_catalog_lists_yaml_files_by_stem(tmp_path):
    write(tmp_path, "b.yaml", "description: b\n")
    write(tmp_path, "a.yml", "description: a\n")
    write(tmp_path, "notes.txt", "not a profile\n")
    (tmp_path / "dir.yaml").mkdir()
    catalog = catalog_in(tmp_path)
    assert catalog.names() == ["a", "b"]
    assert catalog.source("a").plugin == "test"


def test_a_plugin_profile_with_a_taken_name_is_an_error_naming_both(tmp_path):
    # It used to be ignored silently (the earlier plugin's profile won).
    write(tmp_path / "one", "x.yaml", "description: first\n")
    write(tmp_path / "two", "x.yaml", "description: second\n")
    write(tmp_path / "two", "y.yaml", "description: also second\n")
    catalog = ProfileCatalog()
    catalog.add_directory(tmp_path / "one", plugin="one")
    with pytest.raises(ProfileError) as caught:
        catalog.add_directory(tmp_path / "two", plugin="two")
    message = str(caught.value)
    assert "profile 'x' of plugin 'two' has the name of profile 'x' of plugin 'one'" in message
    assert str(tmp_path / "one" / "x.yaml") in message and "override=True" in message
    assert catalog.names() == ["x"]  # nothing of the refused directory was added
    assert catalog.load("x").description == "first"


def test_override_replaces_an_earlier_profile_on_purpose(tmp_path):
    write(tmp_path / "one", "x.yaml", "description: first\n")
    write(tmp_path / "two", "x.yaml", "description: second\n")
    catalog = ProfileCatalog()
    catalog.add_directory(tmp_path / "one", plugin="one")
    catalog.add_directory(tmp_path / "two", plugin="two", override=True)
    assert catalog.load("x").description == "second"
    source = catalog.source("x")
    assert source.plugin == "two"
    assert source.replaces is not None and source.replaces.plugin == "one"


def test_one_name_twice_in_a_directory_is_an_error(tmp_path):
    write(tmp_path, "x.yaml", "description: a\n")
    write(tmp_path, "x.yml", "description: b\n")
    with pytest.raises(ProfileError, match="profile 'x' of plugin 'p' has the name of "
                                           "profile 'x' of plugin 'p'"):
        ProfileCatalog().add_directory(tmp_path, plugin="p", override=True)


def test_the_profile_name_auto_is_reserved(tmp_path):
    write(tmp_path, "auto.yaml", "description: a\n")
    with pytest.raises(ProfileError, match="'auto' is reserved for hardware detection"):
        ProfileCatalog().add_directory(tmp_path, plugin="p")


def test_unknown_name_suggests_or_lists(builtin_registry):
    with pytest.raises(ProfileError) as close:
        builtin_registry.profiles.load("np", location=COMMAND_LINE)
    assert "unknown profile 'np'" in str(close.value)
    assert "did you mean 'npu'?" in str(close.value)
    assert close.value.location == COMMAND_LINE
    with pytest.raises(ProfileError) as far:
        builtin_registry.profiles.load("zzzzzz")
    assert f"available: {', '.join(BUILTIN_PROFILES)}" in str(far.value)


def test_missing_and_unreadable_files(tmp_path):
    catalog = ProfileCatalog()
    with pytest.raises(ProfileError) as missing:
        catalog.load(str(tmp_path / "none.yaml"))
    assert "profile file not found" in str(missing.value)
    assert str(tmp_path / "none.yaml") in str(missing.value)
    (tmp_path / "bad.yaml").write_bytes(b"description: \xff\xfe\n")
    with pytest.raises(ProfileError) as undecodable:
        catalog.load(str(tmp_path / "bad.yaml"))
    assert "cannot read profile" in str(undecodable.value)
    (tmp_path / "dir.yaml").mkdir()
    with pytest.raises(ProfileError) as directory:
        catalog.load(str(tmp_path / "dir.yaml"))
    assert "cannot read profile" in str(directory.value)


def test_a_file_is_parsed_once(tmp_path):
    path = write(tmp_path, "x.yaml", "description: x\n")
    catalog = ProfileCatalog()
    assert catalog.load(str(path)) is catalog.load(str(path))


def test_relative_extends_resolve_against_the_referring_file(tmp_path, monkeypatch):
    write(tmp_path / "lib", "parent.yaml", "device: {type: cpu}\n")
    child = write(tmp_path / "lib" / "sub", "child.yaml", "extends: ../parent.yaml\n")
    monkeypatch.chdir(tmp_path)  # not the folder of either file
    composed = compose(ProfileCatalog(), [str(child)])
    assert composed.names == ("parent", "child")
    assert composed.value("device.type") == "cpu"


def test_path_profile_can_extend_a_builtin_name(tmp_path, builtin_registry):
    path = write(tmp_path, "mine.yaml", "extends: npu\nconfig:\n  hicache:\n    host_pool_mb: 8\n")
    composed = compose(builtin_registry.profiles, [str(path)])
    assert composed.names == ("base", "npu", "mine")
    assert composed.value("hicache.host_pool_mb") == 8
    assert composed.value("device.type") == "npu"


# --- extends and layering ----------------------------------------------------------------

def test_extends_is_depth_first_left_to_right_and_shared_parents_apply_once(tmp_path):
    composed = compose_files(tmp_path, DIAMOND, ["d"])
    assert composed.names == ("a", "b", "c", "d")
    assert composed.values() == {"x": 1, "shared": "c", "y": 2, "z": 3, "device.type": "cpu"}
    assert composed.settings["shared"].source == "c"
    assert str(composed.settings["shared"].location).endswith("c.yaml:4:11")


def test_layered_profiles_apply_later_over_earlier(builtin_registry):
    composed = compose(builtin_registry.profiles, ["npu", "npu-hccl"])
    assert composed.names == ("base", "npu", "npu-hccl")
    assert composed.value("mooncake.ascend_build") == "hccl"  # npu-hccl over npu over base
    assert composed.value("device.type") == "npu"
    assert composed.value("hicache.layout") == "page_first_direct"  # npu over base
    assert composed.env["ENABLE_ASCEND_TRANSFER_WITH_MOONCAKE"].value == "1"
    with_ep = compose(builtin_registry.profiles, ["cpu", "mooncake-ep"])
    entries = with_ep.step_entries["init_torch_distributed"]
    assert [e.source for e in entries] == ["base", "mooncake-ep"]
    assert with_ep.value("mooncake.elastic_ep") is True


def test_layering_the_same_profile_twice_applies_it_once(builtin_registry):
    assert compose(builtin_registry.profiles, ["cpu", "cpu"]).names == ("base", "cpu")


@pytest.mark.parametrize(("files", "ref", "loop"), [
    ({"a.yaml": "extends: a\n"}, "a", "a.yaml -> a.yaml"),
    ({"a.yaml": "extends: b\n", "b.yaml": "extends: a\n"}, "a", "a.yaml -> b.yaml -> a.yaml"),
    ({"a.yaml": "extends: [x, b]\n", "x.yaml": "{}\n", "b.yaml": "extends: c\n",
      "c.yaml": "extends: b.yaml\n"}, "a", "b.yaml -> c.yaml -> b.yaml"),
])
def test_extends_loops_are_rejected(tmp_path, files, ref, loop):
    error = compose_error(tmp_path, files, [ref])
    assert "'extends' loop" in str(error)
    assert all(part in str(error) for part in loop.split(" -> "))
    assert error.location is not None and error.location.line >= 1  # the extends entry


def test_unknown_parent_is_reported_at_the_extends_entry(tmp_path):
    error = compose_error(tmp_path, {"a.yaml": "description: a\nextends: [cpux]\n"}, ["a"])
    assert "unknown profile 'cpux'" in str(error)
    assert str(error.location).endswith("a.yaml:2:11")


@pytest.mark.parametrize("refs", [["npu", "musa"], ["cuda", "cpu"]])
def test_layered_device_conflict_names_both_files(builtin_registry, refs):
    with pytest.raises(ConflictError) as caught:
        compose(builtin_registry.profiles, refs)
    text = str(caught.value)
    first, second = refs
    assert f"{second}.yaml:4:9" in text and f"{first}.yaml:4:9" in text
    assert f"device.type '{second}'" in text and f"'{first}'" in text
    assert caught.value.location is not None
    assert caught.value.location.path.endswith(f"{second}.yaml")


def test_sibling_parents_with_different_devices_conflict(tmp_path, builtin_registry):
    path = write(tmp_path, "both.yaml", "extends: [npu, cuda]\n")
    with pytest.raises(ConflictError) as caught:
        compose(builtin_registry.profiles, [str(path)])
    assert "npu.yaml" in str(caught.value) and "cuda.yaml" in str(caught.value)


def test_a_descendant_may_change_its_ancestors_device_type(tmp_path, builtin_registry):
    path = write(tmp_path, "child.yaml", "extends: npu\ndevice: {type: musa}\n")
    composed = compose(builtin_registry.profiles, ["npu", str(path)])
    assert composed.value("device.type") == "musa"


def test_layers_that_agree_on_the_device_type_do_not_conflict(tmp_path, builtin_registry):
    path = write(tmp_path, "cpu2.yaml", "device: {type: cpu}\nconfig:\n  extra: 1\n")
    composed = compose(builtin_registry.profiles, ["cpu", str(path)])
    assert composed.value("device.type") == "cpu"
    assert composed.value("extra") == 1


# --- --set -------------------------------------------------------------------------------

@pytest.mark.parametrize(("text", "key", "value"), [
    ("hicache.host_pool_mb=128", "hicache.host_pool_mb", 128),
    ("mooncake.enabled=false", "mooncake.enabled", False),
    ("a=1.5", "a", 1.5),
    ("a=[1, x]", "a", [1, "x"]),
    ("a=text", "a", "text"),
    ("a='quoted: colon'", "a", "quoted: colon"),
    ("a=", "a", ""),
    ("a=null", "a", None),
    (" a = x ", "a", "x"),
    ("a=b=c", "a", "b=c"),
])
def test_set_values_are_typed_as_yaml(text, key, value):
    assert parse_assignment(text) == (key, value)


@pytest.mark.parametrize(("text", "fragment"), [
    ("a", "expected KEY=VALUE"),
    ("=1", "expected KEY=VALUE"),
    ("a={b: 1}", "value must be a scalar or a list"),
    ("a=[x", "cannot read value '[x'"),
])
def test_bad_assignments(text, fragment):
    with pytest.raises(ProfileError) as caught:
        parse_assignment(text)
    assert fragment in str(caught.value)
    assert caught.value.location == COMMAND_LINE


def test_unreadable_set_value_is_one_line():
    # BUG: compose.parse_assignment puts PyYAML's multi-line message into the problem,
    # so the CLI prints several lines, and the hint talks about ':' for any YAML error.
    with pytest.raises(ProfileError) as caught:
        parse_assignment("hicache.layout=[a")
    assert "\n" not in str(caught.value)


def test_overrides_replace_settings_and_say_so(builtin_registry):
    composed = compose(builtin_registry.profiles, ["npu"],
                       [("hicache.host_pool_mb", 128), ("mooncake.enabled", False)])
    assert composed.value("hicache.host_pool_mb") == 128
    setting = composed.settings["mooncake.enabled"]
    assert (setting.value, setting.source, setting.location) == (False, "--set", COMMAND_LINE)


def test_set_cannot_change_the_core_device_fields(builtin_registry):
    for key in ("device.type", "device.aliases"):
        with pytest.raises(ProfileError) as caught:
            compose(builtin_registry.profiles, ["npu"], [(key, "cuda")])
        assert f"--set cannot change {key}" in str(caught.value)
        assert "--device" in str(caught.value)
        assert caught.value.location == COMMAND_LINE


def test_compose_records_set_values_unchecked(builtin_registry):
    # Whether a key exists and a value fits is decided against the declarations, when
    # the selection is resolved (see tests/test_settle.py), not while layering.
    composed = compose(builtin_registry.profiles, ["npu"], [("zzz", 1)])
    assert composed.settings["zzz"].source == "--set"


@pytest.mark.parametrize(("key", "value", "fragments"), [
    ("hicache.host_pool", 1, ("--set hicache.host_pool: no such setting",
                              "did you mean 'hicache.host_pool_mb'?")),
    ("zzz", 1, ("--set zzz: no such setting", "see 'initorch settings'")),
    ("hicache.host_pool_mb", "abc", ("hicache.host_pool_mb must be a whole number, got the "
                                     "text 'abc'",)),
    ("hicache.host_pool_mb", "128", ("write the number without quotes",)),
    ("mooncake.enabled", 1, ("mooncake.enabled must be true or false, got the number 1",)),
    ("hicache.layout", 3, ("hicache.layout must be text, got the number 3",
                           "quote it to pass text")),
    ("hicache.layout", ["a"], ("hicache.layout must be text, got the list ['a']",)),
])
def test_override_errors(builtin_registry, key, value, fragments):
    with pytest.raises(ProfileError) as caught:
        load_plan(["npu"], settings={key: value}, registry=builtin_registry)
    for fragment in fragments:
        assert fragment in str(caught.value)
    assert caught.value.location == COMMAND_LINE
