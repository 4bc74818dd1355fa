"""Values that used to pass validation and fail late are refused at plan time.

Issue 10, point 5 (each refused with the setting's name and ``file:line:col``)
and point 6 (Unicode look-alikes named), plus issue 8's examples (a wrong
allocator, a misspelt key, a number for a layout).  Each case runs the CLI as a
user would and reads the one error line it prints.
"""

from __future__ import annotations

import json
import re

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from initorch import Registry
from initorch.cli.validate import validate_all
from initorch.errors import (
    EXIT_INVALID_INPUT,
    EXIT_OK,
    ConditionError,
    StepDefinitionError,
    UnknownStepError,
)
from initorch.plugin import step
from tests.support.profiles import assert_single_error_line, write
from tests.support.synthetic import define, noop


def refused(run_cli, tmp_path, text: str, *args: str, command: str = "plan") -> str:
    """The one error line ``initorch <command> -p p.yaml`` prints for ``text``."""
    path = write(tmp_path, "p.yaml", text)
    code, out, err = run_cli(command, "-p", str(path), *args)
    assert (code, out) == (EXIT_INVALID_INPUT, ""), err
    return err


def located(err: str, *fragments: str, at: str) -> None:
    """One located error line, at ``p.yaml:<at>``, containing ``fragments``."""
    match = assert_single_error_line(err, *fragments)
    assert match is not None
    assert match.group("file").endswith("p.yaml")
    assert f"{match.group('line')}:{match.group('col')}" == at, err


# --- issue 10 point 5: values that passed validation and failed late ----------------------------

@pytest.mark.parametrize("command", ["plan", "validate"])
def test_the_string_false_is_not_a_boolean(run_cli, tmp_path, command):
    err = refused(run_cli, tmp_path, 'extends: cpu\nconfig:\n  checks:\n    verify_transfer: '
                  '"false"\n', command=command)
    located(err, "checks.verify_transfer must be true or false, got the text 'false'",
            "write false without quotes", at="4:22")


def test_the_string_false_on_the_command_line(run_cli):
    code, _, err = run_cli("plan", "-p", "cpu", "--set", "mooncake.enabled='false'")
    assert code == EXIT_INVALID_INPUT
    assert_single_error_line(err, "<command line>: mooncake.enabled must be true or false",
                             located=False)


@pytest.mark.parametrize("field", ["backend_package", "torch_module", "host_allocator"])
def test_null_never_reaches_a_step(run_cli, tmp_path, field):
    err = refused(run_cli, tmp_path, f"extends: cpu\ndevice:\n  {field}: null\n")
    column = len(f"  {field}: ") + 1
    located(err, f"device.{field} must not be null", at=f"3:{column}")


def test_null_backend_package_on_the_command_line(run_cli):
    code, _, err = run_cli("plan", "-p", "cpu", "--set", "device.backend_package=null")
    assert code == EXIT_INVALID_INPUT
    assert_single_error_line(err, "device.backend_package must not be null", located=False)


@pytest.mark.parametrize("value", [".nan", ".NaN", ".inf", "-.inf", "1e999"])
def test_nan_and_infinity_never_reach_plan_json(run_cli, tmp_path, value):
    err = refused(run_cli, tmp_path, f"extends: cpu\nconfig:\n  distributed:\n    timeout_s: "
                  f"{value}\n", "--json")
    located(err, "distributed.timeout_s must be a finite number", at="4:16")


@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.too_slow,
                                                                 HealthCheck.function_scoped_fixture])
@given(st.one_of(st.floats(), st.integers(min_value=-10**30, max_value=10**30),
                 st.sampled_from([".nan", ".inf", "-.inf", "1e999", "0", "-1", "true",
                                  "'120'", "null", "[1]"])))
