"""Declared output reads: a plan whose order no longer delivers an output a step reads
is refused when it is made, and an undeclared read of a step the plan does not order
first fails the same way in both executors (issue 19)."""

from __future__ import annotations

import pytest

from initorch import Registry, load_plan
from initorch.errors import StepDefinitionError
from initorch.execution.run import Run
from initorch.resolution.saved import save_plan
from tests.support.profiles import (
    assert_problem,
    assert_single_error_line,
    error_of,
    registry_of,
    write,
)
from tests.support.runs import DIAGNOSES, EXECUTORS
from tests.support.synthetic import define
from tests.unit.resolution.test_saved import refusal, resign

BROKEN_POOL = """
extends: cpu
steps:
  register_mem_pool_host:
    remove:
      requires: [alloc_host_mem_pool]
"""


def test_a_profile_that_removes_a_read_edge_is_refused_at_its_line(tmp_path):
    error = error_of(tmp_path, BROKEN_POOL)
    assert_problem(error, "step 'register_mem_pool_host' reads the output of "
                          "'alloc_host_mem_pool', which the plan does not order before it",
                   "keep the edge to 'alloc_host_mem_pool' that this line removes",
                   at="p.yaml:5:18")


def test_validate_refuses_it_in_one_line_with_exit_2(run_cli, tmp_path):
    profile = write(tmp_path, "broken.yaml", BROKEN_POOL)
    code, _, err = run_cli("validate", "-p", str(profile))
    assert code == 2
    assert_single_error_line(err, "broken.yaml", "reads the output of "
                             "'alloc_host_mem_pool'")


def test_a_skipped_read_is_named_with_why_it_is_skipped(tmp_path):
    error = error_of(tmp_path, BROKEN_POOL + "  alloc_host_mem_pool: {enabled: false}\n",
                     )
    assert_problem(error, "reads the output of 'alloc_host_mem_pool', which is skipped: "
                          "disabled by profile p", at="p.yaml:5:18")


def test_the_built_in_profiles_deliver_every_declared_read(builtin_registry):
    for name in ("cpu", "npu", "cuda", "musa"):
        for overlays in ((), ("server",), ("mooncake-ep",)):
            if overlays == ("mooncake-ep",) and name == "npu":
                continue  # refused at plan time: Mooncake has no npu backend
            plan = load_plan([name, *overlays], registry=builtin_registry)
            readers = [p for p in plan.steps if p.step.reads]
            assert readers, plan.profiles
            for planned in readers:
                for target in planned.step.reads:
                    if target in plan:
                        assert plan.graph.path(target, planned.name), (target, planned.name)


def readers(optional: bool):
    """``source`` and a step that reads it, requiring it or only wanting it."""
    edge = {"wants": ["source"]} if optional else {"requires": ["source"]}
    return (define("source", lambda ctx: 41),
            define("reader", lambda ctx: ctx.output("source") + 1
                   if ctx.has_output("source") else 0, reads=["source"], **edge))


def test_an_optional_read_of_a_step_not_planned_is_fine(tmp_path):
    plan = load_plan([str(write(tmp_path, "p.yaml", """
        device: {type: cpu}
        steps:
          reader: {}
          source: {enabled: false}
        """))], registry=registry_of(*readers(optional=True)))
    assert plan.order == ("reader",)


def test_an_optional_read_the_profile_unorders_is_refused(tmp_path):
    error = error_of(tmp_path, """
        device: {type: cpu}
        steps:
          reader: {remove: {wants: [source]}}
          source: {}
        """, *readers(optional=True))
    assert_problem(error, "step 'reader' reads the output of 'source', which the plan does "
                          "not order before it", at="p.yaml:3:29")


def test_a_read_must_be_a_requirement_or_a_want():
    with pytest.raises(StepDefinitionError, match="reads the output of 'source' but neither "
                                                  "requires nor wants it"):
        registry_of(define("source"), define("reader", reads=["source"], after=["source"]))


def test_a_re_signed_plan_that_drops_a_read_edge_is_refused(tmp_path, builtin_registry):
    path = tmp_path / "cpu-plan.json"
    save_plan(load_plan(["cpu"], registry=builtin_registry), path)

    def drop_pool_edge(data):
        data["edges"] = [e for e in data["edges"] if not (
            e["from"] == "alloc_host_mem_pool" and e["to"] == "register_mem_pool_host")]
        reader = next(s for s in data["steps"] if s["name"] == "register_mem_pool_host")
        reader["requires"].remove("alloc_host_mem_pool")

    resign(path, builtin_registry, drop_pool_edge)
    refusal(path, builtin_registry, "step 'register_mem_pool_host' reads the output of "
                                    "'alloc_host_mem_pool', which the plan does not order "
                                    "before it")


@pytest.mark.parametrize("executor", EXECUTORS)
def test_an_undeclared_read_of_an_unordered_step_fails_in_both_executors(tmp_path, executor):
    """``source`` runs first by name in the listing, so the sequential executor would
    hand its output over by luck; both refuse it the same way."""
    registry = Registry()
    registry.steps.add(define("a_source", lambda ctx: 1))
    registry.steps.add(define("b_reader", lambda ctx: ctx.output("a_source")))
    plan = load_plan([str(write(tmp_path, "p.yaml", """
        device: {type: cpu}
        steps: {a_source: {}, b_reader: {}}
        """))], registry=registry)
    report = Run(plan, executor=executor, diagnoses=DIAGNOSES).start()
    failed = report.outcomes["b_reader"]
    assert failed.status == "failed"
    assert isinstance(failed.error, StepDefinitionError)
    assert "step 'b_reader' reads the output of 'a_source', which the plan does not order " \
           "before it" in str(failed.error)
