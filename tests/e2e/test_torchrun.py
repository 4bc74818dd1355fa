"""Several real ranks under torchrun: one plan agreed on through torchrun's own store, one
gloo group, one Mooncake engine per rank, one managed Mooncake master (rank 0's) for all,
each rank's host pool registered with the store, KV pages put by every rank and read back
by the next one, byte-checked."""

from __future__ import annotations

import json
import socket
import sys
from pathlib import Path

import pytest


def free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port: int = probe.getsockname()[1]
        return port


@pytest.mark.parametrize(("ranks", "layout"), [
    (2, "page_first"), (4, "page_first"),
    (2, "page_first_direct"),
    (2, "page_first_kv_split"),  # MLA: one key per page over two buffers
])
def test_torchrun_cpu_ranks_verify_transfer(ranks: int, layout: str, tmp_path: Path) -> None:
    import subprocess

    bin_dir = Path(sys.executable).parent
    result = subprocess.run(
        [str(bin_dir / "torchrun"), f"--nproc-per-node={ranks}", f"--master-port={free_port()}",
         "--no-python", str(bin_dir / "initorch"), "run", "--profile", "cpu",
         "--set", "checks.verify_transfer=true", "--set", "hicache.host_pool_mb=4",
         "--set", f"hicache.layout={layout}",
         "--log-format", "json"],
        capture_output=True, text=True, timeout=300, check=False)
    assert result.returncode == 0, result.stderr[-4000:]
    events = [json.loads(line) for line in result.stderr.splitlines() if line.startswith("{")]
    verified = {e["rank"]: e for e in events if e["event"] == "transfer_verified"}
    assert sorted(verified) == list(range(ranks))
    for rank, event in verified.items():
        assert (event["put_by"], event["layout"]) == (rank, layout)
        assert event["received_from"] == (rank - 1) % ranks
    masters = {e["rank"]: e for e in events if e["event"] == "mooncake_master_ready"}
    assert [masters[r]["managed"] for r in range(ranks)] == [True] + [False] * (ranks - 1)
    assert len({e["address"] for e in masters.values()}) == 1  # one master for all ranks
    finished = [e for e in events if e["event"] == "run_finished"]
    assert len(finished) == ranks and all(e["ok"] for e in finished)
    agreed = [e for e in events if e["event"] == "plan_agreed"]
    assert sorted(e["rank"] for e in agreed) == list(range(ranks))
    started = [e for e in events if e["event"] == "run_started"]
    assert {(e["world_size"], e["fingerprint"]) for e in agreed} == {
        (ranks, started[0]["fingerprint"])}
    joining = [e for e in events if e["event"] == "job_store_joining"]
    assert {(e["launcher"], e["serving"]) for e in joining} == {("torchrun", False)}
    torn_down = [e for e in events if e["event"] == "teardown_succeeded"]
    assert len(torn_down) == 8 * ranks  # launch_mooncake_master's too: nothing left to stop
    assert [e["rank"] for e in events if e["event"] == "mooncake_master_stopped"] == [0]
    assert "RPC_FAIL" not in result.stderr  # no client was still closing when it stopped


RANK_DISPATCH = """\
import os, sys
script, good, bad = sys.argv[1:4]
profile = bad if os.environ["RANK"] == "1" else good
os.execv(script, [script, "run", "-p", profile, "--log-format", "json"])
"""


def test_the_survivor_of_a_rank_that_fails_at_once_acts_on_torchruns_sigterm(tmp_path: Path
                                                                              ) -> None:
    # Issue 10, point 8: rank 1 fails at once (a different, broken overlay); rank 0
    # waits in the rendezvous. torchrun SIGTERMs it and would SIGKILL it 30 s later:
    # it must tear down and exit 143 itself, not wait for distributed.timeout_s.
    import subprocess

    bin_dir = Path(sys.executable).parent
    dispatch = tmp_path / "dispatch.py"
    dispatch.write_text(RANK_DISPATCH, encoding="utf-8")
    bad = tmp_path / "bad.yaml"
    bad.write_text("extends: cpu\nconfig:\n  distributed:\n    timeout_s: -1\n", encoding="utf-8")
    result = subprocess.run(
        [str(bin_dir / "torchrun"), "--nproc-per-node=2", f"--master-port={free_port()}",
         "--monitor-interval=0.1", "--no-python", sys.executable, str(dispatch),
         str(bin_dir / "initorch"), "cpu", str(bad)],
        capture_output=True, text=True, timeout=120, check=False, cwd=tmp_path)
    assert result.returncode != 0
    events = [json.loads(line) for line in result.stderr.splitlines() if line.startswith("{")]
    interrupts = [e for e in events if e["event"] == "run_interrupted"]
    assert len(interrupts) == 1, result.stderr[-6000:]  # what rank 0 said instead, if not
    [interrupted] = interrupts
    assert (interrupted["rank"], interrupted["signal"], interrupted["exit_code"]) == (
        0, "SIGTERM", 143)
    errors = [e for e in events if e["event"] == "error"]
    assert errors and "distributed.timeout_s" in errors[0]["text"]
    assert not any(e["event"] == "teardown_failed" for e in events)


