"""initorch.resolution.walk: the graphlib-shaped walk that every executor takes its steps from."""

from __future__ import annotations

import graphlib

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from initorch import Edge
from initorch.location import SourceLocation
from initorch.resolution.plangraph import PlanGraph
from initorch.resolution.walk import PlanWalk

AT = SourceLocation("p.yaml", 1, 1)


@st.composite
def graphs(draw: st.DrawFn, max_steps: int = 9) -> PlanGraph:
    """A random DAG over shuffled names, each pair of steps joined with some chance,
    in a topological order that is not name order by accident."""
    n = draw(st.integers(0, max_steps))
    names = draw(st.permutations([f"s{i}" for i in range(n)]))
    edges = [Edge(names[i], names[j], "after", AT, "profile p")
             for j in range(n) for i in range(j) if draw(st.booleans())]
    return PlanGraph(names, edges)


@settings(max_examples=200, deadline=None)
@given(graph=graphs(), data=st.data())
def test_every_step_is_handed_out_once_and_only_after_its_predecessors_are_done(graph, data):
    # Mark done any handed-out steps, in any order, a few at a time: what a parallel
    # executor does as its threads finish.
    walk = PlanWalk(graph)
    handed_out: list[str] = []
    running: list[str] = []
    finished: set[str] = set()
    while walk.is_active():
        for name in walk.get_ready():
            assert set(graph.predecessors(name)) <= finished, name
            handed_out.append(name)
            running.append(name)
        assert running, "the walk is active but hands out nothing and waits for nothing"
        batch = data.draw(st.lists(st.sampled_from(running), min_size=1, unique=True))
        for name in batch:
            running.remove(name)
        walk.done(*batch)
        finished.update(batch)
    assert sorted(handed_out) == sorted(graph.nodes)  # each exactly once
    assert finished == set(graph.nodes) and walk.get_ready() == ()


@settings(max_examples=100, deadline=None)
@given(graph=graphs())
def test_the_walk_hands_out_what_graphlib_hands_out(graph):
    # The same state machine as graphlib.TopologicalSorter: batch by batch, the same
    # steps become ready.
    reference: graphlib.TopologicalSorter[str] = graphlib.TopologicalSorter(
        {name: graph.predecessors(name) for name in graph.nodes})
    reference.prepare()
    walk = PlanWalk(graph)
    while reference.is_active():
        assert walk.is_active()
        ready = walk.get_ready()
        assert sorted(ready) == sorted(reference.get_ready())
        walk.done(*ready)
        reference.done(*ready)
    assert not walk.is_active()


def test_the_first_ready_steps_come_in_the_graphs_order_then_as_they_become_ready():
    graph = PlanGraph(["b", "a", "c", "e", "d"],
                      [Edge("a", "e", "after", AT, "p"), Edge("a", "d", "after", AT, "p")])
    walk = PlanWalk(graph)
    assert walk.get_ready() == ("b", "a", "c")
    assert walk.get_ready() == ()
    walk.done("a")
    assert walk.get_ready() == ("d", "e")  # a step's successors by name


def test_done_refuses_a_step_not_handed_out_or_done_twice():
    walk = PlanWalk(PlanGraph(["a", "b"], [Edge("a", "b", "requires", AT, "p")]))
    with pytest.raises(ValueError, match="step 'b' was not handed out"):
        walk.done("b")
    assert walk.get_ready() == ("a",)
    walk.done("a")
    with pytest.raises(ValueError, match="step 'a' was not handed out"):
        walk.done("a")
    assert walk.is_active() and walk.get_ready() == ("b",)


def test_an_empty_graph_is_not_active():
    assert not PlanWalk(PlanGraph([], [])).is_active()
