"""One rank of the server overlay's real start-up, for tests under torchrun.

Usage: ``torchrun --nproc-per-node=N tests/support/torchrun_server_rank.py OUT_DIR SETTINGS_JSON
[--short-rank R] [--executor E]``.  Runs ``cpu`` + ``server`` with the given
settings, and writes ``OUT_DIR/rank<N>.json``: what each step produced, the CPU
affinity of every thread of this process and torch's thread count while the run
is up and after teardown.

``--short-rank R`` is the documented test seam of ``memory_baseline``: it
registers a memory query (a choice of ``memory.query``, the table device profiles
pick from) that reports a quarter of the real host figure on rank R, so that the
gather, the balance check and the diagnosis run for real on a faked figure.
"""

from __future__ import annotations

import argparse
import json
import os
from pathlib import Path
from types import ModuleType
from typing import Any

import torch

from initorch import Registry, load_plan
from initorch.execution.run import Run
from initorch.plugin import StepContext
from initorch.steps.memory_baseline import MemoryQuerySpec, query_host


def thread_masks() -> dict[str, str]:
    """``Cpus_allowed_list`` of every thread of this process, by thread id."""
    masks = {}
    for task in Path("/proc/self/task").iterdir():
        try:
            status = (task / "status").read_text()
        except OSError:
            continue
        for line in status.splitlines():
            if line.startswith("Cpus_allowed_list:"):
                masks[task.name] = line.split(":", 1)[1].strip()
    return masks


def fake_short_rank(registry: Registry, short: int) -> str:
    def query(ctx: StepContext, module: ModuleType, index: int | None) -> int:
        real = query_host(ctx, module, index)
        return real // 4 if ctx.rank.rank == short else real

    name = f"test_short_rank_{short}"
    registry.settings.extend_choices("memory.query", {name: MemoryQuerySpec(
        query, f"test seam: rank {short} reports a quarter")}, by="test seam")
    return name


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("out", type=Path)
    parser.add_argument("settings")
    parser.add_argument("--short-rank", type=int)
    parser.add_argument("--executor", default="sequential")
    args = parser.parse_args()
    settings: dict[str, Any] = json.loads(args.settings)
    registry = Registry.with_plugins()
    if args.short_rank is not None:
        settings["memory.query"] = fake_short_rank(registry, args.short_rank)
    plan = load_plan(["cpu", "server"], settings=settings, registry=registry)
    before = {"mask": sorted(os.sched_getaffinity(0)), "threads": torch.get_num_threads()}
    run = Run(plan, executor=args.executor, diagnoses=registry.diagnoses)
    report = run.start()
    result: dict[str, Any] = {"rank": run.state.rank.rank, "ok": report.ok, "before": before}
    if report.ok:
        binding = run.output("bind_cpu_threads")
        parallel = run.output("init_model_parallel")
        result.update(
            cpus=list(binding.cpus), threads=binding.threads,
            masks_during=thread_masks(), torch_threads_during=torch.get_num_threads(),
            groups={group.name: list(group.ranks) for group in parallel},
            warmed={name: list(ranks) for name, ranks in run.output("warmup_collectives").items()},
            per_rank=list(run.output("memory_baseline").per_rank),
        )
    else:
        failed = report.failed[0]
        result.update(failed=failed.name, error=str(failed.error),
                      finding=failed.finding.diagnosis.id if failed.finding else None)
    run.teardown()
    result.update(masks_after=thread_masks(), torch_threads_after=torch.get_num_threads(),
                  teardown=[entry.step for entry in report.teardown])
    (args.out / f"rank{result['rank']}.json").write_text(json.dumps(result))


if __name__ == "__main__":
    main()
