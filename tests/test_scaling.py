"""The regression guard of the resolver's speed: a short scaling benchmark.

``make bench`` measures the goals (within 3x of graphlib, growth exponent 1.15);
this guard fails only well past them, on a growth exponent above 1.3 or a ratio
above 6x, so that a noisy shared machine does not fail it: each figure is the
best of several rounds, taken round-robin with its baseline, on small graphs,
and a failing measurement is taken again (up to three times) before the guard fails.
These are ratios of times measured in the same run, never a wall-clock bound.

The growth exponent is measured against graphlib's: graphlib's sort is linear,
yet on this 2-core VM it measures 1.3 to 1.9 from 1k to 32k steps (caches and
allocation, not its algorithm), so the guard takes ``1 +`` the exponent of the
ratio resolve / graphlib, i.e. the growth that resolve adds to a linear sort.
"""

from __future__ import annotations

import graphlib
import importlib.util
import math
import time
from collections.abc import Callable
from types import ModuleType

import pytest

from initorch.resolution.resolve import resolve
from tests.conftest import REPO
from tests.helpers_run import DIAGNOSES

ROUNDS = 5
ATTEMPTS = 3  # a real regression fails every attempt; a burst of load fails one
SMALL, LARGE = 2_000, 16_000


def _graphs() -> ModuleType:
    """bench/graphs.py, the benchmark's own graph shapes (bench/ is not a package)."""
    spec = importlib.util.spec_from_file_location("bench_graphs", REPO / "bench" / "graphs.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def best_times(rounds: int, *actions: Callable[[], object]) -> list[float]:
    """The fastest of ``rounds`` runs of each action, taken round-robin."""
    best = [math.inf] * len(actions)
    for _ in range(rounds):
        for index, action in enumerate(actions):
            began = time.perf_counter()
            action()
            best[index] = min(best[index], time.perf_counter() - began)
    return best


@pytest.fixture(scope="module")
def graphs() -> ModuleType:
    return _graphs()


def test_resolve_grows_about_linearly_and_stays_near_graphlib(graphs, tmp_path):
    small_dag, large_dag = graphs.random_dag(SMALL), graphs.random_dag(LARGE)

    def graphlib_order(dag: dict[str, tuple[str, ...]]) -> Callable[[], object]:
        return lambda: list(graphlib.TopologicalSorter(dag).static_order())

    (tmp_path / "small").mkdir()
    (tmp_path / "large").mkdir()
    small = graphs.setup(small_dag, tmp_path / "small")
    large = graphs.setup(large_dag, tmp_path / "large")
    assert len(resolve(*large).steps) == LARGE

    for _ in range(ATTEMPTS):
        small_s, large_s, small_base, large_base = best_times(
            ROUNDS, lambda: resolve(*small), lambda: resolve(*large),
            graphlib_order(small_dag), graphlib_order(large_dag))
        ratio = large_s / large_base
        exponent = 1 + math.log(ratio / (small_s / small_base)) / math.log(LARGE / SMALL)
        if exponent <= 1.3 and ratio <= 6:
            break
    assert exponent <= 1.3, (f"resolve grows as size**{exponent:.2f} against a linear sort "
                             f"({SMALL} -> {LARGE} steps)")
    assert ratio <= 6, f"resolve takes {ratio:.1f}x graphlib's time on {LARGE} steps"


def test_the_executors_spend_the_same_time_per_step_on_larger_plans(graphs, tmp_path):
    # A per-step scan of the plan (Plan.order, a linear Plan.step) makes a run
    # quadratic; a run of no-op steps must grow like the number of steps.
    import logging

    from initorch.execution.run import Run

    (tmp_path / "small").mkdir()
    (tmp_path / "large").mkdir()
    plans = [resolve(*graphs.setup(graphs.chain(size), tmp_path / folder))
             for size, folder in ((SMALL, "small"), (LARGE, "large"))]

    def walk(plan, executor: str) -> Callable[[], object]:
        def run() -> None:
            started = Run(plan, executor=executor, diagnoses=DIAGNOSES)
            assert started.start().ok
            started.teardown()
        return run

    logger = logging.getLogger("initorch")
    level = logger.level
    logger.setLevel(logging.WARNING)  # the executors' own cost, not the handlers'
    try:
        for executor in ("sequential", "parallel"):
            for _ in range(ATTEMPTS):
                small_s, large_s = best_times(3, walk(plans[0], executor),
                                              walk(plans[1], executor))
                exponent = math.log(large_s / small_s) / math.log(LARGE / SMALL)
                if exponent <= 1.3:
                    break
            assert exponent <= 1.3, (f"a {executor} run grows as size**{exponent:.2f} "
                                     f"({SMALL} -> {LARGE} steps)")
    finally:
        logger.setLevel(level)
