"""initorch.resolution.fingerprint: the fast encoder writes exactly the canonical document,
and the networkx-free resolver orders every built-in profile exactly as networkx did.

The reference implementations below are the code the rewrite replaced (issue 11): the
fingerprint as ``sha256(json.dumps({...dicts...}, sort_keys=True))``, and the order and
waves as ``networkx.lexicographical_topological_sort`` and ``topological_generations``
over the plan's edges.  Every built-in profile, alone and with each overlay, must give the
same fingerprint, order and waves through both."""

from __future__ import annotations

import dataclasses
import hashlib
import json
from collections.abc import Mapping
from types import MappingProxyType
from typing import Any, NamedTuple

import networkx as nx
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from initorch import Registry, load_plan
from initorch.loading.document import EnvEntry, Setting
from initorch.location import SourceLocation
from initorch.model.canonical import declaration, step_fields
from initorch.model.devices import DeviceRef
from initorch.model.step import Step
from initorch.plugin import setting
from initorch.reporting.render import plan_text
from initorch.resolution.fingerprint import fingerprint
from initorch.resolution.plan import (
    Plan,
    PlannedStep,
    SkippedStep,
    env_values,
    read_settings,
)
from tests.support.profiles import DEVICE_PROFILES, MOONCAKE_PG_PROFILES
from tests.support.synthetic import noop

SELECTIONS = [
    *[[device] for device in DEVICE_PROFILES],
    ["npu", "npu-hccl"],
    *[[device, "mooncake-ep"] for device in MOONCAKE_PG_PROFILES],
]


def reference_fingerprint(plan: Plan | Holding) -> str:
    """The fingerprint as one canonical JSON document (initorch 0.1's, with only the
    settings the planned steps read)."""
    canonical = {
        "profiles": list(plan.profiles),
        "device": [plan.device.type, plan.device.index],
        "settings": {key: s.value
                     for key, s in sorted(read_settings(plan.settings, plan.steps).items())},
        "env": dict(sorted(env_values(plan.env).items())),
        "steps": [{"name": p.name, "wave": p.wave, **step_fields(p.step),
                   "declared": declaration(p.declared)} for p in plan.steps],
        "skipped": sorted(s.name for s in plan.skipped),
    }
    blob = json.dumps(canonical, sort_keys=True, separators=(",", ":"), default=repr)
    return hashlib.sha256(blob.encode()).hexdigest()


def networkx_order(plan: Plan) -> tuple[list[str], list[list[str]]]:
    graph: nx.DiGraph = nx.DiGraph()
    graph.add_nodes_from(sorted(plan.order))
    graph.add_edges_from(sorted((e.source, e.target) for e in plan.graph.edges()))
    return (list(nx.lexicographical_topological_sort(graph)),
            [sorted(wave) for wave in nx.topological_generations(graph)])


def refingerprint(plan: Plan | Holding) -> str:
    return fingerprint(plan.profiles, plan.device, plan.settings, plan.steps, plan.skipped,
                       plan.env)


@pytest.mark.parametrize("verify", [False, True])
@pytest.mark.parametrize("selection", SELECTIONS, ids="+".join)
def test_every_builtin_profile_keeps_its_fingerprint_order_and_waves(
        builtin_registry: Registry, selection: list[str], verify: bool) -> None:
    plan = load_plan(selection, settings={"checks.verify_transfer": verify},
                     registry=builtin_registry)
    assert plan.fingerprint == reference_fingerprint(plan)
    order, waves = networkx_order(plan)
    assert list(plan.order) == order
    assert [list(wave) for wave in plan.waves] == waves


def test_planning_the_same_steps_again_keeps_fingerprint_and_reasons() -> None:
    # The second plan reuses each step's text kept from the first (a fresh registry:
    # the first plan here is the one that encodes).
    registry = Registry.with_plugins()
    first = load_plan(["npu", "npu-hccl"], registry=registry)
    again = load_plan(["npu", "npu-hccl"], registry=registry)
    assert again.fingerprint == first.fingerprint == reference_fingerprint(again)
    assert [p.reasons for p in again.steps] == [p.reasons for p in first.steps]
    assert plan_text(again) == plan_text(first)


