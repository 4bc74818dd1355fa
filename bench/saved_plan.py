"""Starting from a saved plan against resolving at start-up, measured in the same run.

    python bench/saved_plan.py [--runs N]

Each command starts a fresh interpreter and walks the ``npu`` plan with the
dry-run executor (so that no step's own cost hides the difference): once
resolving the profiles (``run -p npu``), once from the plan saved by
``initorch plan -p npu --out`` (``run --plan``).  Runs are interleaved so that
the noise of a shared machine hits every command alike; the baseline is
resolving, and ``import networkx`` is shown for scale.
"""

from __future__ import annotations

import argparse
import subprocess
import sys
import tempfile
import time
from functools import partial
from pathlib import Path

from measure import interleaved, print_ratios

BIN = Path(sys.executable).parent


def once(command: list[str]) -> float:
    began = time.perf_counter()
    subprocess.run(command, check=True, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    return time.perf_counter() - began


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=15)
    args = parser.parse_args()
    initorch = str(BIN / "initorch")
    with tempfile.TemporaryDirectory() as tmp:
        saved = str(Path(tmp) / "npu.json")
        subprocess.run([initorch, "plan", "-p", "npu", "--out", saved], check=True,
                       stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        commands = {
            "run -p npu (resolves)": [initorch, "run", "-p", "npu", "--executor", "dry-run"],
            "run --plan npu.json": [initorch, "run", "--plan", saved, "--executor", "dry-run"],
            "python -c 'import networkx'": [sys.executable, "-c", "import networkx"],
        }
        for command in commands.values():
            once(command)  # warm the page cache
        samples = interleaved({name: partial(once, command)
                               for name, command in commands.items()}, args.runs)
    print(f"fresh interpreters, {args.runs} runs each (median [min-max]; ratio of medians "
          "against resolving)")
    print_ratios(samples, "run -p npu (resolves)", "ms", scale=1e3)

if __name__ == "__main__":
    main()
