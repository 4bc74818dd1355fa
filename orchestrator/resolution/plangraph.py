"""The graph a plan carries: planned steps and the edges between them, without networkx.

Running a plan needs only look-ups: the predecessors of a step, the edges
between two steps, a chain for ``explain``, the heaviest chain for the critical
path.  Those live here in plain tuples and dicts, so that executors, reports and
a saved plan (:mod:`initorch.resolution.saved`) never import networkx.

A graph stores each edge once, as a plain tuple under the step it leads to (an
:data:`~initorch.model.step.EdgeRecord`), and makes :class:`Edge` objects when asked for them: a
plan of 100k steps and 300k edges is built and held at the cost of tuples, and
what an executor asks (which steps must finish before this one, through which
kinds of edge) is one look-up.
"""

from __future__ import annotations

from collections import deque
from collections.abc import Collection, Iterable, Iterator, Mapping
from dataclasses import field
from operator import itemgetter

from initorch.location import SourceLocation
from initorch.model.step import EdgeRecord
from initorch.records import record

_EDGE_PHRASES = {
    "requires": "{target} requires {source}",
    "wants": "{target} wants {source}",
    "after": "{target} is ordered after {source}",
    "before": "{source} is ordered before {target}",
    "device": "{target} is device_bound, so it runs after {source} binds the device",
}
EDGE_KINDS_IN_GRAPH = tuple(_EDGE_PHRASES)
"""Every kind an edge may have: the four declared kinds plus the implicit ``device``."""


@record(order=True)
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


IncomingEdges = dict[str, tuple[EdgeRecord, ...]]
"""Edge records by the step they lead to, each group in declaration order."""

_DECLARATION_ORDER = itemgetter(0, 1, 2, 3)  # source, kind, declared_at, declared_by
_EDGE_ORDER = itemgetter(0, 1, 2, 3, 4)  # source, target, kind, declared_at, declared_by


def record_of(edge: Edge) -> EdgeRecord:
    return (edge.source, edge.kind, edge.declared_at, edge.declared_by, edge.reason)


def in_declaration_order(grouped: Mapping[str, list[EdgeRecord]]) -> IncomingEdges:
    """Each group sorted as :class:`Edge` objects sort (by source, kind, location,
    declarer; the target is the group's), so that the declarations of one pair of
    steps lie together, the first declared first."""
    return {target: tuple(sorted(found, key=_DECLARATION_ORDER)) if len(found) > 1
            else (found[0],) for target, found in grouped.items()}


def group_edges(edges: Iterable[Edge]) -> IncomingEdges:
    """``edges`` as records grouped by target, in declaration order."""
    grouped: dict[str, list[EdgeRecord]] = {}
    for edge in edges:
        grouped.setdefault(edge.target, []).append(record_of(edge))
    return in_declaration_order(grouped)


def unique_sources(records: tuple[EdgeRecord, ...]) -> tuple[str, ...]:
    """The sources of one group of records, each once, by name."""
    if len(records) == 1:
        return (records[0][0],)
    return tuple(dict.fromkeys(record[0] for record in records))


class PlanGraph:
    """The planned steps in plan order and every declared edge among them; immutable.

    Several declarations can produce the same edge (a step's ``requires`` and a
    profile's ``after``); every one is kept with its location, ordered by kind
    and location, so that ``explain`` and the graph formats can say where each
    constraint came from.  Neighbours are returned sorted by name.
    """

    __slots__ = ("_incoming", "_order", "_successors")

    def __init__(self, order: Iterable[str], edges: Iterable[Edge]) -> None:
        """``order`` is a topological order of the planned steps; every edge joins two
        of them (``ValueError`` otherwise: a plan never has dangling edges)."""
        self._order = tuple(order)
        self._incoming = group_edges(edges)
        self._successors: dict[str, tuple[str, ...]] | None = None
        planned = set(self._order)
        dangling = [(record[0], target) for target, found in self._incoming.items()
                    for record in found if record[0] not in planned or target not in planned]
        if dangling:
            source, target = min(dangling)
            raise ValueError(f"edge {source} -> {target} joins a step that is not planned")

    @classmethod
    def from_records(cls, order: tuple[str, ...], incoming: IncomingEdges) -> PlanGraph:
        """A graph over ``order`` from records grouped by :func:`in_declaration_order`
        among its steps (the resolver's, checked as they were built)."""
        graph = cls.__new__(cls)
        graph._order, graph._incoming, graph._successors = order, incoming, None
        return graph

    @property
    def nodes(self) -> list[str]:
        """The planned steps, in plan order."""
        return list(self._order)

    def edges(self) -> Iterator[Edge]:
        """Every declared edge, sorted (by source, target, kind, location)."""
        every = [(source, target, kind, at, by, reason)
                 for target, found in self._incoming.items()
                 for source, kind, at, by, reason in found]
        every.sort(key=_EDGE_ORDER)
        for fields in every:
            yield Edge(*fields)

    def edges_between(self, source: str, target: str) -> list[Edge]:
        return [Edge(source, target, kind, at, by, reason)
                for first, kind, at, by, reason in self._incoming.get(target, ())
                if first == source]

    def edges_into(self, name: str) -> list[Edge]:
        """Every edge that leads to ``name``, by source."""
        return [Edge(source, name, kind, at, by, reason)
                for source, kind, at, by, reason in self._incoming.get(name, ())]

    def predecessors(self, name: str, kinds: Collection[str] | None = None) -> tuple[str, ...]:
        """The steps with an edge into ``name`` (only edges of ``kinds``, if given)."""
        found = self._incoming.get(name)
        if not found:
            return ()
        if kinds is not None:
            found = tuple(record for record in found if record[1] in kinds)
            if not found:
                return ()
        return unique_sources(found)

    def successors(self, name: str) -> tuple[str, ...]:
        if self._successors is None:
            following: dict[str, list[str]] = {}
            for target, found in self._incoming.items():
                for source in unique_sources(found):
                    following.setdefault(source, []).append(target)
            self._successors = {name: tuple(sorted(targets))
                                for name, targets in following.items()}
        return self._successors.get(name, ())

    def path(self, first: str, second: str) -> list[Edge] | None:
        """The shortest chain of edges by which ``first`` runs before ``second``
        (breadth first, neighbours by name, so the same plan gives the same chain)."""
        came_from: dict[str, str] = {first: first}
        frontier = deque([first])
        while frontier:
            current = frontier.popleft()
            if current == second:
                break
            for successor in self.successors(current):
                if successor not in came_from:
                    came_from[successor] = current
                    frontier.append(successor)
        if second not in came_from or first == second:
            return None
        chain: list[Edge] = []
        node = second
        while node != first:
            source = came_from[node]
            chain.append(self.edges_between(source, node)[0])
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
            heaviest = max(self.predecessors(name), key=best.__getitem__, default=None)
            best[name] = weights.get(name, 0.0) + (best[heaviest] if heaviest else 0.0)
            previous[name] = heaviest
        end: str | None = max(self._order, key=best.__getitem__)
        chain: list[str] = []
        while end is not None:
            chain.append(end)
            end = previous[end]
        return chain[::-1]
