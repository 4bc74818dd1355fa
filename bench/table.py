"""Every performance figure of initorch in one table, each against its goal.

    python bench/table.py [--quick]      (make bench)

Each figure is measured as a ratio against a baseline measured in the same run
(graphlib on the same graph, a plain loop over the same functions, a
hand-written start-up script, ``python -c "import networkx, yaml"``), or as a
time per step against an absolute goal.  Samples are taken round-robin so that
the noise of a shared machine hits a figure and its baseline alike; a row shows
the median and [min-max] over the rounds and whether the median meets the goal.
"""

from __future__ import annotations

import argparse
import gc
import graphlib
import logging
import math
import platform
import statistics
import subprocess
import sys
import tempfile
import threading
import time
import tracemalloc
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from datetime import datetime, timezone
from functools import partial
from pathlib import Path

from cli_plan import rows as cli_plan_rows
from graphs import SHAPES, chain, profile_text, random_dag, setup
from measure import Sink, compile_initorch, timed
from ranks import rank_rows
from teardown import rows as teardown_rows

from initorch import Registry
from initorch.execution.run import Run
from initorch.loading.compose import compose
from initorch.loading.document import read_profile
from initorch.loading.yamlsource import parse_yaml
from initorch.plugin import DiagnosisCatalog, StepContext, step
from initorch.reporting.logs import configure_logging
from initorch.resolution.plan import Plan
from initorch.resolution.resolve import resolve

HERE = Path(__file__).resolve().parent
BIN = Path(sys.executable).parent


@dataclass(frozen=True)
class Row:
    figure: str
    goal: str
    values: list[float]
    limit: float  # the median must be at most this
    unit: str = "x"
    shown: str | None = None  # what to show instead of the numbers (a yes/no figure)

    @property
    def median(self) -> float:
        return statistics.median(self.values)

    def cells(self) -> tuple[str, str, str, str]:
        digits = 2 if self.unit in ("x", "") else 0
        measured = self.shown or (
            f"{self.median:.{digits}f}{self.unit} "
            f"[{min(self.values):.{digits}f}-{max(self.values):.{digits}f}]")
        return self.figure, self.goal, measured, "pass" if self.median <= self.limit else "MISS"


def rounds(runs: int, *samplers: Callable[[], float]) -> list[list[float]]:
    """``runs`` samples of each sampler, taken round-robin."""
    samples: list[list[float]] = [[] for _ in samplers]
    for _ in range(runs):
        for values, sample in zip(samples, samplers, strict=True):
            values.append(sample())
    return samples


def sampler(action: Callable[..., object], *args: object) -> Callable[[], float]:
    """A sampler that times ``action(*args)``."""
    return lambda: timed(partial(action, *args))


def ratios(numerators: list[float], denominators: list[float]) -> list[float]:
    """Round by round: each sample against the baseline's sample of the same round."""
    return [n / d for n, d in zip(numerators, denominators, strict=True)]


# -- the resolver against graphlib ------------------------------------------------------------

def graphlib_order(dependencies: dict[str, tuple[str, ...]]) -> None:
    list(graphlib.TopologicalSorter(dependencies).static_order())


