"""The embedding entry point ``load_plan``: the unplanned-step warning and the reserved
``auto`` profile."""

from __future__ import annotations

import warnings

import pytest

from initorch import InitorchError, UnplannedStepWarning, load_plan
from initorch.errors import EXIT_INVALID_INPUT
from tests.conftest import define
from tests.helpers_foundation import assert_single_error_line, write


def quietly_planned(*args, **kwargs):
    """load_plan, failing the test if it warns about anything."""
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        return load_plan(*args, **kwargs)


# --- the unplanned-step warning -------------------------------------------------------------

def test_a_step_registered_in_code_and_pulled_in_by_nothing_is_warned_about(registry):
    """The issue: registry.steps.add(load_model) then load_plan(["cpu"]) left it out
    in silence, and run.output("load_model") later said it had not completed."""
    registry.steps.add(define("load_model", requires=["set_device"]))
    with pytest.warns(UnplannedStepWarning) as caught:
        plan = load_plan(["cpu"], registry=registry)
    assert "load_model" not in plan.order
    [warning] = caught.list
    assert warning.filename == __file__  # points at the caller
    message = warning.message
    assert isinstance(message, UnplannedStepWarning)
    assert (message.step, message.plugin) == ("load_model", None)
    assert str(message).startswith("step 'load_model' (registered by code) is not in the plan")
    assert "load_plan(steps=[...])" in str(message) and "wanted_by" in str(message)


def test_no_warning_for_the_builtins_or_for_steps_something_pulls_in(registry, tmp_path):
    quietly_planned(["npu"], registry=registry)
    quietly_planned(["mps"], registry=registry)  # skipped steps are considered
    registry.steps.add(define("warm", wanted_by=["absent_target"]))
    registry.steps.add(define("needed"))
    registry.steps.add(define("needer", requires=["needed"]))
    write(tmp_path / "more", "listing.yaml", "extends: cpu\nsteps:\n  needer: {}\n")
    registry.profiles.add_directory(tmp_path / "more", plugin="test")
    quietly_planned(["cpu"], registry=registry)  # listed by a profile, or wanted_by
    plan = quietly_planned(["cpu"], steps=["needer"], registry=registry)
    assert {"needer", "needed"} <= set(plan.order)


def test_a_plugin_step_nothing_pulls_in_is_named_with_its_plugin(registry):
    registry.load_plugin("vendor", lambda reg: reg.steps.add(define("orphan")))
    with pytest.warns(UnplannedStepWarning, match=r"step 'orphan' \(registered by plugin "
                                                  r"'vendor'\)"):
        load_plan(["cpu"], registry=registry)


def test_the_cli_prints_the_warning_as_one_line(run_cli, tmp_path, monkeypatch):
    write(tmp_path, "orphan_steps.py", """
        from initorch import step

        @step("orphan", description="a step nothing pulls in")
        def orphan(ctx):
            return None

        def register(registry):
            registry.steps.add(orphan)
        """)
    monkeypatch.syspath_prepend(str(tmp_path))
    code, out, err = run_cli("plan", "-p", "cpu", "--plugin", "orphan_steps")
    assert code == 0 and out.startswith("profiles: base -> cpu")
    assert err == ("initorch: warning: step 'orphan' (registered by plugin 'orphan_steps') is "
                   "not in the plan: no profile lists it, no step requires or wants it, and it "
                   "declares no wanted_by (list it in a profile, pass load_plan(steps=[...]), "
                   "or declare @step(wanted_by=...))\n")


# --- the reserved profile 'auto' ---------------------------------------------------------------

def test_auto_is_reserved_for_hardware_detection(run_cli):
    with pytest.raises(InitorchError) as caught:
        load_plan(["auto"])
    assert "profile 'auto' needs hardware detection" in str(caught.value)
    assert caught.value.exit_code == EXIT_INVALID_INPUT
    code, _, err = run_cli("plan", "-p", "auto")
    assert code == EXIT_INVALID_INPUT
    assert_single_error_line(err, "profile 'auto' needs hardware detection",
                             "name the device's profile", located=False)
