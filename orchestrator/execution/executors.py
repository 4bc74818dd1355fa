"""Executors decide *when and where* steps run; the run decides *what happens*.

An executor walks a plan through the small :class:`RunDriver` interface, so
scheduling is separate from state, logging and teardown (the same split as
Terraform's graph walker).  Every executor takes its steps from one
:class:`~initorch.resolution.walk.PlanWalk`; what differs is on top of it:

``sequential``  one step at a time, in plan order, on the calling thread: the
                default, and what a server embeds.
``parallel``    every ready step at once, on a thread each (up to a cap), steps
                that hold the GIL one at a time: independent steps overlap, so
                wall time approaches the critical path.
``dry-run``     walks the plan exactly as ``sequential`` would and reports
                what would run, without running anything.

A run's teardown is scheduled here too (:func:`tear_down`): ``side-by-side``
(the default) undoes a step once every step ordered after it is undone, each
independent one on a thread of its own, as systemd stops units; ``sequential``
undoes them one at a time in reverse completion order, on the calling thread.
"""

from __future__ import annotations

import heapq
import queue
import threading
from collections.abc import Callable, Iterator, Sequence
from typing import Protocol

from initorch.execution.executor_names import DEFAULT_MAX_WORKERS, EXECUTORS
from initorch.execution.signals import POLL_S
from initorch.resolution.plan import Plan, PlannedStep
from initorch.resolution.plangraph import Edge, PlanGraph
from initorch.resolution.walk import PlanWalk

TEARDOWN_MODES = ("side-by-side", "sequential")
"""How a run's teardown is scheduled, as ``Run(teardown=...)`` and ``--teardown`` take
it; the first is the default."""


class RunDriver(Protocol):
    """What an executor may do with a run (a :class:`~initorch.Run` is one).

    A launcher that brings its own executor calls these and nothing else: ask
    :meth:`blocked_by` before starting a step, :meth:`skip` what it names, and
    :meth:`run_step` the rest, each once, after everything ordered before it.  The
    run keeps every outcome, the teardown and the fail-fast rule.
    """

    @property
    def plan(self) -> Plan: ...

    def blocked_by(self, planned: PlannedStep) -> str | None:
        """The failed step that keeps ``planned`` from starting, if any: one it
        hard-depends on (the root cause), or, as the run fails fast, the first step
        that failed at all."""

    def skip(self, planned: PlannedStep, root_cause: str) -> None:
        """Record ``planned`` as skipped because ``root_cause`` failed."""

    def run_step(self, planned: PlannedStep) -> None:
        """Run ``planned`` on the calling thread and record its outcome (a step that a
        failure elsewhere has blocked meanwhile is skipped instead)."""

    def would_run(self, planned: PlannedStep) -> None:
        """Record that ``planned`` would run (dry run)."""


class Executor(Protocol):
    """Decides when and on which thread each step of a run's plan runs: pass one as
    ``Run(plan, executor=...)``.  ``name`` shows in the report and the run table."""

    name: str

    def execute(self, driver: RunDriver) -> None: ...


def _in_plan_order(plan: Plan) -> Iterator[PlannedStep]:
    """The plan's steps one at a time, each handed out by the walk once the one before
    it is settled (the caller has run or skipped it), the earliest ready in plan order
    first.  The plan's order is a topological order, so this is exactly that order."""
    walk = PlanWalk(plan.graph)
    position = {name: index for index, name in enumerate(plan.order)}
    ready: list[int] = []  # a heap of plan positions
    while walk.is_active():
        for name in walk.get_ready():
            heapq.heappush(ready, position[name])
        planned = plan.steps[heapq.heappop(ready)]
        yield planned
        walk.done(planned.name)


class SequentialExecutor:
    """Steps in plan order on the calling thread."""

    name = "sequential"

    def execute(self, driver: RunDriver) -> None:
        for planned in _in_plan_order(driver.plan):
            root = driver.blocked_by(planned)
            if root is None:
                driver.run_step(planned)
            else:
                driver.skip(planned, root)


class DryRunExecutor:
    """The sequential walk, recording what would run instead of running it."""

    name = "dry-run"

    def execute(self, driver: RunDriver) -> None:
        for planned in _in_plan_order(driver.plan):
            driver.would_run(planned)


class ParallelExecutor:
    """Each step as soon as everything ordered before it is done, on as many threads
    as steps are ready (at most ``workers``, default :data:`DEFAULT_MAX_WORKERS`).

    Threads are started only when no idle one is left, and a thread that finishes
    a step takes the next ready one itself: a chain of steps runs on one thread
    with no hand-over between steps.  Steps that declare ``holds_gil`` (they compute
    in Python rather than wait) run one at a time: two of them would only take
    turns on the GIL and both finish late, holding back what depends on the first.

    The workers are daemon threads, not a ``ThreadPoolExecutor``: Python waits
    for a pool's threads at exit, so one hung step would keep an interrupted
    server from ever exiting.
    """

    name = "parallel"

    def __init__(self, workers: int | None = None) -> None:
        if workers is not None and workers < 1:
            raise ValueError(f"workers must be >= 1, got {workers}")
        self.workers = workers

    def execute(self, driver: RunDriver) -> None:
        _Workers(driver, self.workers or DEFAULT_MAX_WORKERS).run()


