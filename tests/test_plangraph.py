"""initorch.resolution.plangraph: the networkx-free graph that plans carry and executors use."""

from __future__ import annotations

import itertools
from collections.abc import Iterable

import networkx as nx
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from initorch import Edge
from initorch.location import SourceLocation
from initorch.resolution.plangraph import PlanGraph


def edge(source: str, target: str, kind: str = "after", line: int = 1) -> Edge:
    return Edge(source, target, kind, SourceLocation("p.yaml", line, 3), "profile p")


def graph_of(pairs: Iterable[tuple[str, str]], order: Iterable[str] = ()) -> PlanGraph:
    """``pairs`` as edges; ``order`` defaults to a topological order of the pairs."""
    pairs = list(pairs)
    reference = nx.DiGraph(pairs)
    reference.add_nodes_from(order)
    names = list(order) or list(nx.lexicographical_topological_sort(reference))
    return PlanGraph(names, [edge(u, v, line=i + 1) for i, (u, v) in enumerate(pairs)])


@pytest.mark.parametrize(("kind", "sentence"), [
    ("requires", "b requires a"),
    ("wants", "b wants a"),
    ("after", "b is ordered after a"),
    ("before", "a is ordered before b"),
    ("device", "b is device_bound, so it runs after a binds the device"),
])
def test_edge_sentences_name_the_declaration(kind, sentence):
    assert edge("a", "b", kind, 7).describe() == f"{sentence} [profile p, p.yaml:7:3]"


def test_every_declaration_of_an_edge_is_kept_in_a_stable_order():
    graph = PlanGraph(["a", "b"], [edge("a", "b", "requires", 2), edge("a", "b", "after", 9)])
    assert [e.kind for e in graph.edges_between("a", "b")] == ["after", "requires"]
    assert len(list(graph.edges())) == 2
    assert graph.edges_between("b", "a") == []
    assert graph.nodes == ["a", "b"]


def test_neighbours_are_sorted_and_isolated_steps_have_none():
    graph = graph_of([("x", "m"), ("a", "m"), ("m", "z"), ("m", "b")], order="axmbzq")
    assert graph.predecessors("m") == ("a", "x")
    assert graph.successors("m") == ("b", "z")
    assert graph.predecessors("q") == graph.successors("q") == ()


def test_an_edge_to_a_step_outside_the_plan_is_refused():
    with pytest.raises(ValueError, match="b -> c joins a step that is not planned"):
        PlanGraph(["a", "b"], [edge("a", "b"), edge("b", "c")])


def test_path_is_a_located_chain():
    graph = graph_of([("a", "b"), ("b", "c"), ("c", "d"), ("a", "x")])
    chain = graph.path("a", "d")
    assert chain is not None
    assert [(e.source, e.target) for e in chain] == [("a", "b"), ("b", "c"), ("c", "d")]
    assert [e.declared_at.line for e in chain] == [1, 2, 3]
    assert graph.path("d", "a") is None
    assert graph.path("x", "d") is None
    assert graph.path("a", "a") is None


def test_path_prefers_the_shortest_chain():
    graph = graph_of([("a", "b"), ("b", "c"), ("c", "d"), ("a", "d")])
    chain = graph.path("a", "d")
    assert chain is not None and [(e.source, e.target) for e in chain] == [("a", "d")]


def test_longest_path_is_the_heaviest_chain():
    graph = graph_of([("a", "b"), ("b", "c"), ("a", "d"), ("d", "c")])
    assert graph.longest_path({"a": 1, "b": 1, "c": 1, "d": 5}) == ["a", "d", "c"]
    assert graph.longest_path({}) == []


@st.composite
def dags(draw: st.DrawFn) -> tuple[list[str], set[tuple[str, str]]]:
    """A DAG over shuffled names: edges go forward in a hidden random rank."""
    count = draw(st.integers(1, 9))
    names = draw(st.permutations("abcdefghi"))[:count]
    pairs = {(names[i], names[j]) for i in range(count) for j in range(i + 1, count)
             if draw(st.booleans())}
    return list(names), pairs


@settings(max_examples=150, deadline=None)
@given(dags(), st.data())
def test_agrees_with_networkx(dag, data):
    names, pairs = dag
    reference = nx.DiGraph()
    reference.add_nodes_from(names)
    reference.add_edges_from(pairs)
    graph = graph_of(sorted(pairs), order=list(nx.lexicographical_topological_sort(reference)))
    for name in names:
        assert graph.predecessors(name) == tuple(sorted(reference.predecessors(name)))
        assert graph.successors(name) == tuple(sorted(reference.successors(name)))
    first, second = data.draw(st.sampled_from(names)), data.draw(st.sampled_from(names))
    chain = graph.path(first, second)
    if first != second and nx.has_path(reference, first, second):
        assert chain is not None
        assert len(chain) == nx.shortest_path_length(reference, first, second)
        assert chain[0].source == first and chain[-1].target == second
        assert all(a.target == b.source for a, b in itertools.pairwise(chain))
    else:
        assert chain is None
    weights = {name: float(data.draw(st.integers(0, 5))) for name in names}
    heaviest = graph.longest_path(weights)
    assert all(reference.has_edge(u, v) for u, v in itertools.pairwise(heaviest))
    for u, v in reference.edges:
        reference[u][v]["weight"] = weights[v]
    best_chain = max(weights[n] + nx.dag_longest_path_length(
        reference.subgraph(nx.descendants(reference, n) | {n}), weight="weight")
        for n in names)
    assert sum(weights[n] for n in heaviest) == best_chain
