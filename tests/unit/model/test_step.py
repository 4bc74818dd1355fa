"""The step record: built from its definition at once, and its own edges written once
per step, as a plan's graph keeps them."""

from __future__ import annotations

import dataclasses

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from initorch.location import SourceLocation
from initorch.model.step import StepDefinition, freeze, own_edge_records
from initorch.plugin import Step, StepCatalog, step
from tests.support.synthetic import define


def _action(ctx: object) -> None:
    """Does nothing."""


def _undo(ctx: object, output: object) -> None:
    """Undoes nothing."""


_NAMES = st.lists(st.from_regex(r"[a-z][a-z0-9_]{0,5}", fullmatch=True), max_size=3)
_KEYWORDS = st.fixed_dictionaries({}, optional={
    "requires": _NAMES, "wants": _NAMES.map(tuple), "after": _NAMES, "before": _NAMES,
    "wanted_by": _NAMES, "when": st.sampled_from(["flag", "not a.b"]),
    "device_bound": st.booleans(), "binds_device": st.booleans(), "job_store": st.booleans(),
    "barrier": st.booleans(), "holds_gil": st.booleans(),
    "timeout": st.none() | st.floats(0.1, 60), "retries": st.integers(0, 3),
    "retry_on": st.sampled_from([(), (ConnectionError,), [OSError, ValueError]]),
    "retry_backoff": st.floats(0, 5), "description": st.text(max_size=8)})


@settings(max_examples=200, deadline=None)
@given(keywords=_KEYWORDS, teardown=st.booleans())
def test_a_definition_freezes_into_the_step_its_fields_make(keywords, teardown):
    definition = step("s", **keywords)(_action)
    if teardown:
        definition.teardown(_undo)
    frozen = freeze(definition)
    made = Step(action=_action, teardown=definition.teardown_fn, preview=None,
                defined_at=definition.defined_at, **definition.fields)
    assert type(frozen) is Step and frozen == made
    for each in dataclasses.fields(Step):  # those left out of == too
        assert getattr(frozen, each.name) == getattr(made, each.name), each.name
    assert dataclasses.replace(frozen, retries=1).retries == 1
    with pytest.raises(dataclasses.FrozenInstanceError):
        frozen.name = "t"  # type: ignore[misc]


@pytest.mark.parametrize(("fields", "said"), [
    ({"description": "d"}, "name"),
    ({"name": "s", "description": "d", "requies": ("a",)}, "requies"),
    ({"name": "s", "requies": ("a",)}, "requies"),  # one too many and one missing
])
def test_a_definition_written_by_hand_with_a_wrong_field_is_refused_naming_it(fields, said):
    definition = StepDefinition(_action, dict(fields), SourceLocation("x.py", 1))
    with pytest.raises(TypeError, match=said):
        freeze(definition)


def test_a_registered_step_keeps_its_own_edges_sorted_with_who_declared_them():
    catalog = StepCatalog()
    registered = catalog.add(define("c", requires=("b", "a"), wants="d", after="a",
                                    before="e"))
    where, by = registered.defined_at, "step c"
    records = own_edge_records(registered)
    # before leads to another step; the rest lead here, in declaration order (by source).
    assert records == (("a", "after", where, by, None), ("a", "requires", where, by, None),
                       ("b", "requires", where, by, None), ("d", "wants", where, by, None))
    assert own_edge_records(registered) is records  # written once, then kept


def test_a_step_that_profiles_change_writes_its_own_edges():
    registered = StepCatalog().add(define("c", requires="a"))
    changed = dataclasses.replace(registered, requires=("a", "b"))
    assert [record[0] for record in own_edge_records(changed)] == ["a", "b"]
    assert [record[0] for record in own_edge_records(registered)] == ["a"]
