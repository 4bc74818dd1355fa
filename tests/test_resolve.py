"""initorch.resolution.resolve: selection, overrides, conditions, implicit device edges, and every
error path -- plus the real ordering constraints of the built-in profiles."""

from __future__ import annotations

import pytest

from initorch import Registry, load_plan
from initorch.errors import ConditionError, CycleError, ResolveError, StepDefinitionError
from initorch.loading.compose import compose
from initorch.resolution.resolve import resolve
from tests.conftest import FLAG, define, synthetic_plan
from tests.helpers_foundation import (
    DEVICE_PROFILES,
    MOONCAKE_PG_PROFILES,
    MOONCAKE_PROFILES,
    MOONCAKE_STEPS,
    assert_before,
    assert_chain,
    assert_problem,
    error_of,
    plan_of,
)

ENGINE = "init_shared_mooncake_transfer_engine"
PROCESS_GROUP = "init_torch_distributed"
LAUNCH = "launch_mooncake_master"


def skipped_reasons(plan) -> dict[str, str]:
    return {s.name: s.reason for s in plan.skipped}


# --- the real constraints of the built-in profiles -------------------------------------------

def test_npu_engine_runs_after_set_device():
    plan = load_plan(["npu"])
    assert_before(plan.order, "set_device", ENGINE)
    assert_chain(plan.explain("set_device", ENGINE), "set_device", ENGINE)


def test_cuda_with_mooncake_ep_hands_the_engine_over_before_the_process_group():
    plan = load_plan(["cuda", "mooncake-ep"])
    assert_before(plan.order, "set_device", ENGINE)
    assert_before(plan.order, ENGINE, "set_mooncake_pg_engine")
    assert_before(plan.order, "set_mooncake_pg_engine", PROCESS_GROUP)
    chain = plan.explain("set_mooncake_pg_engine", PROCESS_GROUP)
    assert_chain(chain, "set_mooncake_pg_engine", PROCESS_GROUP)
    assert any("mooncake-ep.yaml" in str(e.declared_at) for e in chain)
    assert plan.settings["mooncake.pg_backend"].value == "mooncake"


@pytest.mark.parametrize("profile", MOONCAKE_PROFILES)
def test_every_mooncake_profile_orders_engine_then_process_group_with_a_reason(profile):
    plan = load_plan([profile])
    assert plan.step(ENGINE).wave < plan.step(PROCESS_GROUP).wave
    (edge,) = plan.explain(ENGINE, PROCESS_GROUP)
    assert (edge.kind, edge.declared_by) == ("after", "profile base")
    assert edge.reason is not None and "SGLang 0.5.23" in edge.reason
    assert "bootstrap.py init_parallel_runtime" in edge.reason


@pytest.mark.parametrize("profile", [p for p in MOONCAKE_PROFILES
                                     if p not in MOONCAKE_PG_PROFILES])
def test_mooncake_ep_is_refused_at_plan_time_where_mooncake_has_no_backend(profile):
    with pytest.raises(ResolveError) as caught:
        load_plan([profile, "mooncake-ep"])
    assert_problem(caught.value, f"step '{PROCESS_GROUP}' requires 'set_mooncake_pg_engine' "
                                 "(SGLang 0.5.23", "none for this device), which is skipped",
                   f"mooncake.pg_backend='none' from ./profiles/{profile}.yaml",
                   at="mooncake-ep.yaml:16:15")


@pytest.mark.parametrize("profiles", [[p] for p in DEVICE_PROFILES]
                         + [[p, "mooncake-ep"] for p in MOONCAKE_PG_PROFILES]
                         + [["npu", "npu-hccl"]])