# --- generated steps: every field the fingerprint covers, with unusual values -------------------

SPEC = setting("gen.value", float, default=0.25, minimum=0.0, description="é, \"quoted\"")
# Registered names are ASCII identifiers; the encoder must not depend on it.
NAMES = st.sampled_from(["a", "b2", "c_d", "set_device", "z", "näme", 'q"uote', "_x", "9"])
ODD = st.one_of(st.none(), st.booleans(), st.integers(-3, 10**20), st.floats(allow_nan=True),
                st.text(max_size=8), st.lists(st.integers(), max_size=2))


class Transient(Exception):
    """A step's transient error."""


def teardown(ctx: Any, output: Any) -> None:
    """A teardown, named in the declaration."""


@st.composite
def steps(draw: st.DrawFn) -> Step:
    names = st.lists(NAMES, max_size=3, unique=True).map(tuple)
    return Step(
        name=draw(NAMES), description="generated", action=noop,
        requires=draw(names), wants=draw(names), after=draw(names), before=draw(names),
        wanted_by=draw(names), when=draw(st.one_of(st.none(), st.text(max_size=12))),
        device_bound=draw(st.one_of(st.booleans(), ODD)), binds_device=draw(st.booleans()),
        timeout=draw(st.one_of(st.none(), st.integers(1, 9), st.floats(0.1, 1e6), ODD)),
        retries=draw(st.one_of(st.integers(0, 100), ODD)),
        retry_on=draw(st.sampled_from([(), (Transient,), (Transient, OSError)])),
        retry_backoff=draw(st.one_of(st.just(0.5), st.floats(allow_nan=False), ODD)),
        teardown=draw(st.sampled_from([None, teardown])),
        settings=draw(st.sampled_from([(), (SPEC,)])),
        defined_at=SourceLocation("gen.py", 1))


@settings(max_examples=300, deadline=None)
@given(st.lists(st.tuples(steps(), steps(), st.integers(0, 10**6)), min_size=1, max_size=4))
def test_the_fast_encoder_writes_the_canonical_document(triples) -> None:
    planned = tuple(PlannedStep(effective, wave, ("generated",), declared)
                    for effective, declared, wave in triples)
    plan = Holding(planned)
    assert refingerprint(plan) == reference_fingerprint(plan)


class Holding(NamedTuple):
    """What a fingerprint covers, holding ``steps`` as they are: a plan without a plan's
    checks (their names need not be unique here, nor is there a graph)."""

    steps: tuple[PlannedStep, ...]
    profiles: tuple[str, ...] = ("gen",)
    device: DeviceRef = DeviceRef("cpu", None)
    settings: Mapping[str, Setting] = MappingProxyType({})
    skipped: tuple[SkippedStep, ...] = ()
    env: Mapping[str, EnvEntry] = MappingProxyType({})


def test_the_same_effective_and_declared_step_share_their_encoding() -> None:
    step = Step("s", "one", noop, requires=("a",), timeout=2, defined_at=SourceLocation("x"))
    plan = Holding((PlannedStep(step, 0, (), step),))
    assert refingerprint(plan) == reference_fingerprint(plan)


def test_a_cached_declaration_encodes_as_it_did_on_its_first_plan() -> None:
    # A registered step's encoding is kept on it after its first plan: planned again
    # as declared, and planned changed by a profile, it still writes the canonical document.
    step = Step("s", "one", noop, requires=("a",), timeout=2, settings=(SPEC,),
                retry_on=(Transient,), teardown=teardown, defined_at=SourceLocation("x"))
    first = Holding((PlannedStep(step, 0, (), step),))
    assert refingerprint(first) == reference_fingerprint(first)
    assert step._canonical is not None
    changed = dataclasses.replace(step, timeout=5, after=("b",))
    assert changed._canonical is None  # a changed step does not inherit the declaration's text
    for planned in [(PlannedStep(step, 3, (), step),), (PlannedStep(changed, 1, (), step),),
                    (PlannedStep(step, 2, (), step), PlannedStep(changed, 2, (), step))]:
        plan = Holding(planned)
        assert refingerprint(plan) == reference_fingerprint(plan)