class _Workers:
    """The threads of one parallel run of a plan, on top of its walk: the ready steps
    in name order, the GIL policy, and the first bug or interrupt a worker met (raised
    on the calling thread).

    Whichever thread finishes a step marks it done in the walk (under ``_lock``),
    keeps one ready step for itself and hands the others to idle workers or new
    ones; the calling thread only waits for the end.
    """

    def __init__(self, driver: RunDriver, cap: int) -> None:
        self._driver, self._plan, self._cap = driver, driver.plan, cap
        self._walk = PlanWalk(driver.plan.graph)
        self._ready: list[str] = []  # a heap: ready steps start in name order
        self._gil_ready: list[str] = []  # ready, but holding the GIL while another does
        self._gil_busy = False
        self._lock = threading.Lock()
        self._idle: list[queue.SimpleQueue[PlannedStep | None]] = []
        self._threads = 0
        self._closed = False
        self._bug: BaseException | None = None
        self._over = threading.Event()

    def run(self) -> None:
        if not self._walk.is_active():  # every step was skipped at plan time
            return
        try:
            with self._lock:
                self._release()
                self._dispatch(keep=False)
            # Waits in slices of POLL_S: a signal that lands just before a blocking wait
            # starts does not wake it, and the run must still act on it (the handler
            # runs between slices).
            while not self._over.wait(POLL_S):
                pass
            if self._bug is not None:
                raise self._bug
        finally:
            # Idle workers exit; busy ones finish their step (the run tears down what
            # it produces) and take nothing new, or, if hung, die with the interpreter.
            with self._lock:
                self._closed = True
                idle, self._idle = self._idle, []
            for inbox in idle:
                inbox.put(None)

    def _work(self, first: PlannedStep) -> None:
        inbox: queue.SimpleQueue[PlannedStep | None] = queue.SimpleQueue()
        task: PlannedStep | None = first
        while task is not None:
            try:
                self._driver.run_step(task)
            except BaseException as bug:  # run_step records failures: a bug or an interrupt
                with self._lock:
                    self._bug = self._bug or bug
                    self._closed = True
                self._over.set()
                return
            with self._lock:
                task = self._finished(task)
                if task is None:
                    if self._closed:
                        return
                    self._idle.append(inbox)
            if task is None:
                task = inbox.get()

    def _finished(self, planned: PlannedStep) -> PlannedStep | None:
        """``planned`` is done: release what waited for it; the next step for this
        thread, if any (under the lock)."""
        if planned.step.holds_gil:
            self._gil_busy = False
            for name in self._gil_ready:
                heapq.heappush(self._ready, name)
            self._gil_ready.clear()
        self._walk.done(planned.name)
        self._release()
        return self._dispatch(keep=not self._closed)

    def _release(self) -> None:
        """Take what the walk has ready: to run, or skipped (and so done) when the run
        says a failure blocks it; skips cascade, breadth first.  The end of the walk
        ends the run."""
        ready = self._walk.get_ready()
        while ready:
            for name in ready:
                planned = self._plan.step(name)
                root = self._driver.blocked_by(planned)
                if root is None:
                    heapq.heappush(self._ready, name)
                    continue
                self._driver.skip(planned, root)
                self._walk.done(name)
            ready = self._walk.get_ready()
        if not self._walk.is_active():
            self._over.set()

    def _dispatch(self, *, keep: bool) -> PlannedStep | None:
        """Hand ready steps to idle workers or new ones (within the cap); with ``keep``,
        the first one is returned for the calling worker instead."""
        kept: PlannedStep | None = None
        while self._ready and not self._closed:
            planned = self._plan.step(heapq.heappop(self._ready))
            if planned.step.holds_gil:
                if self._gil_busy:
                    heapq.heappush(self._gil_ready, planned.name)
                    continue
                self._gil_busy = True
            if keep and kept is None:
                kept = planned
            elif self._idle:
                self._idle.pop().put(planned)
            elif self._threads < self._cap:
                self._threads += 1
                threading.Thread(target=self._work, args=(planned,), daemon=True,
                                 name=f"initorch-worker-{self._threads}").start()
            else:
                heapq.heappush(self._ready, planned.name)
                if planned.step.holds_gil:
                    self._gil_busy = False
                break
        return kept


def make_executor(name: str, workers: int | None = None) -> Executor:
    """An executor by CLI name."""
    if name == "sequential":
        return SequentialExecutor()
    if name == "parallel":
        return ParallelExecutor(workers)
    if name == "dry-run":
        return DryRunExecutor()
    raise ValueError(f"unknown executor '{name}'; choose one of {', '.join(EXECUTORS)}")