def test_every_builtin_profile_resolves_with_the_real_constraints(profiles):
    plan = load_plan(profiles)
    if LAUNCH in plan.order:  # a process that needs no torch: it boots while torch imports
        assert plan.order[0] == LAUNCH
        assert_before(plan.order, LAUNCH, "mooncake_master")
    assert next(name for name in plan.order if name != LAUNCH) == "import_backend"
    assert_before(plan.order, "import_backend", "set_device")
    for name in plan.order:
        if plan.step(name).step.device_bound:
            assert_before(plan.order, "set_device", name)
    if "register_mem_pool_host" in plan.order:
        assert_before(plan.order, "alloc_host_mem_pool", "register_mem_pool_host")
        assert_before(plan.order, ENGINE, "init_mooncake_store")
        assert_before(plan.order, PROCESS_GROUP, "mooncake_master")
        assert_before(plan.order, "mooncake_master", "init_mooncake_store")
        assert_before(plan.order, "init_mooncake_store", "register_mem_pool_host")
    if ENGINE in plan.order:
        assert_before(plan.order, ENGINE, PROCESS_GROUP)


@pytest.mark.parametrize("profile", MOONCAKE_PROFILES)
def test_mooncake_capable_profiles_plan_the_full_set(profile):
    plan = load_plan([profile])
    assert {LAUNCH, "import_backend", "set_device", PROCESS_GROUP, ENGINE,
            "alloc_host_mem_pool", "mooncake_master", "init_mooncake_store",
            "register_mem_pool_host"} <= set(plan.order)
    assert set(skipped_reasons(plan)) == {"verify_transfer"}


def test_mps_skips_mooncake_steps_saying_why():
    plan = load_plan(["mps"])
    reasons = skipped_reasons(plan)
    for name in MOONCAKE_STEPS:
        assert name not in plan.order
        assert "Mooncake has no transport" in reasons[name] or \
            "without a Mooncake transport" in reasons[name]  # why
        assert "disabled by profile mps (./profiles/mps.yaml:" in reasons[name]  # where
    assert {"set_device", PROCESS_GROUP, "alloc_host_mem_pool"} <= set(plan.order)


def test_mps_with_mooncake_ep_is_a_requirement_on_a_skipped_step():
    with pytest.raises(ResolveError) as caught:
        load_plan(["mps", "mooncake-ep"])
    assert_problem(caught.value, f"step '{PROCESS_GROUP}' requires 'set_mooncake_pg_engine'",
                   "which is skipped", "mooncake.pg_backend='none' from default (declared by "
                   "step import_mooncake_pg",
                   at="mooncake-ep.yaml:16:15")


@pytest.mark.parametrize("profile", MOONCAKE_PROFILES)
def test_mooncake_enabled_false_turns_mooncake_off_with_reasons(profile):
    plan = load_plan([profile], settings={"mooncake.enabled": False})
    reasons = skipped_reasons(plan)
    for name in MOONCAKE_STEPS:
        assert name not in plan.order
        assert "condition" in reasons[name]
        assert "mooncake.enabled=false from <command line>" in reasons[name]
    assert {"set_device", PROCESS_GROUP, "alloc_host_mem_pool"} <= set(plan.order)


def test_hicache_off_skips_the_pool_steps():
    reasons = skipped_reasons(load_plan(["cpu"], settings=["hicache.enabled=false"]))
    assert {"alloc_host_mem_pool", "register_mem_pool_host", "verify_transfer"} <= set(reasons)
    assert "hicache.enabled=false from <command line>" in reasons["alloc_host_mem_pool"]


def test_reasons_say_who_listed_and_who_required():
    plan = load_plan(["npu"])
    reasons = plan.step("import_backend").reasons
    assert reasons[0].startswith("listed by profile base (")
    assert "base.yaml:18:3" in reasons[0]
    assert reasons[1].startswith("required by rendezvous, set_device, ")


def test_reasons_do_not_cite_skipped_steps_as_if_they_ran():
    # Oddity: on npu, init_torch_distributed's "why" says "required by verify_transfer",
    # but verify_transfer is skipped -- a reader concludes it will run.  Drop skipped
    # requirers from the reasons, or mark them "(skipped)".
    plan = load_plan(["npu"])
    skipped = skipped_reasons(plan)
    for planned in plan.steps:
        for reason in planned.reasons:
            for name in skipped:
                assert name not in reason or "skipped" in reason, (planned.name, reason)


