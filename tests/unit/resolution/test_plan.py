"""initorch.resolution.plan: the plan's JSON shape, its fingerprint, and explain chains."""

from __future__ import annotations

import dataclasses
import json
import re

import pytest

from initorch import Plan, PlannedStep, load_plan
from initorch.errors import ResolveError
from initorch.resolution.plan import planned_step
from initorch.resolution.plangraph import PlanGraph
from initorch.resolution.saved import plan_json
from tests.support.commands import initorch_command
from tests.support.profiles import assert_chain, write

ENGINE = "init_shared_mooncake_transfer_engine"
SHA256 = re.compile(r"^[0-9a-f]{64}$")
USER_PROFILE = "extends: npu\nconfig:\n  hicache:\n    host_pool_mb: 32\n"


def assert_plan_shape(data: dict, plan: Plan) -> None:
    """The documented keys of ``plan --json``, consistent with each other."""
    assert {"profiles", "device", "order", "waves", "skipped", "fingerprint"} <= set(data)
    assert data["order"] == list(plan.order)
    assert [n for wave in data["waves"] for n in wave] == sorted(
        data["order"], key=lambda n: (plan.step(n).wave, n))
    for step in data["steps"]:
        assert data["waves"][step["wave"]].count(step["name"]) == 1
        assert step["why"]
    for skipped in data["skipped"]:
        assert set(skipped) == {"name", "reason", "summary"} and skipped["reason"]
        assert len(skipped["summary"]) <= len(skipped["reason"])
    assert SHA256.match(data["fingerprint"])
    json.dumps(data)  # serialisable as it is


def test_json_shape_of_npu():
    plan = load_plan(["npu"])
    data = plan_json(plan)
    assert_plan_shape(data, plan)
    assert data["profiles"] == ["base", "npu"]  # parents included
    assert data["device"] == "npu"
    assert data["device_index"] is None
    assert data["skipped"][0]["name"] == "verify_transfer"
    assert data["settings"]["hicache.layout"] == "page_first_direct"
    assert data["fingerprint"] == plan.fingerprint


def test_json_shape_with_overlay_device_and_skips():
    plan = load_plan(["npu-hccl"], device="NPU:3")
    data = plan_json(plan)
    assert_plan_shape(data, plan)
    assert data["profiles"] == ["base", "npu", "npu-hccl"]
    assert (data["device"], data["device_index"]) == ("npu", 3)
    # npu sets what SGLang reads (MOONCAKE_PROTOCOL=ascend); npu-hccl its legacy switch.
    assert data["env"] == {"MOONCAKE_PROTOCOL": "ascend",
                           "ENABLE_ASCEND_TRANSFER_WITH_MOONCAKE": "1"}
    mps = plan_json(load_plan(["mps"]))
    assert {s["name"] for s in mps["skipped"]} >= {ENGINE, "register_mem_pool_host"}


def test_overlay_with_device_accepts_settings_of_the_device_profile():
    # BUG: selection.compose_selection first composes the overlay alone *with* the
    # overrides (to read its device.type), so any --set of a base/device setting fails
    # with "no such setting".  Compose without overrides for that check.
    plan = load_plan(["mooncake-ep"], device="cuda:0", settings={"hicache.host_pool_mb": 128})
    assert plan.config()["hicache.host_pool_mb"] == 128
    assert plan.profiles == ("base", "cuda", "mooncake-ep")


def test_waves_group_steps_that_may_run_together():
    plan = load_plan(["npu"])
    assert plan.waves[0] == ("launch_mooncake_master",)
    assert plan.waves[1] == ("import_backend",)
    assert plan.waves[2] == ("rendezvous", "set_device")
    assert set(plan.waves[3]) == {"alloc_host_mem_pool", ENGINE}
    assert plan.waves[4:] == (("init_torch_distributed",), ("mooncake_master",),
                              ("init_mooncake_store",), ("register_mem_pool_host",))


def test_plan_accessors():
    plan = load_plan(["cpu"], settings=["hicache.host_pool_mb=8"])
    assert plan.config()["hicache.host_pool_mb"] == 8
    assert plan.step("set_device").name == "set_device"
    with pytest.raises(KeyError):
        plan.step("verify_transfer")


# --- fingerprint ---------------------------------------------------------------------------

def test_fingerprint_is_stable_across_working_directories(tmp_path, monkeypatch):
    first = load_plan(["cuda", "mooncake-ep"]).fingerprint
    monkeypatch.chdir(tmp_path)
    assert load_plan(["cuda", "mooncake-ep"]).fingerprint == first


def test_fingerprint_ignores_where_a_profile_file_lives(tmp_path, monkeypatch):
    one = write(tmp_path / "one", "mine.yaml", USER_PROFILE)
    two = write(tmp_path / "deep" / "er", "mine.yaml", USER_PROFILE)
    monkeypatch.chdir(tmp_path / "one")
    a = load_plan(["mine.yaml"])
    monkeypatch.chdir(tmp_path / "deep")
    b = load_plan([str(two)])
    c = load_plan([str(one)])
    assert a.fingerprint == b.fingerprint == c.fingerprint


def test_fingerprint_is_stable_across_processes(tmp_path):
    prints = set()
    for seed in ("1", "2"):
        result = initorch_command("plan", "-p", "npu", "-p", "npu-hccl", "--json",
                                  env={"PYTHONHASHSEED": seed})
        assert result.returncode == 0, result.stderr
        data = json.loads(result.stdout)
        prints.add((data["fingerprint"], tuple(data["order"])))
    assert len(prints) == 1
    assert prints.pop()[0] == load_plan(["npu", "npu-hccl"]).fingerprint


