"""initorch's own main job under torch 2.14.1: the SGLang venv carries the torch that
SGLang 0.5.23 pins (``torch==2.14.1``, from PyPI), the main venv the 2.13.0 CPU build, so
the two ends of the range this machine has are both run (issue 18)."""

from __future__ import annotations

import json
import subprocess
from pathlib import Path

import pytest

from tests.sglang.server import free_port, sglang_venv

pytestmark = pytest.mark.e2e


def test_two_ranks_start_and_move_pages_under_torch_2_14(tmp_path: Path) -> None:
    bin_dir = sglang_venv() / "bin"
    version = subprocess.run([str(bin_dir / "python"), "-c",
                              "import torch; print(torch.__version__)"],
                             capture_output=True, text=True, check=True).stdout.strip()
    assert version.startswith("2.14.1"), version
    result = subprocess.run(
        [str(bin_dir / "torchrun"), "--nproc-per-node=2", f"--master-port={free_port()}",
         "--no-python", str(bin_dir / "initorch"), "run", "--profile", "cpu",
         "--set", "checks.verify_transfer=true", "--set", "hicache.host_pool_mb=4",
         "--report", str(tmp_path / "report-{rank}.json"), "--log-format", "json"],
        capture_output=True, text=True, timeout=300, check=False, cwd=tmp_path)
    assert result.returncode == 0, result.stderr[-4000:]
    events = [json.loads(line) for line in result.stderr.splitlines() if line.startswith("{")]
    verified = sorted(e["rank"] for e in events if e["event"] == "transfer_verified")
    assert verified == [0, 1]
    for rank in (0, 1):
        report = json.loads((tmp_path / f"report-{rank}.json").read_text(encoding="utf-8"))
        assert report["ok"], report
        statuses = {s["step"]: s["status"] for s in report["steps"]}
        assert statuses["init_torch_distributed"] == "succeeded"
        assert statuses["register_mem_pool_host"] == "succeeded"