def test_device_edges_are_implicit_and_located():
    plan = load_plan(["npu"])
    [edge] = plan.graph.edges_between("set_device", ENGINE)
    assert edge.kind == "device"
    assert edge.declared_at.path.endswith("transfer_engine.py")


# --- synthetic steps: selection, overrides, conditions ------------------------------------

def test_requires_and_wants_pull_steps_in_transitively(tmp_path):
    plan = synthetic_plan([define("top", requires=["mid"]), define("mid", wants=["leaf"]),
                           define("leaf"), define("unlisted")], tmp_path)
    # synthetic_plan lists every step; pull-in is seen in the reasons
    assert plan.order == ("leaf", "mid", "top", "unlisted")
    assert "wanted by mid" in plan.step("leaf").reasons
    assert "required by top" in plan.step("mid").reasons


def test_pull_in_adds_steps_the_profile_does_not_list(tmp_path):
    plan = plan_of(tmp_path, """
        device: {type: cpu}
        steps:
          top: {}
        """, define("top", requires=["mid"]), define("mid", wants=["leaf"]), define("leaf"),
        define("unlisted"))
    assert plan.order == ("leaf", "mid", "top")
    assert plan.step("leaf").reasons == ("wanted by mid",)


def test_after_and_before_only_order_planned_steps(tmp_path):
    plan = plan_of(tmp_path, """
        device: {type: cpu}
        steps:
          a: {}
          b: {}
        """, define("a", after=["b", "absent"]), define("b", before=["absent"]),
        define("absent"))
    assert plan.order == ("b", "a")
    assert "absent" not in plan.order


def test_before_edges_point_forward(tmp_path):
    plan = plan_of(tmp_path, """
        device: {type: cpu}
        steps:
          z: {}
          a: {}
        """, define("z", before=["a"]), define("a"))
    assert plan.order == ("z", "a")
    [edge] = plan.graph.edges_between("z", "a")
    assert edge.kind == "before"


def test_wants_on_a_skipped_step_is_fine(tmp_path):
    plan = plan_of(tmp_path, """
        device: {type: cpu}
        config: {flag: false}
        steps:
          a: {}
        """, define("a", wants=["b"]), define("b", when="flag", settings=FLAG))
    assert plan.order == ("a",)
    assert "condition 'flag' is false (flag=false" in skipped_reasons(plan)["b"]


def test_profile_overrides_edges_timeout_and_condition(tmp_path):
    plan = plan_of(tmp_path, """
        device: {type: cpu}
        config: {flag: false}
        steps:
          a:
            after: [b]
            remove: {after: [c]}
            timeout: 9
            when: null
          b: {}
          c: {}
        """, define("a", after=["c"], when="flag", settings=FLAG), define("b"),
        define("c", after=["a"]))
    assert plan.order == ("b", "a", "c")
    assert plan.step("a").step.timeout == 9
    assert plan.step("a").step.when is None
    [edge] = plan.graph.edges_between("b", "a")
    assert str(edge.declared_at).endswith("p.yaml:5:13")
    assert edge.declared_by == "profile p"


def test_later_profile_can_re_enable_a_step(tmp_path, registry):
    registry.steps.add(define("extra"))
    first = tmp_path / "off.yaml"
    first.write_text("extends: cpu\nsteps:\n  extra: {enabled: false, reason: flaky}\n")
    second = tmp_path / "on.yaml"
    second.write_text("steps:\n  extra: {enabled: true}\n")
    off = resolve(compose(registry.profiles, [str(first)]), registry.steps)
    assert "disabled by profile off" in skipped_reasons(off)["extra"]
    assert skipped_reasons(off)["extra"].endswith(": flaky")
    on = resolve(compose(registry.profiles, [str(first), str(second)]), registry.steps)
    assert "extra" in on.order


def test_disabling_the_binder_names_the_profile_that_did_it(tmp_path):
    # Oddity: today the error says "no planned step binds the device" at
    # steps/host_pool.py, without saying set_device was disabled, or where.
    error = error_of(tmp_path, "extends: cpu\nsteps:\n  set_device:\n    enabled: false\n")
    assert_problem(error, "set_device", "disabled", "p.yaml:4:")


