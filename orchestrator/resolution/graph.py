"""The step graph of resolution: cycles, order and waves, behind a small API.

An edge ``u -> v`` means "u runs before v".  Several declarations can produce
the same edge (a step's ``requires`` and a profile's ``after``); every one is
kept with its location, so that cycle reports can say where each constraint
came from.  Ordering is deterministic: lexicographic topological order, waves
sorted by name.  Only the resolver uses this class; a resolved plan carries a
:class:`~initorch.resolution.plangraph.PlanGraph` made from the same edges.

The usual case is a graph without a cycle, and it costs one pass of Kahn's
algorithm over plain dicts and a heap: that pass gives the order, the waves and
the proof that there is no cycle.  Only when the pass cannot place every step is
networkx imported, to enumerate the cycles among the steps it could not place.
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator, Mapping
from heapq import heapify, heappop, heappush
from itertools import islice, pairwise

from initorch.resolution.plangraph import (
    Edge,
    IncomingEdges,
    PlanGraph,
    group_edges,
    unique_sources,
)

MAX_CYCLES_REPORTED = 64


class StepGraph:
    """Immutable-by-convention graph of the selected steps, cycles and all."""

    __slots__ = ("_incoming", "_levels", "_nodes", "_order")

    def __init__(self, nodes: Iterable[str], edges: Iterable[Edge]) -> None:
        self._incoming = group_edges(edges)
        known = dict.fromkeys(nodes)
        for target, found in self._incoming.items():  # an edge brings its steps along
            known.setdefault(target)
            for source in unique_sources(found):
                known.setdefault(source)
        self._nodes = list(known)
        self._order: list[str] | None = None
        self._levels: dict[str, int] = {}

    @classmethod
    def from_records(cls, nodes: Iterable[str], incoming: IncomingEdges) -> StepGraph:
        """A graph from edge records already grouped by target among ``nodes`` (see
        :func:`~initorch.resolution.plangraph.in_declaration_order`): the resolver's."""
        graph = cls.__new__(cls)
        graph._incoming, graph._nodes = incoming, list(nodes)
        graph._order, graph._levels = None, {}
        return graph

    @property
    def nodes(self) -> list[str]:
        return sorted(self._nodes)

    def edges(self) -> Iterator[Edge]:
        """Every declared edge, in a stable order."""
        return PlanGraph.from_records(tuple(self._nodes), self._incoming).edges()

    def cycles(self) -> list[tuple[str, ...]]:
        """Every elementary cycle (up to a bound), each rotated to start at its
        smallest name, sorted; self-loops included as 1-tuples."""
        placed = self._walk()
        if len(placed) == len(self._nodes):
            return []
        return _enumerate_cycles(self._unplaced_pairs(set(placed)))

    def cycle_edges(self, cycle: tuple[str, ...]) -> list[Edge]:
        """The declarations that close ``cycle`` (one per hop, the first declared)."""
        graph = PlanGraph.from_records(tuple(self._nodes), self._incoming)
        return [graph.edges_between(u, v)[0] for u, v in pairwise((*cycle, cycle[0]))]

    def order(self) -> list[str]:
        """Topological order; ties broken by name, so the same input gives the same order.

        Raises :class:`ValueError` when the graph has a cycle (see :meth:`cycles`)."""
        placed = self._walk()
        if len(placed) != len(self._nodes):
            raise ValueError("the step graph has a cycle; see StepGraph.cycles()")
        return list(placed)

    def waves(self) -> list[list[str]]:
        """Groups of steps whose dependencies are all in earlier groups."""
        levels = self.levels()
        waves: list[list[str]] = [[] for _ in range(max(levels.values(), default=-1) + 1)]
        for name in sorted(levels):
            waves[levels[name]].append(name)
        return waves

    def levels(self) -> Mapping[str, int]:
        """The wave of every step, by name (what :meth:`waves` groups)."""
        self.order()
        return self._levels

    def plan_graph(self) -> PlanGraph:
        """The networkx-free graph a plan carries, in this graph's order, sharing its edges."""
        return PlanGraph.from_records(tuple(self.order()), self._incoming)

    def _walk(self) -> list[str]:
        """Kahn's algorithm, always taking the smallest ready name: the order of every
        step that no cycle holds back, and the wave of each (one more than the latest
        wave among its predecessors).  Computed once."""
        if self._order is not None:
            return self._order
        waiting: dict[str, int] = {}  # steps with predecessors: how many are not placed
        following: dict[str, list[str]] = {}
        follower = following.get
        for target, found in self._incoming.items():
            count, previous = 0, None
            for record in found:  # grouped by source: a repeated source is adjacent
                source = record[0]
                if source == previous:
                    continue
                count, previous = count + 1, source
                later = follower(source)
                if later is None:
                    following[source] = [target]
                else:
                    later.append(target)
            waiting[target] = count
        ready = [name for name in self._nodes if name not in waiting]
        heapify(ready)
        levels = dict.fromkeys(self._nodes, 0)
        order: list[str] = []
        while ready:
            name = heappop(ready)
            order.append(name)
            later = follower(name)
            if later is None:
                continue
            level = levels[name] + 1
            for target in later:
                left = waiting[target] - 1
                waiting[target] = left
                if levels[target] < level:  # noqa: PLR1730 (no call: this runs once per edge)
                    levels[target] = level
                if not left:
                    heappush(ready, target)
        self._order, self._levels = order, levels
        return order

    def _unplaced_pairs(self, placed: set[str]) -> tuple[list[str], list[tuple[str, str]]]:
        """The steps the walk could not place, sorted, and the pairs among them in
        sorted order: what cycle enumeration needs, and nothing the walk cleared."""
        held = sorted(name for name in self._nodes if name not in placed)
        pairs = sorted((source, target) for target in held
                       for source in unique_sources(self._incoming.get(target, ()))
                       if source not in placed)
        return held, pairs


def _enumerate_cycles(graph: tuple[list[str], list[tuple[str, str]]]) -> list[tuple[str, ...]]:
    """Every elementary cycle of ``(nodes, pairs)`` up to the bound, found by networkx
    (imported here: only a graph with a cycle pays for it)."""
    import networkx as nx

    nodes, pairs = graph
    digraph: nx.DiGraph = nx.DiGraph()
    digraph.add_nodes_from(nodes)
    digraph.add_edges_from(pairs)
    found: set[tuple[str, ...]] = set()
    for component in nx.strongly_connected_components(digraph):
        if len(component) == 1:
            (name,) = component
            if digraph.has_edge(name, name):
                found.add((name,))
            continue
        for cycle in islice(nx.simple_cycles(digraph.subgraph(component)), MAX_CYCLES_REPORTED):
            start = cycle.index(min(cycle))
            found.add(tuple(cycle[start:] + cycle[:start]))
    return sorted(found, key=lambda c: (len(c), c))[:MAX_CYCLES_REPORTED]
