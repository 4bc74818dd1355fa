"""How long the dry run takes, against the cost of importing its three dependencies.

    python bench/dry_run.py [--runs N]

Both commands start a fresh interpreter each time; runs are interleaved so that
the noise of a shared machine hits both alike.  The ratio of medians is the
number to watch (goal: at most 1.3x).
"""

from __future__ import annotations

import argparse
import statistics
import subprocess
import sys
import time
from pathlib import Path

BIN = Path(sys.executable).parent
BASELINE = [sys.executable, "-c", "import networkx, yaml, structlog"]
COMMANDS = {
    "plan npu": [str(BIN / "initorch"), "plan", "--profile", "npu"],
    "plan npu + npu-hccl --json": [str(BIN / "initorch"), "plan", "--profile", "npu",
                                   "--profile", "npu-hccl", "--json"],
    "plan --device musa:0": [str(BIN / "initorch"), "plan", "--device", "musa:0"],
}


def once(command: list[str]) -> float:
    began = time.perf_counter()
    subprocess.run(command, check=True, stdout=subprocess.DEVNULL)
    return time.perf_counter() - began


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=15)
    args = parser.parse_args()
    for command in (BASELINE, *COMMANDS.values()):
        once(command)  # warm the page cache
    samples: dict[str, list[float]] = {"baseline": [], **{name: [] for name in COMMANDS}}
    for _ in range(args.runs):
        samples["baseline"].append(once(BASELINE))
        for name, command in COMMANDS.items():
            samples[name].append(once(command))
    base = statistics.median(samples["baseline"])
    print(f"baseline  python -c 'import networkx, yaml, structlog': median {base * 1e3:.0f} ms "
          f"over {args.runs} runs")
    for name in COMMANDS:
        median = statistics.median(samples[name])
        print(f"{name:<32} median {median * 1e3:6.0f} ms   ratio {median / base:.2f}x")


if __name__ == "__main__":
    main()