# --- every error path --------------------------------------------------------------------------

def test_no_device_type(builtin_registry):
    with pytest.raises(ResolveError) as caught:
        resolve(compose(builtin_registry.profiles, ["base", "mooncake-ep"]),
                builtin_registry.steps)
    assert "profile(s) base, mooncake-ep set no device.type" in str(caught.value)
    assert "--profile cpu" in str(caught.value)


def test_unknown_step_in_a_profile_suggests_and_locates(tmp_path):
    error = error_of(tmp_path, "extends: cpu\nsteps:\n  set_devce: {}\n")
    assert_problem(error, "unknown step 'set_devce'", "did you mean 'set_device'?",
                   at="p.yaml:3:3")


def test_unknown_edge_target_in_a_profile_suggests_and_locates(tmp_path):
    error = error_of(tmp_path, """
        extends: cpu
        steps:
          init_torch_distributed:
            after: [set_device, import_backnd]
        """)
    assert_problem(error, "unknown step 'import_backnd'", "did you mean 'import_backend'?",
                   at="p.yaml:4:25")


def test_unknown_required_step_in_a_profile_is_reported(tmp_path):
    error = error_of(tmp_path, """
        extends: cpu
        steps:
          init_torch_distributed:
            requires: [set_devic]
        """)
    assert_problem(error, "unknown step 'set_devic'", "did you mean 'set_device'?",
                   at="p.yaml:4:16")
    # Once: the pull-in reports it; the check of ordering edges does not repeat it.
    assert [str(p) for p in error.problems].count(str(error.problems[0])) == 1
    assert len(error.problems) == 1


def test_unknown_step_in_a_declaration_points_at_the_code(tmp_path):
    error = error_of(tmp_path, "device: {type: cpu}\nsteps:\n  a: {}\n",
                     define("a", requires=["bee"]), define("be"))
    problem = assert_problem(error, "unknown step 'bee'", "did you mean 'be'?")
    assert problem.location is not None and problem.location.path.endswith("conftest.py")


@pytest.mark.parametrize(("override", "fragment"), [
    ("enabled: false", "disabled by profile p ("),
    ("when: 'not flag'", "condition 'not flag' is false (flag=true"),
])
def test_requirement_on_a_skipped_step_is_an_error(tmp_path, override, fragment):
    error = error_of(tmp_path, f"""
        device: {{type: cpu}}
        config: {{flag: true}}
        steps:
          a: {{}}
          b:
            {override}
        """, define("a", requires=["b"]), define("b", settings=FLAG))
    assert_problem(error, "step 'a' requires 'b', which is skipped", fragment,
                   "skip 'a' under the same condition, or enable 'b'")


def test_requirement_on_a_builtin_step_switched_off(tmp_path):
    error = error_of(tmp_path, """
        extends: npu
        steps:
          alloc_host_mem_pool: {enabled: false, reason: testing}
        """)
    assert_problem(error, "step 'register_mem_pool_host' requires 'alloc_host_mem_pool'",
                   "disabled by profile p (", "p.yaml:3:34): testing")


def test_several_binders(tmp_path):
    error = error_of(tmp_path, "device: {type: cpu}\nsteps:\n  one: {}\n  two: {}\n",
                     define("one", binds_device=True), define("two", binds_device=True))
    assert_problem(error, "several steps bind the device: one, two",
                   "exactly one step may declare binds_device")


def test_device_bound_without_binder(tmp_path):
    error = error_of(tmp_path, "device: {type: cpu}\nsteps:\n  a: {}\n  b: {}\n",
                     define("a", device_bound=True), define("b", device_bound=True))
    assert_problem(error, "steps a, b are device_bound, but no planned step binds the device")