def resolver_rows(runs: int, sizes: tuple[int, int, int], folder: Path) -> list[Row]:
    rows: list[Row] = []
    times: dict[int, list[float]] = {}
    graphlib_times: dict[int, list[float]] = {}
    cases = [("random", size) for size in sizes] + [("chain", sizes[1]), ("fan-out", sizes[1])]
    for shape, size in cases:
        dependencies = SHAPES[shape](size)
        composed, steps = setup(dependencies, folder)
        count = runs if size < sizes[2] else max(2, runs // 3)
        ours, theirs = rounds(count, sampler(resolve, composed, steps),
                              sampler(graphlib_order, dependencies))
        if shape == "random":
            times[size], graphlib_times[size] = ours, theirs
        rows.append(Row(f"resolve / graphlib, {shape} DAG, {size:,} steps", "<= 3x",
                        ratios(ours, theirs), 3.0))
        if shape == "random" and size == sizes[1]:
            rows += memory_rows(dependencies, folder, composed, steps)
    rows += first_resolve_rows(runs, sizes[:2], folder)
    pair = (sizes[1], sizes[2])
    theirs_grow = exponents(statistics.median(graphlib_times[sizes[1]]),
                            graphlib_times[sizes[2]], pair)
    at = next(i for i, row in enumerate(rows) if f"{sizes[2]:,} steps" in row.figure)
    rows.insert(at, Row(f"growth exponent of resolve, {sizes[1]:,} -> {sizes[2]:,} steps "
                       f"(graphlib {statistics.median(theirs_grow):.2f})", "<= 1.15",
                       exponents(statistics.median(times[sizes[1]]), times[sizes[2]], pair),
                       1.15, ""))
    return rows


def first_resolve(dependencies: dict[str, tuple[str, ...]], folder: Path) -> float:
    """One resolve of steps registered just before, untimed: what a CLI run pays once,
    with no step's fingerprint text kept from an earlier plan."""
    composed, steps = setup(dependencies, folder)
    return timed(lambda: resolve(composed, steps))


def first_resolve_rows(runs: int, sizes: tuple[int, int], folder: Path) -> list[Row]:
    """The rows above resolve the same registered steps again (each keeps its
    fingerprint text once planned); these show a first resolve against graphlib."""
    rows = []
    for size in sizes:
        dependencies = random_dag(size)
        ours, theirs = rounds(runs, partial(first_resolve, dependencies, folder),
                              sampler(graphlib_order, dependencies))
        rows.append(Row(f"first resolve of newly registered steps / graphlib, random DAG, "
                        f"{size:,} steps", "<= 3x", ratios(ours, theirs), 3.0))
    return rows


def memory_rows(dependencies: dict[str, tuple[str, ...]], folder: Path,
                composed: object, steps: object) -> list[Row]:
    """Peak memory allocated while resolving (the plan it returns included), per step:
    the steps above once more, and newly registered ones (whose fingerprint text the
    first plan writes and each step then keeps)."""
    fresh = setup(dependencies, folder)
    size = len(dependencies)
    return [Row(f"peak memory of resolve, random DAG, {size:,} steps, {which}",
                "<= 1 KB/step", [peak_per_step(*args, size)], 1024, " B/step")
            for which, args in (("again", (composed, steps)), ("first", fresh))]


def peak_per_step(composed: object, steps: object, size: int) -> float:
    gc.collect()
    tracemalloc.start()
    plan = resolve(composed, steps)  # type: ignore[arg-type]
    peak = tracemalloc.get_traced_memory()[1]
    tracemalloc.stop()
    del plan
    return peak / size


def loading_rows(runs: int, sizes: tuple[int, int], folder: Path) -> list[Row]:
    """A generated profile that gives every step's ``requires`` itself: read (parsed,
    positions kept, checked) against graphlib on the same graph; then composed and
    resolved once at the larger size, to show that it loads."""
    times: dict[int, list[float]] = {}
    rows: list[Row] = []
    for size in sizes:
        dependencies = random_dag(size)
        text = profile_text(dependencies)
        count = runs if size == sizes[0] else max(1, runs // 4)
        ours, theirs = rounds(count, sampler(read_profile, text, "p.yaml", "p"),
                              sampler(graphlib_order, dependencies))
        times[size] = ours
        rows.append(Row(f"read a generated profile with requires lists / graphlib, "
                        f"{size:,} steps", "<= 3x", ratios(ours, theirs), 3.0))
    base = statistics.median(times[sizes[0]])
    rows.append(Row(f"growth exponent of reading it, {sizes[0]:,} -> {sizes[1]:,} steps",
                    "<= 1.15", exponents(base, times[sizes[1]], sizes), 1.15, ""))
    registry = Registry()
    for name in dependencies:
        registry.steps.add(step(name, description="a synthetic step")(_noop))
    path = folder / "requires.yaml"
    path.write_text(text, encoding="utf-8")
    loaded = timed(lambda: resolve(compose(registry.profiles, [str(path)]), registry.steps))
    rows.append(Row(f"a generated {sizes[1]:,}-step profile loads and resolves (seconds)",
                    "loads", [loaded], math.inf, " s"))
    return rows


def exponents(base: float, large: list[float], sizes: tuple[int, int]) -> list[float]:
    """How time grows with size, ``t ~ size ** k``: k for each large sample."""
    return [math.log(t / base) / math.log(sizes[1] / sizes[0]) for t in large]


def alias_bomb_refused() -> bool:
    bomb = "a: &a [x, x, x, x, x, x, x, x, x, x]\n" + "".join(
        f"{chr(98 + i)}: &{chr(98 + i)} [{', '.join([f'*{chr(97 + i)}'] * 10)}]\n"
        for i in range(8))
    try:
        parse_yaml(bomb, "bomb.yaml")
    except Exception as exc:  # the refusal is what is measured
        return "aliases" in str(exc)
    return False


# -- the executors ----------------------------------------------------------------------------

def _noop(ctx: StepContext) -> None:
    return None


def _sleep(ctx: StepContext) -> None:
    time.sleep(0.2)


@contextmanager
def cli_console_logging() -> Iterator[None]:
    """What ``initorch run`` sets up by default: console lines at INFO (to a sink)."""
    logger = logging.getLogger("initorch")
    saved = (list(logger.handlers), logger.level, logger.propagate)
    configure_logging("console", stream=Sink())  # type: ignore[arg-type]
    try:
        yield
    finally:
        logger.handlers[:], logger.propagate = saved[0], saved[2]
        logger.setLevel(saved[1])


def planned(dependencies: dict[str, tuple[str, ...]], folder: Path,
            action: Callable[[StepContext], None] = _noop) -> Plan:
    registry = Registry()
    for name, requires in dependencies.items():
        registry.steps.add(step(name, description="a synthetic step", requires=requires)(action))
    profile = folder / "executors.yaml"
    lines = ["device: {type: cpu}", "steps:"] + [f"  {n}: {{}}" for n in dependencies]
    profile.write_text("\n".join(lines) + "\n", encoding="utf-8")
    return resolve(compose(registry.profiles, [str(profile)]), registry.steps)


def per_step_us(plan: Plan, executor: str = "sequential", teardown: bool = False) -> float:
    run = Run(plan, executor=executor, diagnoses=DiagnosisCatalog())
    report = run.start()
    assert report.ok, report.failed
    began = time.perf_counter()
    run.teardown()
    torn = time.perf_counter() - began
    return (torn if teardown else report.wall_time) / len(plan.steps) * 1e6


def plain_loop_us(plan: Plan) -> float:
    """The baseline: the same step functions called in plan order by a bare loop."""
    actions = [p.step.action for p in plan.steps]
    began = time.perf_counter()
    for action in actions:
        action(None)  # type: ignore[arg-type]
    return (time.perf_counter() - began) / len(actions) * 1e6


def plain_threads() -> None:
    """The baseline of the waits: 200 bare threads that each sleep 0.2 s."""
    threads = [threading.Thread(target=time.sleep, args=(0.2,)) for _ in range(200)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()


def executor_rows(runs: int, sizes: tuple[int, int], folder: Path) -> list[Row]:
    flat = planned({f"s{i:06d}": () for i in range(sizes[1])}, folder)
    with cli_console_logging():
        sequential, loop = rounds(runs, lambda: per_step_us(flat), lambda: plain_loop_us(flat))
    rows = [Row(f"sequential executor, CLI console logging, {sizes[1]:,} steps "
                f"(plain loop {statistics.median(loop):.2f} us)", "< 100 us/step",
                sequential, 100, " us")]
    quiet = logging.getLogger("initorch")
    level = quiet.level
    quiet.setLevel(logging.WARNING)
    try:
        small = planned({f"s{i:06d}": () for i in range(sizes[0])}, folder)
        torn_small, torn_large = rounds(runs, lambda: per_step_us(small, teardown=True),
                                        lambda: per_step_us(flat, teardown=True))
        rows.append(Row(f"teardown, {sizes[1]:,} no-op steps, per step", "O(1): < 100 us",
                        torn_large, 100, " us"))
        # per-step times: a whole teardown takes size * per step
        rows.append(Row(f"growth exponent of a whole teardown, {sizes[0]:,} -> {sizes[1]:,}",
                        "<= 1.15", exponents(statistics.median(torn_small) * sizes[0],
                                             [t * sizes[1] for t in torn_large], sizes),
                        1.15, ""))
        for size in sizes:
            plan = planned(chain(size), folder)
            [values] = rounds(runs, lambda plan=plan: per_step_us(plan, "parallel"))
            rows.append(Row(f"parallel executor, a {size:,}-step chain, per step",
                            "< 100 us/step", values, 100, " us"))
        waits = planned({f"w{i:03d}": () for i in range(200)}, folder, _sleep)
        walls, threads = rounds(max(3, runs // 2),
                                lambda: Run(waits, executor="parallel",
                                           diagnoses=DiagnosisCatalog()).start().wall_time,
                                lambda: timed(plain_threads))
        rows.append(Row("parallel executor, 200 independent 0.2 s waits / the longest "
                        f"(200 bare threads: {statistics.median(threads) / 0.2:.2f}x)",
                        "<= 1.3x", [wall / 0.2 for wall in walls], 1.3))
    finally:
        quiet.setLevel(level)
    return rows


# -- start-up in fresh interpreters -----------------------------------------------------------

def process(command: list[str]) -> Callable[[], float]:
    def sample() -> float:
        return timed(lambda: subprocess.run(command, check=True, stdout=subprocess.DEVNULL,
                                            stderr=subprocess.DEVNULL))

    return sample


def startup_rows(runs: int) -> list[Row]:
    compile_initorch()
    cli = str(BIN / "initorch")
    real = process([cli, "run", "--profile", "cpu", "--set", "checks.verify_transfer=true"])
    by_hand = process([sys.executable, str(HERE / "handwritten_startup.py")])
    dry = process([cli, "plan", "--profile", "npu"])  # the dry run: what would run
    imports = process([sys.executable, "-c", "import networkx, yaml"])
    for sample in (by_hand, dry, imports):
        sample()  # warm the page cache
    ours, theirs = rounds(runs, real, by_hand)
    dry_runs, import_runs = rounds(runs * 2, dry, imports)
    return [Row("real start-up, run --profile cpu (verify_transfer) / careful hand-written "
                "script", "<= 1.00x", ratios(ours, theirs), 1.00),
            Row("dry run, initorch plan --profile npu / python -c 'import networkx, yaml'",
                "<= 1.30x", ratios(dry_runs, import_runs), 1.30)]


# -- the table --------------------------------------------------------------------------------

def print_table(rows: list[Row], elapsed: float) -> None:
    header = ("figure", "goal", "measured: median [min-max]", "")
    cells = [header, *(row.cells() for row in rows)]
    widths = [max(len(line[i]) for line in cells) for i in range(4)]
    stamp = datetime.now(timezone.utc).strftime("%Y-%m-%d %H:%M UTC")
    print(f"initorch bench, {stamp}, {platform.node()} ({platform.machine()}, {_cores()} cores), "
          f"Python {platform.python_version()}, {elapsed:.0f} s")
    for index, line in enumerate(cells):
        padded = (cell.ljust(width) for cell, width in zip(line, widths, strict=True))
        print("| " + " | ".join(padded) + " |")
        if index == 0:
            print("|" + "|".join("-" * (width + 2) for width in widths) + "|")


def _cores() -> int:
    import os

    return len(os.sched_getaffinity(0))


def sglang_rows(runs: int = 3) -> list[Row]:
    """Inside each rank, initorch's own time over the rank's start-up to up (gated);
    verify and drive mode against stock SGLang on the same launch line (reported: two
    launches of one line differ by more than initorch adds); and each phase of verify
    mode's start-up timeline, the launch ``make demo-sglang`` draws, longest first
    (reported: a change that shortens a phase shows here)."""
    from sglang_startup import samples

    found = samples(runs)
    rows = [Row(f"real SGLang server, {mode}: initorch's own time in a rank / the rank's "
                "start-up to up (%)", "<= 1%", [100 * share for share in found.share[mode]],
                1.0, "") for mode in ("verify mode", "drive mode")]
    for point, measured in (("up", found.up), ("ready", found.ready)):
        stock = statistics.median(measured["stock SGLang"])
        rows += [Row(f"real SGLang server, time to {point}, {mode} / stock SGLang",
                     "reported", [value / stock for value in measured[mode]], math.inf)
                 for mode in ("verify mode", "drive mode")]
    phases = found.timeline.get("verify mode", {})
    rows += [Row(f"real SGLang server, verify mode, start-up phase: {phase} (ms)", "reported",
                 [1000 * value for value in values], math.inf, "ms")
             for phase, values in sorted(phases.items(),
                                         key=lambda item: -statistics.median(item[1]))]
    return rows


def vllm_rows(runs: int = 3) -> list[Row]:
    """Inside each process of a real vLLM server (API server, engine core, workers),
    initorch's own time over that process's start-up (gated, the highest of a launch's
    processes); and verify mode's time to ready over stock vLLM's on the same launch line
    (reported, not gated).  None, with one line, without the vLLM venv."""
    from vllm_startup import STOCK, VERIFY, samples, vllm_venv

    if vllm_venv() is None:
        print("vLLM rows skipped: no vLLM venv (.venv-vllm); 'make vllm-venv' builds it "
              "(3.5 GB, about 4 minutes)")
        return []
    found = samples(runs)
    stock = statistics.median(found.ready[STOCK])
    return [Row("real vLLM server, verify mode: initorch's own time in each process / that "
                "process's start-up, the launch's highest (%)", "<= 1%",
                [100 * share for share in found.worst[VERIFY]], 1.0, ""),
            Row("real vLLM server, time to ready, verify mode / stock vLLM", "reported",
                [value / stock for value in found.ready[VERIFY]], math.inf)]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=5, help="rounds per figure (default 5)")
    parser.add_argument("--skip-startup", action="store_true",
                        help="leave out the two start-up rows (fresh interpreters, torch)")
    parser.add_argument("--skip-sglang", action="store_true",
                        help="leave out the real SGLang rows (9 server starts, minutes)")
    parser.add_argument("--skip-vllm", action="store_true",
                        help="leave out the real vLLM rows (6 server starts, minutes)")
    parser.add_argument("--skip-ranks", action="store_true",
                        help="leave out the simulated ranks (8 to 1,024 ranks against a "
                             "TCPStore, about 15 minutes)")
    args = parser.parse_args()
    began = time.perf_counter()
    rows: list[Row] = []
    with tempfile.TemporaryDirectory() as tmp:
        folder = Path(tmp)
        rows += resolver_rows(args.runs, (1_000, 10_000, 100_000), folder)
        rows += loading_rows(args.runs, (10_000, 100_000), folder)
        refused = alias_bomb_refused()
        rows.append(Row("an alias bomb (10**9 values in 9 lines) is refused, naming aliases",
                        "refused", [0.0 if refused else 1.0], 0.0, "",
                        "refused" if refused else "accepted"))
        rows += executor_rows(args.runs, (1_000, 10_000), folder)
    if not args.skip_startup:
        rows += startup_rows(args.runs)
        rows += [Row(*fields) for fields in cli_plan_rows(args.runs)]
        rows += [Row(*fields) for fields in teardown_rows(args.runs)]
    if not args.skip_ranks:
        rows += [Row(*fields) for fields in rank_rows()]
    if not args.skip_sglang:
        rows += sglang_rows()
    if not args.skip_vllm:
        rows += vllm_rows()
    print_table(rows, time.perf_counter() - began)


if __name__ == "__main__":
    main()
