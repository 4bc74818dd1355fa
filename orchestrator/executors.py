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
from concurrent.futures import FIRST_COMPLETED, Future, ThreadPoolExecutor, wait
from typing import Protocol

from orchestrator.plan import Plan, PlannedStep


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
    """Each step as soon as everything ordered before it is done, on ``workers`` threads."""

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
        pool = ThreadPoolExecutor(max_workers=self.workers, thread_name_prefix="initorch-worker")
        running: dict[Future[None], str] = {}
        try:
            while sorter.is_active():
                for name in sorted(sorter.get_ready()):
                    planned = plan.step(name)
                    root = driver.blocked_by(planned)
                    if root is None:
                        running[pool.submit(driver.run_step, planned)] = name
                    else:
                        driver.skip(planned, root)
                        sorter.done(name)
                if not running:
                    continue
                finished, _ = wait(running, return_when=FIRST_COMPLETED)
                for future in finished:
                    future.result()  # run_step records failures; anything else is a bug
                    sorter.done(running.pop(future))
        finally:
            # On an interrupt, do not wait for steps still running: the run tears
            # down whatever they produce when they finish.
            pool.shutdown(wait=not running, cancel_futures=True)


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
