"""How a run watches its steps beyond their own timeouts: its clock, its watchdog,
and what its step invoker asks of it.

The invoker (:mod:`initorch.execution.invoke`) asks, as each step starts, which
watchdog guards it and what ends the wait for it should a peer break off, and
hands over the output of a step it stopped waiting for that finished after all.
:class:`RunSupervisor` answers for a run from the helpers that own each answer
(the watchdog is its own; the job's membership and the teardown stack are the
run's), so that the invoker never reaches into the run itself.
"""

from __future__ import annotations

import threading
from collections.abc import Callable, Mapping
from typing import Any

from initorch.execution.invoke import GiveUp
from initorch.execution.membership import JobMembership
from initorch.execution.teardown_stack import TeardownStack
from initorch.execution.watchdog import Watchdog, start_watchdog, stop_watchdog
from initorch.resolution.plan import PlannedStep


class Stopwatch:
    """A run's time since it started (``0.0`` before), on the run's clock."""

    __slots__ = ("_clock", "_zero")

    def __init__(self, clock: Callable[[], float]) -> None:
        self._clock = clock
        self._zero: float | None = None

    def start(self) -> None:
        self._zero = self._clock()

    @property
    def started(self) -> bool:
        return self._zero is not None

    def elapsed(self) -> float:
        return 0.0 if self._zero is None else self._clock() - self._zero


class RunSupervisor:
    """One run's answers to its invoker (:class:`~initorch.execution.invoke.Supervisor`),
    and the run's watchdog; thread-safe.

    The watchdog ends the process should a step hang holding the GIL, where no thread
    can act on its timeout: it is started for the first step with a timeout, or by
    the run's signal guard (:meth:`watchdog`), and ``labels`` name the run in what it
    says.  :meth:`stop` ends it, once the run is torn down.
    """

    def __init__(self, labels: Mapping[str, Any], membership: JobMembership,
                 teardowns: TeardownStack) -> None:
        self._labels = dict(labels)
        self._membership = membership
        self._teardowns = teardowns
        self._lock = threading.Lock()
        self._watchdog: Watchdog | None = None

    def watchdog(self) -> Watchdog:
        """The run's watchdog, started now if it is not running yet."""
        with self._lock:
            if self._watchdog is None:
                self._watchdog = start_watchdog(self._labels)
            return self._watchdog

    def watchdog_for(self, planned: PlannedStep) -> Watchdog | None:
        """The run's watchdog, if any, started for the first step with a timeout: its
        deadline must hold even if the step holds the GIL."""
        if planned.step.timeout is not None:
            return self.watchdog()
        return self._watchdog

    def give_up_for(self, planned: PlannedStep) -> GiveUp | None:
        return self._membership.give_up_for(planned)

    def finished_late(self, planned: PlannedStep, output: Any) -> None:
        self._teardowns.undo_late(planned, output)

    def stop(self, *, keep_wakeup_fd: bool) -> None:
        """End the watchdog, if one was started (``keep_wakeup_fd``: the signal guard
        still uses the wake-up fd it shares with it)."""
        with self._lock:
            watchdog, self._watchdog = self._watchdog, None
        if watchdog is not None:
            stop_watchdog(watchdog, keep_wakeup_fd=keep_wakeup_fd)
