"""The real SGLang 0.5.23 server's time to ready: stock, under verify mode, under drive mode.

The same launch line each time (tp=2, HiCache with the Mooncake Store, one managed
master, the tiny model of tests/sglang), started round-robin so that the noise of a
shared machine hits all three alike.  Two points are timed: *up*, when ``/model_info``
answers (every rank's ``Scheduler`` built: all of the start-up initorch observes or
drives), and *ready*, when ``/health_generate`` answers 200 (SGLang's warm-up
generation through every rank done, the same work in all three, and most of the noise).
Stock SGLang needs the test vehicle's CPU host-pool
allocator to start HiCache at all (``INITORCH_TEST_STOCK_CPU_POOL=1``); the initorch
runs install theirs.  Ratios are medians over stock's median, measured in this run.

    .venv/bin/python bench/sglang_startup.py [--runs 3]
"""

from __future__ import annotations

import argparse
import sys
import tempfile
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


def start_up(model: Path, master: Master, environ: dict[str, str], log: Path,
             up: list[float]) -> float:
    """Seconds to ready; the seconds to up are appended to ``up``."""
    with running(model, master, environ, log) as server:
        ready = server.wait_ready()
        up.append(server.up_after if server.up_after is not None else ready)
        return ready


def samples(runs: int) -> tuple[dict[str, list[float]], dict[str, list[float]]]:
    """Seconds to up and seconds to ready, by variant."""
    up: dict[str, list[float]] = {name: [] for name in VARIANTS}
    with tempfile.TemporaryDirectory(prefix="initorch-bench-sglang-") as folder:
        work = Path(folder)
        model = make_tiny_model(work / "tiny-llama")
        with managed_master() as master:
            ready = interleaved(
                {name: (lambda name=name, environ=environ: start_up(
                    model, master, environ, work / "server.log", up[name]))
                 for name, environ in VARIANTS.items()}, runs)
    return up, ready


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=3, help="rounds (default 3)")
    args = parser.parse_args()
    up, ready = samples(args.runs)
    print("the real SGLang server (tp=2, HiCache + Mooncake Store), seconds to up:")
    print_ratios(up, "stock SGLang", "s")
    print("seconds to ready:")
    print_ratios(ready, "stock SGLang", "s")


if __name__ == "__main__":
    main()
