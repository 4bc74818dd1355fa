"""The real SGLang 0.5.23 server's time to ready: stock, under verify mode, under drive mode.

The same launch line each time (tp=2, HiCache with the Mooncake Store, one managed
master, the tiny model of tests/sglang), started round-robin so that the noise of a
shared machine hits all three alike.  Two points are timed: *up*, when ``/model_info``
answers (every rank's ``Scheduler`` built: all of the start-up initorch observes or
drives), and *ready*, when ``/health_generate`` answers 200 (SGLang's warm-up
generation through every rank done, the same work in all three, and most of the noise).
Stock SGLang needs the test vehicle's CPU host-pool
allocator to start HiCache at all (``INITORCH_TEST_STOCK_CPU_POOL=1``); the initorch
runs install theirs.  Ratios are medians over stock's median, measured in this run:
reported, not gated, since two launches of one line differ by more than initorch adds.
What is gated is measured inside each rank: initorch's own time in the process (its
report's ``cost``: plugin load, plan and hooks, recording, report) over the process's
time from its start to up, at most 1%.

    .venv/bin/python bench/sglang_startup.py [--runs 3]
"""

from __future__ import annotations

import argparse
import json
import shutil
import statistics
import sys
import tempfile
from dataclasses import dataclass, field
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))  # the repo, for tests.sglang

from measure import interleaved, print_ratios

from tests.sglang.server import Master, managed_master, running
from tests.sglang.tiny_model import make_tiny_model

BIND = {"SGLANG_CPU_OMP_THREADS_BIND": "0|1"}
VARIANTS = {
    "stock SGLang": {"INITORCH_TEST_STOCK_CPU_POOL": "1", **BIND},
    "verify mode": {"INITORCH_SGLANG": "verify", **BIND},
    "drive mode": {"INITORCH_SGLANG": "drive", **BIND},
}


@dataclass
class Samples:
    """Seconds to up and to ready by variant, and initorch's share of each rank's
    start-up to up (from the ranks' reports; none for stock SGLang)."""

    up: dict[str, list[float]] = field(default_factory=lambda: {name: [] for name in VARIANTS})
    ready: dict[str, list[float]] = field(default_factory=dict)
    share: dict[str, list[float]] = field(default_factory=lambda: {name: [] for name in VARIANTS})


def start_up(model: Path, master: Master, environ: dict[str, str], work: Path, name: str,
             found: Samples) -> float:
    """Seconds to ready; the seconds to up and the ranks' cost shares go to ``found``."""
    reports = work / "reports"
    shutil.rmtree(reports, ignore_errors=True)
    environ = environ | {"INITORCH_SGLANG_REPORT": str(reports / "report-{rank}.json")}
    with running(model, master, environ, work / "server.log") as server:
        ready = server.wait_ready()
        found.up[name].append(server.up_after if server.up_after is not None else ready)
    for report in sorted(reports.glob("report-*.json")):
        share = json.loads(report.read_text())["sglang"]["cost"]["share"]
        if share is not None:
            found.share[name].append(share)
    return ready


def samples(runs: int) -> Samples:
    """Every variant ``runs`` times, interleaved."""
    found = Samples()
    with tempfile.TemporaryDirectory(prefix="initorch-bench-sglang-") as folder:
        work = Path(folder)
        model = make_tiny_model(work / "tiny-llama")
        with managed_master() as master:
            found.ready = interleaved(
                {name: (lambda name=name, environ=environ: start_up(
                    model, master, environ, work, name, found))
                 for name, environ in VARIANTS.items()}, runs)
    return found


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=3, help="rounds (default 3)")
    args = parser.parse_args()
    found = samples(args.runs)
    print("the real SGLang server (tp=2, HiCache + Mooncake Store), seconds to up:")
    print_ratios(found.up, "stock SGLang", "s")
    print("seconds to ready:")
    print_ratios(found.ready, "stock SGLang", "s")
    print("initorch's own time in a rank, share of the rank's start-up to up (goal <= 1%):")
    for name, shares in found.share.items():
        if shares:
            print(f"  {name}: median {statistics.median(shares):.2%} "
                  f"[{min(shares):.2%}-{max(shares):.2%}] over {len(shares)} rank start-ups")


if __name__ == "__main__":
    main()