def test_every_cycle_is_reported_with_each_edge_located(tmp_path):
    with pytest.raises(CycleError) as caught:
        plan_of(tmp_path, """
            extends: cpu
            steps:
              import_backend:
                after: [set_device]
              alloc_host_mem_pool:
                after: [register_mem_pool_host]
            """)
    error = caught.value
    assert error.cycles == (("alloc_host_mem_pool", "register_mem_pool_host"),
                            ("import_backend", "set_device"))
    assert "2 ordering cycles among steps" in error.args[0]
    assert_problem(error, "ordering cycle import_backend -> set_device -> import_backend",
                   "set_device requires import_backend [step set_device, ",
                   "device.py:", "import_backend is ordered after set_device [profile p, ",
                   "p.yaml:4:13]")
    assert_problem(error, "ordering cycle alloc_host_mem_pool -> register_mem_pool_host -> ",
                   "register_mem_pool_host requires alloc_host_mem_pool [step ",
                   "host_pool.py:", "p.yaml:6:13]")
    for problem in error.problems:
        assert problem.location is not None and problem.location.line > 0


def test_cycles_among_synthetic_steps_are_all_found(tmp_path):
    with pytest.raises(CycleError) as caught:
        plan_of(tmp_path, """
            device: {type: cpu}
            steps:
              a: {after: [b]}
              b: {after: [c]}
              c: {after: [a, b]}
            """, define("a"), define("b"), define("c"))
    assert caught.value.cycles == (("b", "c"), ("a", "c", "b"))
    assert len(caught.value.problems) == 2
    assert_problem(caught.value, "a -> c -> b -> a", "p.yaml:3:15", "p.yaml:4:15",
                   "p.yaml:5:15")


def test_self_loop_from_a_profile_is_reported(tmp_path):
    with pytest.raises(CycleError) as caught:
        plan_of(tmp_path, "extends: cpu\nsteps:\n  set_device: {after: [set_device]}\n")
    assert caught.value.cycles == (("set_device",),)


def test_removing_an_undeclared_edge(tmp_path):
    error = error_of(tmp_path, """
        extends: cpu
        steps:
          set_device:
            remove: {after: [import_backend], requires: [nothing_here]}
        """)
    assert_problem(error, "cannot remove after 'import_backend' from step 'set_device': "
                   "it is not declared", "declared after: none", at="p.yaml:4:22")
    assert_problem(error, "cannot remove requires 'nothing_here'",
                   "declared requires: import_backend")


def test_the_implicit_device_edge_cannot_be_removed(tmp_path):
    error = error_of(tmp_path, f"extends: npu\nsteps:\n  {ENGINE}:\n"
                               "    remove: {after: [set_device]}\n")
    assert_problem(error, f"cannot remove after 'set_device' from step '{ENGINE}'")


def test_retries_on_a_step_without_retry_on(tmp_path):
    error = error_of(tmp_path, "extends: cpu\nsteps:\n  set_device: {retries: 2}\n")
    assert_problem(error, "step 'set_device' declares no transient errors, so it cannot be "
                   "retried", at="p.yaml:3:25")


def test_retries_on_a_step_with_retry_on(tmp_path, registry):
    registry.steps.add(define("fetch_weights", retry_on=(ConnectionError,)))
    profile = tmp_path / "p.yaml"
    profile.write_text("extends: cpu\nsteps:\n  fetch_weights: {retries: 5}\n")
    plan = load_plan([str(profile)], registry=registry)
    assert plan.step("fetch_weights").step.retries == 5


@pytest.mark.parametrize(("when", "fragments"), [
    ("mooncake.enabld", ("reads unknown setting 'mooncake.enabld'",
                         "did you mean 'mooncake.enabled'?")),
    ("hicache.host_pool_mb > 'big'", ("cannot evaluate condition",)),
])
def test_condition_problems_point_at_the_profile(tmp_path, when, fragments):
    with pytest.raises(ResolveError) as caught:
        plan_of(tmp_path, f"extends: cpu\nsteps:\n  set_device:\n    when: \"{when}\"\n")
    assert_problem(caught.value, *fragments, at="p.yaml:4:11")


def test_condition_problem_in_a_declaration(tmp_path):
    with pytest.raises(ResolveError) as caught:
        synthetic_plan([define("a", when="nothing_set")], tmp_path)
    assert isinstance(caught.value, ResolveError)
    assert_problem(caught.value, "reads unknown setting 'nothing_set'")


