"""Several real ranks under torchrun: one gloo group, one Mooncake engine per rank,
pools registered, and bytes moved from every rank to the next and checked."""

from __future__ import annotations

import json
import socket
import sys
from pathlib import Path

import pytest

pytestmark = pytest.mark.e2e


def free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port: int = probe.getsockname()[1]
        return port


@pytest.mark.parametrize("ranks", [2, 4])
def test_torchrun_cpu_ranks_verify_transfer(ranks: int, tmp_path: Path) -> None:
    import subprocess

    bin_dir = Path(sys.executable).parent
    result = subprocess.run(
        [str(bin_dir / "torchrun"), f"--nproc-per-node={ranks}", f"--master-port={free_port()}",
         "--no-python", str(bin_dir / "initorch"), "run", "--profile", "cpu",
         "--set", "checks.verify_transfer=true", "--set", "hicache.host_pool_mb=4",
         "--log-format", "json"],
        capture_output=True, text=True, timeout=300, check=False)
    assert result.returncode == 0, result.stderr[-4000:]
    events = [json.loads(line) for line in result.stderr.splitlines() if line.startswith("{")]
    verified = {e["rank"]: e for e in events if e["event"] == "transfer_verified"}
    assert sorted(verified) == list(range(ranks))
    for rank, event in verified.items():
        assert event["sent_to"] == (rank + 1) % ranks
        assert event["received_from"] == (rank - 1) % ranks
    finished = [e for e in events if e["event"] == "run_finished"]
    assert len(finished) == ranks and all(e["ok"] for e in finished)
    torn_down = [e for e in events if e["event"] == "teardown_succeeded"]
    assert len(torn_down) == 4 * ranks
