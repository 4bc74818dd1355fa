"""Parallel against sequential execution, measured in the same run.

    python bench/executors.py [--runs N]

1. A synthetic plan shaped like the real start-up, whose steps wait the way
   start-up steps do (on other ranks, on I/O, on native calls that release the
   GIL).  The ideal is the critical path; the script prints how close each
   executor gets.
2. The real ``cpu`` profile (torch, gloo, Mooncake) in fresh interpreters.
"""

from __future__ import annotations

import argparse
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path

from initorch import Registry
from initorch.execution.run import Run
from initorch.loading.compose import compose
from initorch.plugin import DiagnosisCatalog, StepContext, step
from initorch.resolution.plan import Plan
from initorch.resolution.resolve import resolve

# name: (seconds it waits, what it requires) — the built-in plan's shape.
SHAPE: dict[str, tuple[float, tuple[str, ...]]] = {
    "import_backend": (0.20, ()),
    "set_device": (0.02, ("import_backend",)),
    "alloc_host_mem_pool": (0.30, ("set_device",)),
    "init_shared_mooncake_transfer_engine": (0.15, ("set_device",)),
    "init_torch_distributed": (0.35, ("set_device",)),
    "register_mem_pool_host": (0.05, ("alloc_host_mem_pool",
                                      "init_shared_mooncake_transfer_engine")),
    "verify_transfer": (0.05, ("register_mem_pool_host", "init_torch_distributed")),
}


def waiting(seconds: float) -> Callable[[StepContext], None]:
    def action(ctx: StepContext) -> None:
        time.sleep(seconds)

    return action


def synthetic_plan(folder: Path) -> Plan:
    registry = Registry()
    for name, (seconds, requires) in SHAPE.items():
        registry.steps.add(step(name, description=f"waits {seconds}s",
                                requires=requires)(waiting(seconds)))
    profile = folder / "shape.yaml"
    lines = ["device: {type: cpu}", "steps:"] + [f"  {name}: {{}}" for name in SHAPE]
    profile.write_text("\n".join(lines) + "\n", encoding="utf-8")
    return resolve(compose(registry.profiles, [str(profile)]), registry.steps)


def critical_path(plan: Plan) -> float:
    weights = {name: seconds for name, (seconds, _) in SHAPE.items()}
    return sum(weights[name] for name in plan.graph.longest_path(weights))


def timed_run(plan: Plan, executor: str) -> float:
    report = Run(plan, executor=executor, diagnoses=DiagnosisCatalog()).start()
    assert report.ok
    return report.wall_time


def real_run(executor: str) -> float:
    command = [str(Path(sys.executable).parent / "initorch"), "run", "--profile", "cpu",
               "--executor", executor, "--set", "checks.verify_transfer=true"]
    began = time.perf_counter()
    subprocess.run(command, check=True, capture_output=True)
    return time.perf_counter() - began


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=5)
    args = parser.parse_args()
    import logging

    logging.getLogger("initorch").setLevel(logging.WARNING)
    with tempfile.TemporaryDirectory() as folder:
        plan = synthetic_plan(Path(folder))
    ideal = critical_path(plan)
    total = sum(seconds for seconds, _ in SHAPE.values())
    times: dict[str, list[float]] = {"sequential": [], "parallel": []}
    for _ in range(args.runs):
        for executor, samples in times.items():
            samples.append(timed_run(plan, executor))
    sequential, parallel = (statistics.median(times[e]) for e in ("sequential", "parallel"))
    print(f"synthetic start-up ({len(SHAPE)} steps, {total:.2f}s of work, "
          f"critical path {ideal:.2f}s), median of {args.runs}:")
    print(f"  sequential {sequential:.3f}s   {sequential / ideal:.2f}x critical path")
    print(f"  parallel   {parallel:.3f}s   {parallel / ideal:.2f}x critical path   "
          f"speed-up {sequential / parallel:.2f}x over sequential")
    real: dict[str, list[float]] = {"sequential": [], "parallel": []}
    for _ in range(args.runs):
        for executor, samples in real.items():
            samples.append(real_run(executor))
    seq_real, par_real = (statistics.median(real[e]) for e in ("sequential", "parallel"))
    print(f"real cpu profile (torch import, gloo, Mooncake, verify; whole process), "
          f"median of {args.runs}:")
    print(f"  sequential {seq_real:.3f}s   parallel {par_real:.3f}s   "
          f"ratio parallel/sequential {par_real / seq_real:.2f}x")


if __name__ == "__main__":
    main()
