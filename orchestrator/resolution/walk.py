"""One walk of a plan's graph: which steps may start now, shaped like graphlib.

:class:`PlanWalk` is the state machine of :class:`graphlib.TopologicalSorter`
over a :class:`~initorch.resolution.plangraph.PlanGraph`: :meth:`~PlanWalk.get_ready`
hands out the steps whose predecessors are all done, :meth:`~PlanWalk.done` marks
steps finished, and :meth:`~PlanWalk.is_active` says whether any step is not done
yet.  Every executor walks a plan with it -- the sequential one a step at a time,
the parallel one from many threads under its lock -- so the rule "a step starts
only after every step ordered before it is done" is written once.

Which steps a failure keeps from running is not the walk's to decide but the
run's (``RunDriver.blocked_by``, in the execution layer): failing fast
stops steps that do not descend from the failure at all, and ``keep_going`` still
runs a step that only ``wants`` the failed one or is only ordered after it.  So a
step the run skips is done like a step that ran: its dependents come up in turn and
the run decides about each, and a skip cascades exactly as far as the run's rule
carries it.
"""

from __future__ import annotations

from initorch.resolution.plangraph import PlanGraph


class PlanWalk:
    """A single-use walk of ``graph``; not thread-safe (a parallel executor holds a lock).

    Like :class:`graphlib.TopologicalSorter`: every step handed out by
    :meth:`get_ready` must be marked :meth:`done` before the steps that follow it
    are handed out, and the walk is over when :meth:`is_active` is false.  A plan's
    graph has no cycle, so every step is handed out exactly once.
    """

    __slots__ = ("_graph", "_handed_out", "_left", "_ready", "_waiting")

    def __init__(self, graph: PlanGraph) -> None:
        self._graph = graph
        self._waiting = {name: len(graph.predecessors(name)) for name in graph.nodes}
        self._ready = [name for name, count in self._waiting.items() if not count]
        self._handed_out: set[str] = set()
        self._left = len(self._waiting)

    def get_ready(self) -> tuple[str, ...]:
        """Every step that may start now and was not handed out before: at first in the
        graph's order, then in the order they became ready (the successors of each
        step marked done, by name).  Empty when none is ready."""
        ready, self._ready = tuple(self._ready), []
        self._handed_out.update(ready)
        return ready

    def done(self, *names: str) -> None:
        """``names``, handed out by :meth:`get_ready`, are finished (they ran, failed or
        were skipped): a step that waited only for them becomes ready.

        Raises :class:`ValueError` for a step not handed out, or already done."""
        for name in names:
            if name not in self._handed_out:
                raise ValueError(f"step '{name}' was not handed out by get_ready(), "
                                 "or is done already")
            self._handed_out.remove(name)
            self._left -= 1
            for successor in self._graph.successors(name):
                left = self._waiting[successor] - 1
                self._waiting[successor] = left
                if not left:
                    self._ready.append(successor)

    def is_active(self) -> bool:
        """Whether some step is not done yet: ready, handed out, or still waiting."""
        return self._left > 0
