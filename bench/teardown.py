"""The teardown rows of ``make bench``: a real start-up and teardown against a careful
hand-written script, and the side-by-side teardown against the sequential one.

    python bench/teardown.py [--runs N]       # the rows alone
    python bench/teardown.py --careful        # the careful script, once

Both rows time what a user's command does, from process start to exit:

* ``initorch run --profile cpu --set checks.verify_transfer=true`` against
  :func:`careful`, the script a careful person writes by hand: it starts
  ``mooncake_master`` first, so that the master comes up while torch imports (as
  initorch's ``launch_mooncake_master`` does), then the same calls as
  ``bench/handwritten_startup.py`` (which starts the master after the process group),
  and releases everything in reverse, one call at a time, as a script does;
* the same ``initorch run`` with ``--teardown side-by-side`` against ``--teardown
  sequential``: the teardown time each run reports (``teardown_time_s``), round by
  round.

``table.py`` takes the rows from :func:`rows` (``from teardown import rows``).
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import tempfile
import time
import uuid
from collections.abc import Callable
from pathlib import Path

from handwritten_startup import PAGE_PART, PAGES, free_port, ready
from measure import timed

HERE = Path(__file__).resolve().parent
BIN = Path(sys.executable).parent
RUN = [str(BIN / "initorch"), "run", "--profile", "cpu", "--set", "checks.verify_transfer=true"]


def careful() -> None:
    """The careful hand-written start-up and teardown (see the module)."""
    os.environ.setdefault("MC_FORCE_TCP", "1")
    import mooncake  # the package alone: where mooncake_master lies

    rpc, metadata, metrics = free_port(), free_port(), free_port()
    master = subprocess.Popen(
        [str(Path(mooncake.__file__).parent / "mooncake_master"), "--rpc_address=127.0.0.1",
         f"--rpc_port={rpc}", "--enable_http_metadata_server=true",
         "--http_metadata_server_host=127.0.0.1", f"--http_metadata_server_port={metadata}",
         "--metrics_host=127.0.0.1", f"--metrics_port={metrics}"],
        stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    import torch  # while the master starts
    import torch.distributed as dist
    from mooncake.engine import TransferEngine
    from mooncake.store import MooncakeDistributedStore

    pool = torch.empty(64 * 2**20, dtype=torch.uint8)
    ptr, nbytes = pool.data_ptr(), pool.numel()
    engine = TransferEngine()
    assert engine.initialize("127.0.0.1", "P2PHANDSHAKE", "tcp", "") == 0
    dist.init_process_group("gloo", init_method=f"tcp://127.0.0.1:{free_port()}",
                            rank=0, world_size=1)
    while not ready(metrics, rpc):
        assert master.poll() is None, "mooncake_master exited"
        time.sleep(0.05)
    store = MooncakeDistributedStore()
    assert store.setup(f"127.0.0.1:{engine.get_rpc_port()}",
                       f"http://127.0.0.1:{metadata}/metadata", 64 * 2**20, 16 * 2**20, "tcp",
                       "", f"127.0.0.1:{rpc}", engine.get_engine()) == 0
    warm = f"warmup_{uuid.uuid4().hex}"  # SGLang's 4 KiB warm-up, as the store step does
    assert store.put(warm, bytes(4096)) == 0 and len(store.get(warm)) == 4096
    store.remove(warm)
    assert store.register_buffer(ptr, nbytes) == 0
    parts = 2 * PAGES  # K and V of each page
    keys = [f"careful-{uuid.uuid4().hex[:8]}-{part}" for part in range(parts)]
    pages = [(ptr + part * PAGE_PART, PAGE_PART) for part in range(parts)]
    for page, (at, size) in enumerate(pages):
        pool[at - ptr:at - ptr + size].fill_(page % 251 + 1)
    assert all(code == 0 for code in store.batch_put_from(
        keys, [at for at, _ in pages], [size for _, size in pages]))
    back = [(at + parts * PAGE_PART, size) for at, size in pages]
    assert all(code > 0 for code in store.batch_get_into(
        keys, [at for at, _ in back], [size for _, size in back]))
    for page, (at, size) in enumerate(back):
        assert bool((pool[at - ptr:at - ptr + size] == page % 251 + 1).all())
    store.batch_remove(keys)
    store.unregister_buffer(ptr)
    store.close()
    master.terminate()
    master.wait()
    dist.destroy_process_group()
    del engine


def process(argv: list[str]) -> Callable[[], float]:
    """A sampler: the wall time of one process, from start to exit (it must succeed)."""
    return lambda: timed(lambda: subprocess.run(argv, check=True, stdout=subprocess.DEVNULL,
                                                stderr=subprocess.DEVNULL))


def teardown_time(mode: str, folder: Path) -> Callable[[], float]:
    """A sampler: the teardown time a real run with ``--teardown mode`` reports."""
    report = folder / f"teardown-{mode}.json"

    def sample() -> float:
        subprocess.run([*RUN, "--teardown", mode, "--report", str(report)], check=True,
                       stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        return float(json.loads(report.read_text())["teardown_time_s"])

    return sample


def rows(runs: int) -> list[tuple[str, str, list[float], float]]:
    """``(figure, goal, ratios round by round, limit)`` for table.py's ``Row``."""
    ours, by_hand = process(RUN), process([sys.executable, str(Path(__file__)), "--careful"])
    by_hand()  # warm the page cache
    with tempfile.TemporaryDirectory() as tmp:
        side, sequential = teardown_time("side-by-side", Path(tmp)), \
            teardown_time("sequential", Path(tmp))
        samples: list[list[float]] = [[], [], [], []]
        for _ in range(runs):  # interleaved, round by round
            for values, sample in zip(samples, (ours, by_hand, side, sequential), strict=True):
                values.append(sample())
    return [("real start-up and teardown, run --profile cpu (verify_transfer) / careful "
             "hand-written script (master first)", "<= 1.00x",
             [a / b for a, b in zip(samples[0], samples[1], strict=True)], 1.00),
            ("teardown of that run, --teardown side-by-side / sequential", "<= 1.00x",
             [a / b for a, b in zip(samples[2], samples[3], strict=True)], 1.00)]


if __name__ == "__main__":
    if sys.argv[1:] == ["--careful"]:
        careful()
    else:
        runs = int(sys.argv[sys.argv.index("--runs") + 1]) if "--runs" in sys.argv else 5
        for figure, goal, values, limit in rows(runs):
            median = sorted(values)[len(values) // 2]
            print(f"{figure}: {median:.2f}x [{min(values):.2f}-{max(values):.2f}] goal {goal} "
                  f"{'pass' if median <= limit else 'MISS'}")
