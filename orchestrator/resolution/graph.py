"""The step graph: storage and validation over networkx, behind a small API.

An edge ``u -> v`` means "u runs before v".  Several declarations can produce
the same edge (a step's ``requires`` and a profile's ``after``); every one is
kept with its location, so that cycle reports and ``explain`` can say where
each constraint came from.  Ordering is deterministic: lexicographic
topological order, waves sorted by name.
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator
from dataclasses import dataclass, field
from itertools import islice, pairwise

import networkx as nx

from initorch.location import SourceLocation

MAX_CYCLES_REPORTED = 64

_EDGE_PHRASES = {
    "requires": "{target} requires {source}",
    "wants": "{target} wants {source}",
    "after": "{target} is ordered after {source}",
    "before": "{source} is ordered before {target}",
    "device": "{target} is device_bound, so it runs after {source} binds the device",
}


@dataclass(frozen=True, slots=True, order=True)
class Edge:
    """``source`` runs before ``target`` because of one declaration of ``kind``.

    ``reason`` is the declaring profile's explanation, if it gave one; it does not
    take part in ordering or equality.
    """

    source: str
    target: str
    kind: str
    declared_at: SourceLocation
    declared_by: str
    reason: str | None = field(default=None, compare=False)

    def describe(self) -> str:
        """A sentence: ``init_torch_distributed requires set_device (steps/x.py:12)``,
        followed by the declared reason."""
        phrase = _EDGE_PHRASES[self.kind].format(source=self.source, target=self.target)
        because = f": {self.reason}" if self.reason else ""
        return f"{phrase} [{self.declared_by}, {self.declared_at}]{because}"


class StepGraph:
    """Immutable-by-convention DAG of planned steps."""

    def __init__(self, nodes: Iterable[str], edges: Iterable[Edge]) -> None:
        self._g: nx.DiGraph = nx.DiGraph()
        self._g.add_nodes_from(sorted(nodes))
        for edge in sorted(edges):
            if self._g.has_edge(edge.source, edge.target):
                self._g[edge.source][edge.target]["edges"].append(edge)
            else:
                self._g.add_edge(edge.source, edge.target, edges=[edge])

    @property
    def nodes(self) -> list[str]:
        return list(self._g.nodes)

    def edges(self) -> Iterator[Edge]:
        """Every declared edge, in a stable order."""
        for source, target in sorted(self._g.edges):
            yield from self._g[source][target]["edges"]

    def edges_between(self, source: str, target: str) -> list[Edge]:
        if not self._g.has_edge(source, target):
            return []
        return list(self._g[source][target]["edges"])

    def predecessors(self, name: str) -> list[str]:
        return sorted(self._g.predecessors(name))

    def successors(self, name: str) -> list[str]:
        return sorted(self._g.successors(name))

    def cycles(self) -> list[tuple[str, ...]]:
        """Every elementary cycle (up to a bound), each rotated to start at its
        smallest name, sorted; self-loops included as 1-tuples."""
        found: set[tuple[str, ...]] = set()
        for component in nx.strongly_connected_components(self._g):
            sub = self._g.subgraph(component)
            if len(component) == 1 and not sub.number_of_edges():
                continue
            for cycle in islice(nx.simple_cycles(sub), MAX_CYCLES_REPORTED):
                start = cycle.index(min(cycle))
                found.add(tuple(cycle[start:] + cycle[:start]))
        return sorted(found, key=lambda c: (len(c), c))[:MAX_CYCLES_REPORTED]

    def cycle_edges(self, cycle: tuple[str, ...]) -> list[Edge]:
        """The declarations that close ``cycle`` (one per hop, the first declared)."""
        hops = pairwise((*cycle, cycle[0]))
        return [self._g[u][v]["edges"][0] for u, v in hops]

    def order(self) -> list[str]:
        """Topological order; ties broken by name, so the same input gives the same order."""
        return list(nx.lexicographical_topological_sort(self._g))

    def waves(self) -> list[list[str]]:
        """Groups of steps whose dependencies are all in earlier groups."""
        return [sorted(generation) for generation in nx.topological_generations(self._g)]

    def path(self, first: str, second: str) -> list[Edge] | None:
        """The shortest chain of edges by which ``first`` runs before ``second``."""
        try:
            nodes = nx.shortest_path(self._g, first, second)
        except nx.NetworkXNoPath:
            return None
        return [self._g[u][v]["edges"][0] for u, v in pairwise(nodes)]

    def longest_path(self, weights: dict[str, float]) -> list[str]:
        """The chain with the largest total node weight (the critical chain)."""
        if not weights:
            return []
        weighted = nx.DiGraph()
        weighted.add_nodes_from(self._g.nodes)
        # Weight each edge by its target's cost; a virtual source carries the first cost.
        for u, v in self._g.edges:
            weighted.add_edge(u, v, weight=weights.get(v, 0.0))
        start = "\0start"
        for node in self._g.nodes:
            weighted.add_edge(start, node, weight=weights.get(node, 0.0))
        chain: list[str] = nx.dag_longest_path(weighted, weight="weight")
        return [node for node in chain if node != start]
