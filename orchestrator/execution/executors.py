"""Executors decide *when and where* steps run; the run decides *what happens*.

An executor walks a plan through the small :class:`RunDriver` interface, so
scheduling is separate from state, logging and teardown (the same split as
Terraform's graph walker).  Three executors:

``sequential``  plan order on the calling thread: the default, and what a
                server embeds.
``parallel``    ready-set scheduling over the graph (``graphlib``'s
                prepare/get_ready/done) on a bounded thread pool: independent
                steps overlap, so wall time approaches the critical path.
``dry-run``     walks the plan exactly as ``sequential`` would and reports
                what would run, without running anything.
"""

from __future__ import annotations

import graphlib
import queue
import threading
from typing import Protocol

from initorch.execution.signals import POLL_S
from initorch.resolution.plan import Plan, PlannedStep


class RunDriver(Protocol):
    """What an executor may do with a run."""

    @property
    def plan(self) -> Plan: ...

    def blocked_by(self, planned: PlannedStep) -> str | None:
        """The failed step that hard-blocks ``planned`` (root cause), if any."""

    def skip(self, planned: PlannedStep, root_cause: str) -> None:
        """Record ``planned`` as skipped because ``root_cause`` failed."""

    def run_step(self, planned: PlannedStep) -> None:
        """Run ``planned`` on the calling thread and record its outcome."""

    def would_run(self, planned: PlannedStep) -> None:
        """Record that ``planned`` would run (dry run)."""


class Executor(Protocol):
    name: str

    def execute(self, driver: RunDriver) -> None: ...


class SequentialExecutor:
    """Steps in plan order on the calling thread."""

    name = "sequential"

    def execute(self, driver: RunDriver) -> None:
        for planned in driver.plan.steps:
            root = driver.blocked_by(planned)
            if root is None:
                driver.run_step(planned)
            else:
                driver.skip(planned, root)


class DryRunExecutor:
    """The sequential walk, recording what would run instead of running it."""

    name = "dry-run"

    def execute(self, driver: RunDriver) -> None:
        for planned in driver.plan.steps:
            driver.would_run(planned)


class ParallelExecutor:
    """Each step as soon as everything ordered before it is done, on ``workers`` threads.

    The workers are daemon threads, not a ``ThreadPoolExecutor``: Python waits
    for a pool's threads at exit, so one hung step would keep an interrupted
    server from ever exiting.
    """

    name = "parallel"

    def __init__(self, workers: int = 4) -> None:
        if workers < 1:
            raise ValueError(f"workers must be >= 1, got {workers}")
        self.workers = workers

    def execute(self, driver: RunDriver) -> None:
        plan = driver.plan
        sorter: graphlib.TopologicalSorter[str] = graphlib.TopologicalSorter(
            {name: plan.graph.predecessors(name) for name in plan.order})
        sorter.prepare()
        tasks: queue.SimpleQueue[PlannedStep | None] = queue.SimpleQueue()
        finished: queue.SimpleQueue[tuple[str, BaseException | None]] = queue.SimpleQueue()

        def work() -> None:
            while (planned := tasks.get()) is not None:
                try:
                    driver.run_step(planned)
                except BaseException as exc:  # run_step records failures; this is a bug
                    finished.put((planned.name, exc))
                else:
                    finished.put((planned.name, None))

        workers = [threading.Thread(target=work, name=f"initorch-worker-{i}", daemon=True)
                   for i in range(min(self.workers, len(plan.steps)))]
        for worker in workers:
            worker.start()
        running = 0
        try:
            while sorter.is_active():
                for name in sorted(sorter.get_ready()):
                    planned = plan.step(name)
                    root = driver.blocked_by(planned)
                    if root is None:
                        tasks.put(planned)
                        running += 1
                    else:
                        driver.skip(planned, root)
                        sorter.done(name)
                if not running:
                    continue
                name, error = _next_finished(finished)
                running -= 1
                if error is not None:
                    raise error
                sorter.done(name)
        finally:
            # Idle workers exit; busy ones finish their step (the run tears down what
            # it produces) or, if hung, die with the interpreter.
            for _ in workers:
                tasks.put(None)


def _next_finished(finished: queue.SimpleQueue[tuple[str, BaseException | None]]
                   ) -> tuple[str, BaseException | None]:
    """The next step a worker finished.  The main thread waits in slices of
    ``POLL_S``: a signal that lands just before a blocking wait starts does not
    wake it, and the run must still act on it (the handler runs between slices)."""
    while True:
        try:
            return finished.get(timeout=POLL_S)
        except queue.Empty:
            continue


EXECUTORS = ("sequential", "parallel", "dry-run")


def make_executor(name: str, workers: int = 4) -> Executor:
    """An executor by CLI name."""
    if name == "sequential":
        return SequentialExecutor()
    if name == "parallel":
        return ParallelExecutor(workers)
    if name == "dry-run":
        return DryRunExecutor()
    raise ValueError(f"unknown executor '{name}'; choose one of {', '.join(EXECUTORS)}")
