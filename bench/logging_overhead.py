"""Per-step cost of logging in the sequential executor, measured in the same run.

    python bench/logging_overhead.py [--steps N] [--runs N]

One plan of N independent no-op steps, run by the sequential executor:

* ``quiet``    the ``initorch`` logger above INFO (events are filtered out): the
               executor's own cost, the baseline of the ratios;
* ``console``  the CLI's console handler (``configure_logging("console")``);
* ``json``     the CLI's JSON-lines handler;
* ``plain``    a host's ``logging.basicConfig(format="%(message)s")``-style handler.

Output goes to a sink that discards it, so the figures are formatting, not the
terminal.  Each line prints microseconds per step (median [min-max] over the runs)
and the ratio of medians against ``quiet``.
"""

from __future__ import annotations

import argparse
import logging
import tempfile
from collections.abc import Callable
from contextlib import contextmanager
from functools import partial
from pathlib import Path
from typing import Any

from measure import Sink, interleaved, print_ratios

from initorch import Registry
from initorch.execution.run import Run
from initorch.loading.compose import compose
from initorch.plugin import DiagnosisCatalog, StepContext, step
from initorch.reporting.logs import configure_logging
from initorch.resolution.plan import Plan
from initorch.resolution.resolve import resolve


def noop(ctx: StepContext) -> None:
    pass


def independent_steps(count: int, folder: Path) -> Plan:
    registry = Registry()
    names = [f"s{i:05d}" for i in range(count)]
    for name in names:
        registry.steps.add(step(name, description="does nothing")(noop))
    profile = folder / "flat.yaml"
    lines = ["device: {type: cpu}", "steps:"] + [f"  {name}: {{}}" for name in names]
    profile.write_text("\n".join(lines) + "\n", encoding="utf-8")
    return resolve(compose(registry.profiles, [str(profile)]), registry.steps)


@contextmanager
def initorch_logger(handler: logging.Handler | None, level: int) -> Any:
    logger = logging.getLogger("initorch")
    saved = (list(logger.handlers), logger.level, logger.propagate)
    logger.handlers[:] = [handler] if handler is not None else []
    logger.setLevel(level)
    logger.propagate = False
    try:
        yield
    finally:
        logger.handlers[:], logger.propagate = saved[0], saved[2]
        logger.setLevel(saved[1])


def cli_handler(fmt: str) -> Callable[[], logging.Handler]:
    def make() -> logging.Handler:
        logger = logging.getLogger("initorch")
        handler = configure_logging(fmt, stream=Sink())  # type: ignore[arg-type]
        logger.removeHandler(handler)
        return handler

    return make


def plain_handler() -> logging.Handler:
    handler = logging.StreamHandler(Sink())  # type: ignore[arg-type]
    handler.setFormatter(logging.Formatter("%(message)s"))
    return handler


SETUPS: dict[str, tuple[Callable[[], logging.Handler | None], int]] = {
    "quiet": (lambda: None, logging.WARNING),
    "console": (cli_handler("console"), logging.INFO),
    "json": (cli_handler("json"), logging.INFO),
    "plain": (plain_handler, logging.INFO),
}


def per_step_us(plan: Plan, make: Callable[[], logging.Handler | None], level: int) -> float:
    with initorch_logger(make(), level):
        report = Run(plan, diagnoses=DiagnosisCatalog()).start()
    assert report.ok
    return report.wall_time / len(plan.steps) * 1e6


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--steps", type=int, default=2000)
    parser.add_argument("--runs", type=int, default=7)
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        plan = independent_steps(args.steps, Path(tmp))
    samples = interleaved({name: partial(per_step_us, plan, make, level)
                           for name, (make, level) in SETUPS.items()}, args.runs)
    print(f"sequential executor, {args.steps} no-op steps, {args.runs} runs "
          "(per step: median [min-max]; ratio of medians against quiet)")
    print_ratios(samples, "quiet", "us")

if __name__ == "__main__":
    main()