def test_plan_json_is_strict_json_or_a_clean_error(run_cli, value):
    code, out, err = run_cli("plan", "-p", "cpu", "--set", f"distributed.timeout_s={value}",
                             "--json")
    if code == EXIT_OK:
        data = json.loads(out, parse_constant=lambda c: pytest.fail(f"not JSON: {c}"))
        assert 0 < data["settings"]["distributed.timeout_s"] <= 7 * 24 * 3600
    else:
        assert code == EXIT_INVALID_INPUT
        assert_single_error_line(err, "distributed.timeout_s", located=False)


@pytest.mark.parametrize(("value", "fragment"), [
    ("0", "must be > 0, got 0.0"),
    ("-1", "must be > 0, got -1.0"),
    (".nan", "must be a finite number, got .nan"),
    ("1e999", "must be a finite number, got the text '1e999'"),
    ("1.0e+999", "must be a finite number, got .inf"),
    ("1.0e+300", "must be <= 604800"),
    ("1e3", "must be a number, got the text '1e3' (YAML reads a number with an exponent"),
])
def test_process_group_timeouts_that_fail_after_torch_is_imported(run_cli, tmp_path, value,
                                                                   fragment):
    err = refused(run_cli, tmp_path,
                  f"extends: cpu\nconfig:\n  distributed:\n    timeout_s: {value}\n",
                  command="validate")
    located(err, f"distributed.timeout_s {fragment}", at="4:16")


@pytest.mark.parametrize("value", [".inf", ".nan", "1e999", "1e12"])
def test_a_step_timeout_of_infinity(run_cli, tmp_path, value):
    err = refused(run_cli, tmp_path,
                  f"extends: cpu\nsteps:\n  set_device:\n    timeout: {value}\n")
    located(err, "steps.set_device.timeout must be a positive, finite number of seconds", at="4:14")


@pytest.mark.parametrize("key", ['"verify_transfer\\n"', '"a\\nb"', '"\\nx"'])
def test_a_config_key_with_an_embedded_newline(run_cli, tmp_path, key):
    err = refused(run_cli, tmp_path, f"extends: cpu\nconfig:\n  checks:\n    {key}: true\n")
    located(err, "config key", "is not a valid name", at="4:5")


@pytest.mark.parametrize("command", ["plan", "validate", "graph", "settings"])
def test_an_empty_device_is_refused_not_ignored(run_cli, command):
    code, out, err = run_cli(command, "--device", "")
    assert (code, out) == (EXIT_INVALID_INPUT, "")
    assert_single_error_line(err, "malformed device string ''", located=False)
    code, _, err = run_cli(command, "-p", "cpu", "--device", "")
    assert code == EXIT_INVALID_INPUT


NEW_DEVICE = "description: a new accelerator\nextends: base\ndevice:\n  type: tpu\n"
REQUIRED_DEVICE_SETTINGS = ("device.backend_package", "device.torch_module",
                            "device.collective_backend", "device.host_allocator",
                            "device.mooncake_protocol")


def test_a_new_device_type_missing_required_fields_is_refused(run_cli, tmp_path):
    path = write(tmp_path, "tpu.yaml", NEW_DEVICE)
    code, _, err = run_cli("validate", "-p", str(path))
    lines = err.splitlines()
    assert code == EXIT_INVALID_INPUT
    assert lines[0] == f"initorch: error: {len(REQUIRED_DEVICE_SETTINGS)} problem(s) in the " \
                       "selected profiles"
    for key, line in zip(sorted(REQUIRED_DEVICE_SETTINGS), sorted(lines[1:]), strict=True):
        assert re.match(rf"^  \S*tpu\.yaml:4:9: required setting {key} is not set for device "
                        r"type 'tpu' \(planned step \w+", line), line
        assert f"give it under device: {{{key.split('.')[1]}: ...}} in profile 'tpu'" in line


