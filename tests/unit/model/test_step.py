"""The step record's own edges: written once per step, as a plan's graph keeps them."""

from __future__ import annotations

import dataclasses

from initorch.model.step import own_edge_records
from initorch.plugin import StepCatalog
from tests.support.synthetic import define


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