@pytest.mark.parametrize("change", [
    {"settings": {"hicache.host_pool_mb": 65}},
    {"settings": {"mooncake.hostname": "10.0.0.2"}},
    {"settings": {"mooncake.enabled": False}},
    {"device": "npu:1"},
    {"profiles": ["npu", "npu-hccl"]},
])
def test_fingerprint_changes_with_what_runs(change):
    base = load_plan(["npu"]).fingerprint
    kwargs = {"profiles": ["npu"], **change}
    assert load_plan(kwargs.pop("profiles"), **kwargs).fingerprint != base


def test_fingerprint_changes_when_an_edge_changes(tmp_path):
    # A redundant edge changes neither order nor waves, but it is part of what was
    # reviewed, so the fingerprint must change.
    plain = load_plan(["npu"])
    path = write(tmp_path, "npu.yaml", "extends: npu\nsteps:\n  register_mem_pool_host:\n"
                                       "    after: [set_device]\n")
    edged = load_plan([str(path)])
    assert edged.order == plain.order and edged.waves == plain.waves
    assert edged.fingerprint != plain.fingerprint


def test_fingerprint_changes_when_a_step_override_changes(tmp_path):
    prints = {
        load_plan([str(write(tmp_path / str(seconds), "t.yaml",
                             f"extends: npu\nsteps:\n  set_device: {{timeout: {seconds}}}\n"))
                   ]).fingerprint
        for seconds in (30, 31)
    }
    assert len(prints) == 2


# --- explain -------------------------------------------------------------------------------

def test_explain_gives_the_chain_with_locations():
    plan = load_plan(["cuda", "mooncake-ep"])
    chain = plan.explain("import_backend", "alloc_host_mem_pool")
    assert_chain(chain, "import_backend", "alloc_host_mem_pool")
    assert len(chain) == 1
    for edge in chain:
        assert edge.declared_at.line > 0
        assert edge.describe().endswith(f", {edge.declared_at}]")
    (reasoned,) = plan.explain("set_mooncake_pg_engine", "init_torch_distributed")
    assert reasoned.describe().endswith(f", {reasoned.declared_at}]: {reasoned.reason}")


@pytest.mark.parametrize(("first", "second", "fragments"), [
    ("verify_transfer", "set_device", ("step 'verify_transfer' is not in the plan: skipped (",
                                       "checks.verify_transfer=false")),
    ("set_device", "nope", ("step 'nope' is not in the plan",
                            "planned steps: launch_mooncake_master, import_backend")),
    ("register_mem_pool_host", "set_device", (
        "nothing makes 'register_mem_pool_host' run before 'set_device'",
        "the reverse holds: try 'explain set_device register_mem_pool_host'")),
    ("alloc_host_mem_pool", ENGINE, ("no constraint orders them; they may run concurrently",)),
])
def test_explain_errors(first, second, fragments):
    plan = load_plan(["npu"])
    with pytest.raises(ResolveError) as caught:
        plan.explain(first, second)
    for fragment in fragments:
        assert fragment in str(caught.value)


def test_explain_a_step_with_itself_is_an_error():
    # BUG: Plan.explain("set_device", "set_device") returns an empty chain (the CLI then
    # prints "set_device runs before set_device because:" and exits 0).
    with pytest.raises(ResolveError):
        load_plan(["npu"]).explain("set_device", "set_device")


def test_explain_suggests_a_close_step_name():
    # Oddity: a misspelt name is "not in the plan" with the whole planned list, while
    # everywhere else initorch says "did you mean ...?".
    with pytest.raises(ResolveError) as caught:
        load_plan(["npu"]).explain("set_devce", ENGINE)
    assert "did you mean 'set_device'?" in str(caught.value)


def test_the_resolvers_planned_step_is_the_frozen_record_itself():
    plan = load_plan(["cpu"], settings={"mooncake.enabled": False})
    for planned in plan.steps:
        made = planned_step(planned.step, planned.wave, planned.reasons, planned.declared)
        assert made == PlannedStep(planned.step, planned.wave, planned.reasons,
                                   planned.declared)
        assert made.notes == ()
    with pytest.raises(dataclasses.FrozenInstanceError):
        made.wave = 3  # type: ignore[misc]


def _regraphed(plan: Plan, order: tuple[str, ...], steps: tuple[PlannedStep, ...]) -> Plan:
    return dataclasses.replace(plan, steps=steps, graph=PlanGraph.from_records(order, {}))


@pytest.mark.parametrize(("change", "message"), [
    (lambda order, steps: (order[:-1], steps), "not in the graph: init_torch_distributed"),
    (lambda order, steps: (order, steps[:-1]), "not among the steps: init_torch_distributed"),
    (lambda order, steps: (order, (*steps, steps[0])), "lists step(s) import_backend more"),
    (lambda order, steps: (order[::-1], steps), "steps must be in its graph's order"),
])
def test_a_plan_whose_graph_and_steps_differ_is_refused(change, message):
    # An executor walks the graph and runs the steps: a step the graph left out would
    # silently never run.
    plan = load_plan(["cpu"], settings={"mooncake.enabled": False})
    order, steps = change(plan.order, plan.steps)
    with pytest.raises(ValueError, match=re.escape(message)):
        _regraphed(plan, order, steps)
    assert _regraphed(plan, plan.order, plan.steps).order == plan.order
