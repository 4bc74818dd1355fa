"""initorch.resolution.graph: deterministic order and waves, every cycle, located edges.

The graph a resolved plan carries is tested in test_plangraph.py."""

from __future__ import annotations

import heapq
import random
from collections.abc import Iterable

import networkx as nx
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from initorch import Edge
from initorch.location import SourceLocation
from initorch.resolution.graph import MAX_CYCLES_REPORTED, StepGraph

LETTERS = "abcdefghij"


def edge(source: str, target: str, kind: str = "after", line: int = 1) -> Edge:
    return Edge(source, target, kind, SourceLocation("p.yaml", line, 3), "profile p")


def graph_of(pairs: Iterable[tuple[str, str]], nodes: Iterable[str] = ()) -> StepGraph:
    pairs = list(pairs)
    names = {n for pair in pairs for n in pair} | set(nodes)
    return StepGraph(names, [edge(u, v, line=i + 1) for i, (u, v) in enumerate(pairs)])


def assert_cycle(graph: StepGraph, cycle: tuple[str, ...]) -> None:
    """``cycle`` is elementary, closed by real edges, and starts at its smallest name."""
    assert len(set(cycle)) == len(cycle)
    assert cycle[0] == min(cycle)
    pairs = {(e.source, e.target) for e in graph.edges()}
    for u, v in zip(cycle, (*cycle[1:], cycle[0]), strict=True):
        assert (u, v) in pairs, f"{u} -> {v} is not an edge"


def reference_lexicographic_order(nodes: Iterable[str], pairs: set[tuple[str, str]]) -> list[str]:
    """Kahn's algorithm always taking the smallest ready name."""
    indegree = dict.fromkeys(nodes, 0)
    for _, v in pairs:
        indegree[v] += 1
    ready = [n for n, d in indegree.items() if d == 0]
    heapq.heapify(ready)
    order = []
    while ready:
        node = heapq.heappop(ready)
        order.append(node)
        for u, v in sorted(pairs):
            if u == node:
                indegree[v] -= 1
                if indegree[v] == 0:
                    heapq.heappush(ready, v)
    return order


# --- examples ----------------------------------------------------------------------------------

def test_order_breaks_ties_by_name():
    graph = graph_of([("b", "d"), ("a", "d"), ("c", "a")], nodes=["e"])
    assert graph.order() == ["b", "c", "a", "d", "e"]
    assert graph.waves() == [["b", "c", "e"], ["a"], ["d"]]


def test_every_declaration_of_an_edge_is_kept():
    graph = StepGraph(["a", "b"], [edge("a", "b", "requires", 2), edge("a", "b", "after", 9)])
    assert [(e.source, e.target, e.kind) for e in graph.edges()] == [
        ("a", "b", "after"), ("a", "b", "requires")]


@pytest.mark.parametrize(("pairs", "cycles"), [
    ([("a", "a")], [("a",)]),
    ([("b", "a"), ("a", "b")], [("a", "b")]),
    ([("c", "a"), ("a", "b"), ("b", "c")], [("a", "b", "c")]),
    # two independent cycles and a shared-node figure eight
    ([("x", "y"), ("y", "x"), ("b", "a"), ("a", "b"), ("b", "c"), ("c", "a")],
     [("a", "b"), ("x", "y"), ("a", "b", "c")]),
    ([("a", "b"), ("b", "c")], []),
])
def test_every_cycle_is_reported_rotated_and_sorted(pairs, cycles):
    graph = graph_of(pairs)
    assert graph.cycles() == cycles
    for cycle in cycles:
        hops = graph.cycle_edges(cycle)
        assert [(e.source, e.target) for e in hops] == list(
            zip(cycle, (*cycle[1:], cycle[0]), strict=True))


def test_cycle_reports_are_bounded():
    names = list("abcdef")
    graph = graph_of([(u, v) for u in names for v in names if u != v])
    cycles = graph.cycles()
    assert len(cycles) == MAX_CYCLES_REPORTED
    for cycle in cycles:
        assert_cycle(graph, cycle)


# --- properties ------------------------------------------------------------------------------

@st.composite
def dags(draw: st.DrawFn) -> tuple[list[str], set[tuple[str, str]]]:
    """A DAG over shuffled names: edges go forward in a hidden random rank."""
    count = draw(st.integers(1, 10))
    names = draw(st.permutations(LETTERS))[:count]
    pairs = {(names[i], names[j]) for i in range(count) for j in range(i + 1, count)
             if draw(st.booleans())}
    return list(names), pairs


@settings(max_examples=150, deadline=None)
@given(dags(), st.randoms(use_true_random=False))
def test_order_and_waves_respect_every_edge(dag, rnd: random.Random):
    names, pairs = dag
    edges = [edge(u, v) for u, v in pairs]
    graph = StepGraph(names, edges)
    order = graph.order()
    assert sorted(order) == sorted(names)
    position = {n: i for i, n in enumerate(order)}
    assert all(position[u] < position[v] for u, v in pairs)
    assert order == reference_lexicographic_order(names, pairs)

    waves = graph.waves()
    flat = [n for wave in waves for n in wave]
    assert sorted(flat) == sorted(names) and len(flat) == len(set(flat))
    level = {n: i for i, wave in enumerate(waves) for n in wave}
    assert all(level[u] < level[v] for u, v in pairs)
    for wave in waves:
        assert wave == sorted(wave)
    for node, index in level.items():  # each step runs as early as it can
        preds = [u for u, v in pairs if v == node]
        assert index == (max(level[u] for u in preds) + 1 if preds else 0)

    shuffled_names, shuffled_edges = list(names), list(edges)
    rnd.shuffle(shuffled_names)
    rnd.shuffle(shuffled_edges)
    again = StepGraph(shuffled_names, shuffled_edges)
    assert (again.order(), again.waves()) == (order, waves)
    assert graph.cycles() == []


@st.composite
def cyclic_graphs(draw: st.DrawFn) -> list[tuple[str, str]]:
    names = list(LETTERS[:draw(st.integers(1, 6))])
    pairs = draw(st.sets(st.tuples(st.sampled_from(names), st.sampled_from(names)),
                         min_size=1, max_size=14))
    cycle = draw(st.lists(st.sampled_from(names), min_size=1, max_size=len(names),
                          unique=True))
    pairs |= set(zip(cycle, (*cycle[1:], cycle[0]), strict=True))
    return sorted(pairs)


@settings(max_examples=150, deadline=None)
@given(cyclic_graphs())
def test_reported_cycles_are_real_rotated_sorted_and_complete(pairs):
    graph = graph_of(pairs)
    cycles = graph.cycles()
    assert cycles, "a cycle was planted"
    assert cycles == sorted(set(cycles), key=lambda c: (len(c), c))
    for cycle in cycles:
        assert_cycle(graph, cycle)
        hops = graph.cycle_edges(cycle)
        assert len(hops) == len(cycle)
    reference = nx.DiGraph(pairs)
    expected = set()
    for found in nx.simple_cycles(reference):
        start = found.index(min(found))
        expected.add(tuple(found[start:] + found[:start]))
    if len(expected) < MAX_CYCLES_REPORTED:
        assert set(cycles) == expected