SET_ON_RANK_1 = """\
import os, sys
script = sys.argv[1]
extra = ["--set", "checks.verify_transfer=true"] if os.environ["RANK"] == "1" else []
os.execv(script, [script, "run", "-p", "cpu", "--log-format", "json", *extra])
"""


def test_a_setting_given_to_one_rank_is_named_with_both_values_on_every_rank(
        tmp_path: Path) -> None:
    # Issue 27: torchrun ends the job at its first failed rank; every rank still names
    # the key and both values (the first to find it waits until the others read it).
    import subprocess

    bin_dir = Path(sys.executable).parent
    dispatch = tmp_path / "dispatch.py"
    dispatch.write_text(SET_ON_RANK_1, encoding="utf-8")
    result = subprocess.run(
        [str(bin_dir / "torchrun"), "--nproc-per-node=2", f"--master-port={free_port()}",
         "--monitor-interval=0.1", "--no-python", sys.executable, str(dispatch),
         str(bin_dir / "initorch")],
        capture_output=True, text=True, timeout=120, check=False, cwd=tmp_path)
    assert result.returncode != 0
    events = [json.loads(line) for line in result.stderr.splitlines() if line.startswith("{")]
    failed = {e["rank"]: e for e in events if e["event"] == "run_failed"}
    assert sorted(failed) == [0, 1], result.stderr[-6000:]
    for rank, event in failed.items():
        assert event["text"].startswith(f"initorch: error: rank {rank}: the ranks' plans "
                                        "differ"), event["text"]
        assert "  checks.verify_transfer: false on rank 0; true on rank 1" in \
            event["text"].splitlines()


def torchrun_with_a_dying_rank(tmp_path: Path, *die: str) -> list[dict]:
    """Two ranks under torchrun with the test plugin; rank 1 dies by SIGKILL where the
    ``die`` settings say, torchrun then SIGTERMs rank 0 and SIGKILLs it 30 s later if it
    is still there. Returns rank 0's JSON events."""
    import subprocess

    from tests.support.ranks import clean_env

    result = subprocess.run(
        [sys.executable, "-m", "torch.distributed.run", "--nproc-per-node=2",
         f"--master-port={free_port()}", "-m", "initorch", "run", "-p", "cpu",
         "--plugin", "tests.support.job_plugin", "--set", "test.die_rank=1",
         *(arg for setting in die for arg in ("--set", setting)), "--log-format", "json"],
        capture_output=True, text=True, timeout=120, check=False, cwd=tmp_path,
        env=clean_env())
    assert result.returncode != 0  # torchrun reports rank 1's death
    events = [json.loads(line) for line in result.stderr.splitlines() if line.startswith("{")]
    assert [e["rank"] for e in events if e["event"] == "dying"] == [1]
    # Rank 0 concluded itself (a rank that torchrun SIGKILLs never prints its summary).
    assert [e["rank"] for e in events if e["event"] == "run_summary"] == [0], \
        result.stderr[-4000:]
    return [e for e in events if e.get("rank") == 0]


def test_a_rank_dying_in_the_process_group_under_torchrun_leaves_rank_0_to_tear_down(
        tmp_path: Path) -> None:
    # Issue 19: rank 1 dies entering init_process_group while rank 0 waits in it;
    # torchrun's SIGTERM must end rank 0 after its teardown, with 143, within seconds.
    events = torchrun_with_a_dying_rank(tmp_path, "test.die_at=process_group")
    [interrupted] = [e for e in events if e["event"] == "run_interrupted"]
    assert (interrupted["signal"], interrupted["exit_code"]) == ("SIGTERM", 143)
    torn_down = {e["step"] for e in events if e["event"] == "teardown_succeeded"}
    assert {"launch_mooncake_master", "alloc_host_mem_pool"} <= torn_down
    assert [e for e in events if e["event"] == "mooncake_master_stopped"]


def test_the_masters_owner_stops_it_before_torchruns_sigkill_when_a_rank_died(
        tmp_path: Path) -> None:
    # Issue 19: rank 1 dies once the managed master is up and before its store client
    # exists; rank 0 (the master's owner) waited 30 s for that client to close and was
    # SIGKILLed by torchrun mid-teardown. Now the wait is bounded well within 30 s.
    # Rank 1 dies once rank 0's start-up is done, so that torchrun's SIGTERM finds rank 0
    # in its teardown (a SIGTERM during MooncakeDistributedStore.setup, which can hold
    # the GIL for seconds, is the watchdog's documented SIGKILL instead).
    events = torchrun_with_a_dying_rank(tmp_path, "test.die_at=store", "test.die_after_s=5")
    [early] = [e for e in events if e["event"] == "mooncake_master_stopping_early"]
    assert early["ranks"] == [1]
    assert [e for e in events if e["event"] == "mooncake_master_stopped"]
    assert not [e for e in events if e["event"] == "teardown_failed"]