def test_validate_all_finds_a_plugins_incomplete_device_profile(tmp_path):
    write(tmp_path, "tpu.yaml", NEW_DEVICE)
    registry = Registry.with_plugins()
    registry.profiles.add_directory(tmp_path, "acme")
    findings = dict(validate_all(registry))
    assert set(findings) == {"tpu"}
    assert {p.message.split()[2] for p in findings["tpu"].problems} == \
        set(REQUIRED_DEVICE_SETTINGS)


def test_a_skipped_step_needs_no_required_setting(run_cli, tmp_path):
    # mps gives no Mooncake protocol: its engine step is disabled, so none is needed ...
    assert run_cli("validate", "-p", "mps")[0] == EXIT_OK
    # ... until a profile turns the engine back on.
    err = refused(run_cli, tmp_path, "extends: mps\nconfig:\n  mooncake:\n    enabled: true\n"
                  "steps:\n  init_shared_mooncake_transfer_engine: {enabled: true}\n")
    match = assert_single_error_line(err, "required setting device.mooncake_protocol is not set "
                                     "for device type 'mps' (planned step "
                                     "init_shared_mooncake_transfer_engine reads it)")
    assert match is not None and match.group("file").endswith("mps.yaml")


# --- issue 8: the three values that passed validate and failed 2.5 s into a run --------------

def test_issue_8_examples_are_all_reported_by_validate(run_cli, tmp_path):
    err = refused(run_cli, tmp_path, """
extends: cuda
device:
  host_allocator: pinned_memory
config:
  hicache:
    host_pol_mb: 8
    layout: 3
""".lstrip(), command="validate")
    lines = err.splitlines()
    assert lines[0] == "initorch: error: 3 problem(s) in the selected profiles"
    assert "p.yaml:3:19: device.host_allocator must be one of" in lines[1]
    assert "did you mean 'pin_memory'?" in lines[1]
    assert "p.yaml:6:5: unknown setting 'hicache.host_pol_mb'" in lines[2]
    assert "p.yaml:7:13: hicache.layout must be text, got the number 3" in lines[3]


@pytest.mark.parametrize(("text", "fragment", "at"), [
    ("device:\n  host_allocator: pinned\n", "device.host_allocator must be one of", "3:19"),
    ("config:\n  memory:\n    query: free\n",
     "memory.query must be one of host, mem_get_info, total_minus_allocated, "
     "mps_working_set, got 'free'", "4:12"),
])
def test_every_table_of_implementations_is_checked_at_plan_time(run_cli, tmp_path, text,
                                                                  fragment, at):
    err = refused(run_cli, tmp_path, f"extends: cpu\n{text}", "-p", "server")
    located(err, fragment, at=at)


def test_validate_reports_problems_of_every_phase_at_once(run_cli, tmp_path):
    # A format problem (a negative timeout) used to hide the unknown step and setting.
    err = refused(run_cli, tmp_path, """
extends: cpu
steps:
  set_device: {timeout: -1}
  set_devce: {}
  init_torch_distributed: {when: "mooncake.enabld"}
config:
  hicache:
    host_pol_mb: 8
""".lstrip(), command="validate")
    lines = err.splitlines()
    assert lines[0] == "initorch: error: 4 problem(s) in the selected profiles"
    expected = [("3:25", "steps.set_device.timeout"), ("4:3", "unknown step 'set_devce'"),
                ("5:34", "reads unknown setting 'mooncake.enabld'"),
                ("8:5", "unknown setting 'hicache.host_pol_mb'")]
    for line, (where, fragment) in zip(lines[1:], expected, strict=True):
        assert f"p.yaml:{where}: " in line and fragment in line, line


