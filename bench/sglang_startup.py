"""The real SGLang 0.5.23 server's time to ready: stock, under verify mode, under drive mode.

The same launch line each time (tp=2, HiCache with the Mooncake Store, one managed
master, the tiny model of tests/sglang), started round-robin so that the noise of a
shared machine hits all three alike; ready is ``/health_generate`` answering 200 (a
generation through every rank).  Stock SGLang needs the test vehicle's CPU host-pool
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


def time_to_ready(model: Path, master: Master, environ: dict[str, str], log: Path) -> float:
    with running(model, master, environ, log) as server:
        return server.wait_ready()


def samples(runs: int) -> dict[str, list[float]]:
    with tempfile.TemporaryDirectory(prefix="initorch-bench-sglang-") as folder:
        work = Path(folder)
        model = make_tiny_model(work / "tiny-llama")
        with managed_master() as master:
            return interleaved(
                {name: (lambda environ=environ: time_to_ready(
                    model, master, environ, work / "server.log"))
                 for name, environ in VARIANTS.items()}, runs)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=3, help="rounds (default 3)")
    args = parser.parse_args()
    print("time to ready of the real SGLang server (tp=2, HiCache + Mooncake Store):")
    print_ratios(samples(args.runs), "stock SGLang", "s")


if __name__ == "__main__":
    main()
