"""The graph a plan carries: planned steps and the edges between them, without networkx.

Resolution needs networkx (:mod:`initorch.resolution.graph`) to find cycles and
an order.  Running a plan needs only look-ups: the predecessors of a step, the
edges between two steps, a chain for ``explain``, the heaviest chain for the
critical path.  Those live here in plain tuples and dicts, so that executors,
reports and a saved plan (:mod:`initorch.resolution.saved`) never import
networkx: a server that runs a saved plan pays nothing for resolution.
"""

from __future__ import annotations

from collections import deque
from collections.abc import Iterable, Iterator, Mapping
from dataclasses import dataclass, field

from initorch.location import SourceLocation

_EDGE_PHRASES = {
    "requires": "{target} requires {source}",
    "wants": "{target} wants {source}",
    "after": "{target} is ordered after {source}",
    "before": "{source} is ordered before {target}",
    "device": "{target} is device_bound, so it runs after {source} binds the device",
}
EDGE_KINDS_IN_GRAPH = tuple(_EDGE_PHRASES)
"""Every kind an edge may have: the four declared kinds plus the implicit ``device``."""


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


class PlanGraph:
    """The planned steps in plan order and every declared edge among them; immutable.

    Several declarations can produce the same edge (a step's ``requires`` and a
    profile's ``after``); every one is kept with its location, ordered by kind
    and location, so that ``explain`` and the graph formats can say where each
    constraint came from.  Neighbours are returned sorted by name.
    """

    __slots__ = ("_edges", "_order", "_predecessors", "_successors")

    def __init__(self, order: Iterable[str], edges: Iterable[Edge]) -> None:
        """``order`` is a topological order of the planned steps; every edge joins two
        of them (``ValueError`` otherwise: a plan never has dangling edges)."""
        self._order = tuple(order)
        by_pair: dict[tuple[str, str], list[Edge]] = {}
        for edge in sorted(edges):
            by_pair.setdefault((edge.source, edge.target), []).append(edge)
        self._edges = {pair: tuple(found) for pair, found in by_pair.items()}
        predecessors: dict[str, list[str]] = {name: [] for name in self._order}
        successors: dict[str, list[str]] = {name: [] for name in self._order}
        for source, target in self._edges:
            if source not in predecessors or target not in predecessors:
                raise ValueError(f"edge {source} -> {target} joins a step that is not planned")
            predecessors[target].append(source)
            successors[source].append(target)
        self._predecessors = {name: tuple(sorted(found)) for name, found in predecessors.items()}
        self._successors = {name: tuple(sorted(found)) for name, found in successors.items()}

    @property
    def nodes(self) -> list[str]:
        """The planned steps, in plan order."""
        return list(self._order)

    def edges(self) -> Iterator[Edge]:
        """Every declared edge, sorted (by source, target, kind, location)."""
        for found in self._edges.values():
            yield from found

    def edges_between(self, source: str, target: str) -> list[Edge]:
        return list(self._edges.get((source, target), ()))

    def predecessors(self, name: str) -> tuple[str, ...]:
        return self._predecessors[name]

    def successors(self, name: str) -> tuple[str, ...]:
        return self._successors[name]

    def path(self, first: str, second: str) -> list[Edge] | None:
        """The shortest chain of edges by which ``first`` runs before ``second``
        (breadth first, neighbours by name, so the same plan gives the same chain)."""
        came_from: dict[str, str] = {first: first}
        frontier = deque([first])
        while frontier:
            current = frontier.popleft()
            if current == second:
                break
            for successor in self._successors[current]:
                if successor not in came_from:
                    came_from[successor] = current
                    frontier.append(successor)
        if second not in came_from or first == second:
            return None
        chain: list[Edge] = []
        node = second
        while node != first:
            source = came_from[node]
            chain.append(self._edges[(source, node)][0])
            node = source
        return chain[::-1]

    def longest_path(self, weights: Mapping[str, float]) -> list[str]:
        """The chain with the largest total step weight (the critical path); a step
        without a weight weighs nothing."""
        if not weights:
            return []
        best: dict[str, float] = {}
        previous: dict[str, str | None] = {}
        for name in self._order:  # a topological order: predecessors come first
            heaviest = max(self._predecessors[name], key=best.__getitem__, default=None)
            best[name] = weights.get(name, 0.0) + (best[heaviest] if heaviest else 0.0)
            previous[name] = heaviest
        end: str | None = max(self._order, key=best.__getitem__)
        chain: list[str] = []
        while end is not None:
            chain.append(end)
            end = previous[end]
        return chain[::-1]