def test_plan_shape_problems_are_reported_with_format_problems(run_cli, tmp_path):
    # The missing required settings (stage 2) come with the bad timeout (stage 1).
    path = write(tmp_path, "tpu.yaml", NEW_DEVICE + "steps:\n  set_device: {timeout: -1}\n"
                 "config:\n  checks:\n    verify_transfer: 'yes'\n")
    code, _, err = run_cli("validate", "-p", str(path))
    assert code == EXIT_INVALID_INPUT
    lines = err.splitlines()
    assert lines[0] == "initorch: error: 7 problem(s) in the selected profiles"
    assert sum("required setting device." in line for line in lines) == 5
    assert any("tpu.yaml:6:25: steps.set_device.timeout" in line for line in lines)
    assert any("tpu.yaml:9:22: checks.verify_transfer must be true or false" in line
               for line in lines)
    # verify_transfer's condition reads the refused value: it is not evaluated, so no
    # second problem follows from the first.
    assert not any("condition" in line for line in lines)


# --- issue 10 point 6: look-alike names ------------------------------------------------------

LOOKALIKE_E = "\u0435"  # CYRILLIC SMALL LETTER IE
FULLWIDTH_M = "\uff4d"  # FULLWIDTH LATIN SMALL LETTER M, which Python folds (NFKC) into 'm'


def test_a_lookalike_step_name_in_a_profile_is_named(run_cli, tmp_path):
    err = refused(run_cli, tmp_path, f"extends: cpu\nsteps:\n  s{LOOKALIKE_E}t_device: {{}}\n")
    located(err, f"step name 's{LOOKALIKE_E}t_device' contains the non-ASCII character",
            "U+0435 CYRILLIC SMALL LETTER IE, looks like 'e'", at="3:3")


def test_a_lookalike_edge_target_is_named(run_cli, tmp_path):
    err = refused(run_cli, tmp_path, "extends: cpu\nsteps:\n  init_torch_distributed:\n"
                  f"    after: [s{LOOKALIKE_E}t_device]\n")
    located(err, "U+0435 CYRILLIC SMALL LETTER IE", at="4:13")


def test_a_lookalike_step_name_in_code_is_named():
    with pytest.raises(StepDefinitionError, match="U\\+0435 CYRILLIC SMALL LETTER IE"):
        Registry().steps.add(step(f"s{LOOKALIKE_E}t", description="d")(noop))
    with pytest.raises(StepDefinitionError, match=r"requires entry: .*U\+0435"):
        Registry().steps.add(define("x", requires=[f"s{LOOKALIKE_E}t"]))


def test_looking_up_a_lookalike_step_names_the_character(builtin_registry):
    with pytest.raises(UnknownStepError) as caught:
        builtin_registry.steps.get(f"s{LOOKALIKE_E}t_device")
    assert "contains the non-ASCII character" in str(caught.value)
    assert "did you mean" not in str(caught.value)  # the cause, not a misleading guess


@pytest.mark.parametrize(("condition", "character"), [
    (f"mooncake.{LOOKALIKE_E}nabled", "U+0435 CYRILLIC SMALL LETTER IE"),
    # Python would read this as mooncake.enabled: silently another setting than written.
    (f"{FULLWIDTH_M}ooncake.enabled", "U+FF4D FULLWIDTH LATIN SMALL LETTER M, looks like 'm'"),
    (f"not hicache.{LOOKALIKE_E}nabled and mooncake.enabled", "U+0435"),
])
def test_lookalike_condition_identifiers_are_named(run_cli, tmp_path, condition, character):
    err = refused(run_cli, tmp_path,
                  f"extends: cpu\nsteps:\n  verify_transfer: {{when: '{condition}'}}\n")
    located(err, "setting name", "contains the non-ASCII character", character, at="3:27")


def test_lookalikes_inside_condition_strings_are_text(builtin_registry):
    from initorch.model.conditions import parse_condition

    condition = parse_condition(f"device.type == 'npu{LOOKALIKE_E}'")
    assert condition.names == frozenset({"device.type"})
    assert condition.evaluate({"device.type": "npu"}) is False
    with pytest.raises(ConditionError, match="U\\+FF4D"):
        parse_condition(f"{FULLWIDTH_M}ooncake.enabled")
