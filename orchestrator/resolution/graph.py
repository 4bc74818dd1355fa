"""The step graph of resolution: cycles and ordering over networkx, behind a small API.

An edge ``u -> v`` means "u runs before v".  Several declarations can produce
the same edge (a step's ``requires`` and a profile's ``after``); every one is
kept with its location, so that cycle reports can say where each constraint
came from.  Ordering is deterministic: lexicographic topological order, waves
sorted by name.  Only the resolver uses this class; a resolved plan carries a
networkx-free :class:`~initorch.resolution.plangraph.PlanGraph` instead.
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator
from itertools import islice, pairwise

import networkx as nx

from initorch.resolution.plangraph import Edge

MAX_CYCLES_REPORTED = 64


class StepGraph:
    """Immutable-by-convention graph of the selected steps, cycles and all."""

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