def tear_down(mode: str, graph: PlanGraph, completed: Sequence[str],
              undo: Callable[[str], None], workers: int = DEFAULT_MAX_WORKERS) -> None:
    """Undo the ``completed`` steps (in completion order) of a plan with ``graph``:
    ``undo(name)`` once for each, scheduled by ``mode`` (one of :data:`TEARDOWN_MODES`).

    ``undo`` records a failing teardown itself; what it raises all the same stops the
    teardown: no new ``undo`` starts, those under way finish, and the error is raised
    here (the run keeps what is left for its next teardown)."""
    if mode == "sequential":
        for name in reversed(completed):
            undo(name)
    elif mode == "side-by-side":
        _SideBySide(graph, completed, undo, workers).run()
    else:
        raise ValueError(f"unknown teardown '{mode}'; choose one of "
                         f"{', '.join(TEARDOWN_MODES)}")


def reversed_graph(graph: PlanGraph) -> PlanGraph:
    """``graph`` with every edge turned round: a walk of it hands out a step once every
    step ordered after it is done.  A step that reads another's output is ordered after
    it by a chain of edges (the resolver checks it), so readers are covered too."""
    turned = (Edge(edge.target, edge.source, edge.kind, edge.declared_at, edge.declared_by,
                   edge.reason)
              for name in graph.nodes for edge in graph.edges_into(name))
    return PlanGraph(reversed(graph.nodes), turned)


class _SideBySide:
    """One side-by-side teardown: a walk of the reversed plan graph, where a step that
    did not complete (or has been undone already) is done at once, and every other one
    is undone by the calling thread or by a daemon thread started for it.

    The calling thread takes part: a chain is undone on it alone, as the sequential
    teardown would, and if no thread can be started (a teardown at interpreter exit)
    it undoes everything itself.  Ready steps are taken latest completed first.
    """

    def __init__(self, graph: PlanGraph, completed: Sequence[str],
                 undo: Callable[[str], None], cap: int) -> None:
        self._rank = {name: index for index, name in enumerate(completed)}
        self._walk = PlanWalk(reversed_graph(graph))
        self._undo, self._cap = undo, cap
        self._ready: list[tuple[int, str]] = []  # a heap: latest completed first
        self._running = self._threads = self._threads_busy = 0  # undoing / started / both
        self._stopped: BaseException | None = None
        self._changed = threading.Condition()

    def run(self) -> None:
        with self._changed:
            self._release()
        try:
            self._work(caller=True)
        except BaseException as stop:
            with self._changed:  # the threads take nothing new
                self._stopped = self._stopped or stop
        with self._changed:  # the threads' last teardowns end before this one does
            while self._running:
                self._changed.wait(POLL_S)  # in slices: signal handlers run
        if self._stopped is not None:
            raise self._stopped

    def _release(self) -> None:
        """Take what the walk has ready (under the lock): steps to undo onto the heap,
        the others done at once."""
        ready = self._walk.get_ready()
        while ready:
            for name in ready:
                if name in self._rank:
                    heapq.heappush(self._ready, (-self._rank[name], name))
                else:
                    self._walk.done(name)
            ready = self._walk.get_ready()

    def _work(self, *, caller: bool) -> None:
        """Undo ready steps until none is left for this thread: a started thread ends
        when nothing is ready, the calling thread when the walk is over; both once a
        teardown raised."""
        while True:
            with self._changed:
                while not self._ready and caller and self._stopped is None \
                        and self._walk.is_active():
                    self._changed.wait(POLL_S)  # in slices: signal handlers run
                if not self._ready or self._stopped is not None:
                    return
                name = heapq.heappop(self._ready)[1]
                self._running += 1
                self._threads_busy += 0 if caller else 1
                self._start_threads()
            try:
                self._undo(name)
            except BaseException as stop:  # undo records failures: this one stops the rest
                with self._changed:
                    self._stopped = self._stopped or stop
                    self._running -= 1
                    self._threads_busy -= 0 if caller else 1
                    self._changed.notify_all()
                return
            with self._changed:
                self._running -= 1
                self._threads_busy -= 0 if caller else 1
                self._walk.done(name)
                self._release()
                self._changed.notify_all()

    def _thread(self) -> None:
        try:
            self._work(caller=False)
        finally:
            with self._changed:
                self._threads -= 1

    def _start_threads(self) -> None:
        """A thread for each ready step that no free thread will take, within the cap
        (under the lock); none where the interpreter refuses new threads."""
        while self._threads < self._cap and \
                self._threads - self._threads_busy < len(self._ready):
            thread = threading.Thread(target=self._thread, daemon=True,
                                      name=f"initorch-teardown-{self._threads + 1}")
            try:
                thread.start()
            except RuntimeError:  # "can't create new thread at interpreter shutdown"
                return
            self._threads += 1