def test_problems_are_collected_not_first_only(tmp_path):
    error = error_of(tmp_path, """
        extends: cpu
        steps:
          one_bad: {}
          two_bad: {}
        """)
    assert len(error.problems) == 2
    assert "2 problem(s) in the selected profiles" in error.args[0]


def test_condition_error_class_is_not_leaked(tmp_path):
    # ConditionErrors raised while resolving are folded into one ResolveError.
    with pytest.raises(ResolveError) as caught:
        plan_of(tmp_path, "extends: cpu\nsteps:\n  set_device: {when: 'nope'}\n")
    assert not isinstance(caught.value, ConditionError)


# --- wanted_by: steps that pull themselves in ----------------------------------------------------

ONLY_TOP = """
    device: {type: cpu}
    config: {flag: true}
    steps:
      top: {}
    """


def test_wanted_by_pulls_a_step_in_when_its_target_is_planned(tmp_path):
    plan = plan_of(tmp_path, ONLY_TOP, define("top", settings=FLAG),
                   define("warm", wanted_by=["top"], requires=["helper"]), define("helper"),
                   define("extra", wanted_by="warm"), define("elsewhere", wanted_by=["absent"]),
                   define("absent"))
    assert set(plan.order) == {"top", "warm", "helper", "extra"}
    assert plan.step("warm").reasons == ("wanted by top",)
    assert plan.step("helper").reasons == ("required by warm",)
    assert plan.step("extra").reasons == ("wanted by warm",)
    # wanted_by pulls in, and orders nothing: only warm's own requires does.
    assert plan.graph.edges_between("top", "warm") == []
    assert plan.step("warm").wave == plan.step("top").wave + 1 == 1


def test_a_step_only_skipped_steps_want_is_skipped_too(tmp_path):
    profile = ONLY_TOP.replace("top: {}", "top: {}\n      pool: {}\n      listed: {}")
    plan = plan_of(tmp_path, profile,
                   define("top"), define("pool", requires=["top"], when="not flag",
                                         settings=FLAG),
                   define("warm", wanted_by=["pool"], requires=["pool"]),
                   define("warmer", wanted_by=["warm"]),
                   define("listed", wanted_by=["pool"]))
    reasons = skipped_reasons(plan)
    assert reasons["pool"].startswith("condition 'not flag' is false")
    assert reasons["warm"] == "wanted only by skipped steps (pool)"
    assert reasons["warmer"] == "wanted only by skipped steps (warm)"
    assert "listed" in plan.order  # a profile lists it: that is reason enough to run


def test_a_step_wanted_by_a_skipped_and_a_planned_step_runs(tmp_path):
    plan = plan_of(tmp_path, ONLY_TOP, define("top"),
                   define("off", when="not flag", settings=FLAG),
                   define("both", wanted_by=["off", "top"]))
    assert "both" in plan.order
    assert plan.step("both").reasons == ("wanted by top",)


@pytest.mark.parametrize(("wanted_by", "fragment"), [
    (["Not-A-Name"], "wanted_by entry: step name 'Not-A-Name' is not a valid name"),
    (["self_ref"], "lists itself under wanted_by"),
])
def test_bad_wanted_by_is_a_definition_error(wanted_by, fragment):
    with pytest.raises(StepDefinitionError, match=fragment):
        Registry().steps.add(define("self_ref", wanted_by=wanted_by))


def test_requested_steps_are_planned_as_if_listed(tmp_path, registry):
    registry.steps.add(define("load_model", requires=["set_device"]))
    plan = load_plan(["cpu"], steps=["load_model"], registry=registry)
    assert plan.step("load_model").reasons == ("requested by load_plan(steps=...)",)
    assert_before(plan.order, "set_device", "load_model")
    with pytest.raises(ResolveError, match=r"unknown step 'load_modle'.*did you mean 'load_model'"):
        load_plan(["cpu"], steps=["load_modle"], registry=registry)
