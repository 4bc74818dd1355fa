"""Several real ranks on loopback, started as plain processes or as SLURM tasks: they agree
on the plan through torch.distributed's store, a rank with another ``--set`` is named on
every rank, and a rank killed mid-start-up makes the others stop, naming it, long before
any collective timeout."""

from __future__ import annotations

import json
import os
import re
import signal
import subprocess
import sys

import pytest

from tests.support.commands import initorch_command
from tests.support.ranks import clean_env, free_port, spawn, wait_all, wait_for_line

NO_MOONCAKE = ("run", "--profile", "cpu", "--set", "mooncake.enabled=false",
               "--log-format", "json")
# Far beyond the test's own bound: a rank that waited for a collective would hang the test.
NO_COLLECTIVE_TIMEOUT = ("--set", "distributed.timeout_s=3600",
                         "--set", "distributed.join_timeout_s=3600")


def plain_ranks(world: int, args_of_rank, env: dict[str, str] | None = None):
    """``world`` processes started with --dist-init-addr/--nnodes/--node-rank, no launcher
    variables in their environment."""
    address = f"127.0.0.1:{free_port()}"
    return [spawn([*args_of_rank(rank), "--dist-init-addr", address, "--nnodes", str(world),
                   "--node-rank", str(rank)], env or clean_env())
            for rank in range(world)]


def test_dist_init_addr_alone_starts_two_ranks_with_the_store_path(tmp_path):
    procs = plain_ranks(2, lambda rank: (
        "run", "--profile", "cpu", "--set", "checks.verify_transfer=true",
        "--set", "hicache.host_pool_mb=4", "--log-format", "json",
        "--trace", str(tmp_path / "trace-{rank}.json"),
        "--report", str(tmp_path / "run-{rank}.json")))
    ended = wait_all(procs)
    for rank, result in enumerate(ended):
        assert result.returncode == 0, result.stderr[-4000:]
        [started] = result.named("run_started")
        assert (started["rank"], started["world_size"], started["launcher"]) == (rank, 2, "args")
        [agreed] = result.named("plan_agreed")
        assert agreed["world_size"] == 2
        [verified] = result.named("transfer_verified")
        assert verified["received_from"] == (rank - 1) % 2
    assert ended[0].named("job_store_joining")[0]["serving"] is True
    assert ended[1].named("job_store_joining")[0]["serving"] is False
    assert len({e.named("plan_agreed")[0]["fingerprint"] for e in ended}) == 1
    assert [json.loads((tmp_path / f"run-{rank}.json").read_text())["rank"]
            for rank in (0, 1)] == [0, 1]
    merged = initorch_command("trace", "merge", str(tmp_path / "trace-0.json"),
                              str(tmp_path / "trace-1.json"), "-o", str(tmp_path / "all.json"))
    assert merged.returncode == 0, merged.stderr
    events = json.loads((tmp_path / "all.json").read_text())["traceEvents"]
    steps = {(e["pid"], e["name"]) for e in events if e.get("cat") == "initorch.step"}
    assert {(rank, "rendezvous") for rank in (0, 1)} <= steps
    names = {e["pid"]: e["args"]["name"] for e in events if e["name"] == "process_name"}
    assert names == {0: "initorch rank 0 (base + cpu)", 1: "initorch rank 1 (base + cpu)"}


def test_one_rank_with_another_setting_is_caught_on_every_rank():
    procs = plain_ranks(3, lambda rank: (
        *NO_MOONCAKE, *NO_COLLECTIVE_TIMEOUT,
        *(("--set", "hicache.host_pool_mb=128") if rank == 1 else ())))
    ended = wait_all(procs)
    for rank, result in enumerate(ended):
        assert result.returncode == 1, result.stderr[-4000:]
        last = result.last
        assert (last["event"], last["step"]) == ("run_failed", "rendezvous")
        first, detail, *_ = last["text"].splitlines()
        assert first.startswith(f"initorch: error: rank {rank}: the ranks' plans differ")
        assert detail == "  hicache.host_pool_mb: 64 on ranks 0,2; 128 on rank 1"
        assert result.named("plan_disagreement")[0]["differences"] == [detail.strip()]
        skipped = {e["step"] for e in result.named("step_skipped")
                   if e.get("root_cause") == "rendezvous"}
        assert "init_torch_distributed" in skipped  # nothing waited for a peer


@pytest.mark.parametrize("worlds", [(3, 2), (2, 3)], ids=["rank0-larger", "rank1-larger"])
def test_ranks_that_disagree_on_the_world_size_say_so_on_both_sides(worlds):
    """Rank 0 serves the store; believing in a larger world than there is must not make it
    wait for ranks that never come (the bound would pass with no word of the cause)."""
    address = f"127.0.0.1:{free_port()}"
    procs = [spawn([*NO_MOONCAKE, *NO_COLLECTIVE_TIMEOUT, "--dist-init-addr", address,
                    "--nnodes", str(world), "--node-rank", str(rank)], clean_env())
             for rank, world in enumerate(worlds)]
    for rank, result in enumerate(wait_all(procs)):
        assert result.returncode == 1, result.stderr[-4000:]
        first, detail, *_ = result.last["text"].splitlines()
        assert first.startswith(f"initorch: error: rank {rank}: the ranks' plans differ")
        assert detail == f"  world size: {worlds[0]} on rank 0; {worlds[1]} on rank 1"


def start_and_kill(killed: int) -> list:
    """Three plain processes; rank ``killed`` lingers before the process group and is
    killed there (SIGKILL) once the other two wait for it at that step's barrier."""
    procs = plain_ranks(3, lambda rank: (
        *NO_MOONCAKE, *NO_COLLECTIVE_TIMEOUT, "--plugin", "tests.support.job_plugin",
        "--set", f"test.linger_rank={killed}", "--set", "test.linger_s=3600",
        "--set", "distributed.peer_timeout_s=3"))
    wait_for_line(procs[killed], '"event": "lingering"')
    for rank in {0, 1, 2} - {killed}:
        wait_for_line(procs[rank], '"step": "init_torch_distributed", "attempt"')
    os.kill(procs[killed].pid, signal.SIGKILL)
    ended = wait_all(procs)
    assert ended[killed].returncode == -signal.SIGKILL
    return ended


def test_a_rank_killed_mid_start_up_makes_the_others_stop_naming_it():
    ended = start_and_kill(1)
    for rank in (0, 2):
        result = ended[rank]
        assert result.returncode == 1, result.stderr[-4000:]
        assert result.last["step"] == "init_torch_distributed"
        assert ("rank 1 stopped answering: its heartbeat has not moved for "
                in result.last["text"])
        assert "it was last seen in step linger (running)" in result.last["text"]
        lost = result.named("peer_lost")
        assert not lost or lost[0]["lost_rank"] == 1


def test_the_rank_serving_the_store_killed_mid_start_up_is_named_by_the_others():
    ended = start_and_kill(0)
    for rank in (1, 2):
        result = ended[rank]
        assert result.returncode == 1, result.stderr[-4000:]
        assert result.last["step"] == "init_torch_distributed"
        first = result.last["text"].splitlines()[0]
        assert first.startswith(f"initorch: error: rank {rank}: rank 0, which serves the "
                                "job's store at 127.0.0.1:"), first
        # where this rank last saw it: the store is gone, so nothing newer can be read
        assert re.search(r", stopped answering: it has likely died; it was last seen (in step "
                         rf"(rendezvous|linger) \(\w+\)|joining the job); rank {rank} stops "
                         "too$", first), first


def test_a_rank_that_dies_entering_the_process_group_stops_the_survivor_at_once():
    # Issue 19: rank 0 waits inside torch's init_process_group (native code, for the
    # collective timeout: an hour here) for a rank 1 that died entering it; its
    # heartbeat stops, and rank 0 stops once that is known, naming it.
    procs = plain_ranks(2, lambda rank: (
        *NO_MOONCAKE, *NO_COLLECTIVE_TIMEOUT, "--plugin", "tests.support.job_plugin",
        "--set", "test.die_rank=1", "--set", "distributed.peer_timeout_s=3"))
    survivor, dead = wait_all(procs)
    assert dead.returncode == -signal.SIGKILL
    assert dead.named("dying")
    assert survivor.returncode == 1, survivor.stderr[-4000:]
    assert survivor.named("process_group_starting")
    assert survivor.last["step"] == "init_torch_distributed"
    assert survivor.last["text"].startswith(
        "initorch: error: rank 0: rank 1 stopped answering: its heartbeat has not moved for ")
    assert "rank 0 stops too" in survivor.last["text"]


def test_a_survivor_whose_steps_all_succeeded_does_not_claim_the_jobs_success():
    # Issue 19: rank 1 dies once the managed master is up, before its store client;
    # rank 0's start-up succeeds, its master's teardown stops waiting for rank 1's
    # client once rank 1 is known lost, and the run ends with exit 1 naming rank 1.
    procs = plain_ranks(2, lambda rank: (
        "run", "--profile", "cpu", "--log-format", "json", *NO_COLLECTIVE_TIMEOUT,
        "--plugin", "tests.support.job_plugin", "--set", "test.die_rank=1",
        "--set", "test.die_at=store", "--set", "distributed.peer_timeout_s=3"))
    survivor, dead = wait_all(procs)
    assert dead.returncode == -signal.SIGKILL
    assert survivor.returncode == 1, survivor.stderr[-4000:]
    [summary] = survivor.named("run_summary")
    assert summary["ok"] is True  # every step of rank 0 succeeded ...
    assert [lost["rank"] for lost in summary["peers_lost"]] == [1]  # ... but not the job
    [early] = survivor.named("mooncake_master_stopping_early")
    assert early["ranks"] == [1] and "rank 1 stopped answering" in early["why"]
    assert survivor.named("mooncake_master_stopped")
    assert (survivor.last["event"], survivor.last["lost_ranks"]) == ("run_failed", [1])
    assert survivor.last["text"].startswith("initorch: error: rank 0: rank 1 stopped answering")
    assert "the job is incomplete without it" in survivor.last["text"]


def alone(rank: int, join_timeout_s: int):
    """Rank ``rank`` of a job of two, started without the other one."""
    address = f"127.0.0.1:{free_port()}"
    [proc] = [spawn([*NO_MOONCAKE, "--set", f"distributed.join_timeout_s={join_timeout_s}",
                     "--dist-init-addr", address, "--nnodes", "2", "--node-rank", str(rank)],
                    clean_env())]
    [ended] = wait_all([proc])
    assert ended.returncode == 1, ended.stderr[-4000:]
    return address, ended


def assert_it_said_what_it_waits_for(ended, address: str, missing: list[int], bound: int):
    waits = ended.named("waiting_for_ranks")
    assert waits, ended.stderr[-4000:]
    for wait in waits:
        assert (wait["missing"], wait["store"]) == (missing, address)
        assert wait["waiting_for"].startswith(f"rank {missing[0]} to ")
        assert 0 <= wait["time_left_s"] < bound
    lefts = [wait["time_left_s"] for wait in waits]
    assert lefts == sorted(lefts, reverse=True)
    assert all("timeout_s" not in beat for beat in ended.named("step_still_running"))


def test_rank_0_waiting_for_a_rank_that_never_comes_names_it_the_store_and_the_time_left():
    # Issue 19: every rendezvous wait names the missing ranks, the address and the time left.
    address, ended = alone(0, 12)
    assert_it_said_what_it_waits_for(ended, address, [1], 12)
    assert ended.named("waiting_for_ranks")[0]["waiting_for"] == "rank 1 to publish its plan"
    assert "rank 1 did not publish its plan within 12s" in ended.last["text"]


def test_a_rank_waiting_for_rank_0s_store_names_it_the_address_and_the_time_left():
    address, ended = alone(1, 8)
    assert_it_said_what_it_waits_for(ended, address, [0], 8)
    assert ended.named("waiting_for_ranks")[0]["waiting_for"] == \
        "rank 0 to serve the job's store"
    assert ended.last["step"] == "rendezvous"
    assert ended.last["text"].startswith("diagnosis process-group-timeout: ")


def test_two_slurm_tasks_are_one_job_of_two():
    port = free_port()
    common = {"SLURM_JOB_ID": "4242", "SLURM_STEP_ID": "0", "SLURM_NTASKS": "2",
              "SLURM_NODELIST": "localhost", "SLURM_TASKS_PER_NODE": "2", "SLURM_NODEID": "0",
              "MASTER_PORT": str(port)}
    procs = [spawn(NO_MOONCAKE, clean_env({**common, "SLURM_PROCID": str(task),
                                            "SLURM_LOCALID": str(task)}))
             for task in (0, 1)]
    ended = wait_all(procs)
    for task, result in enumerate(ended):
        assert result.returncode == 0, result.stderr[-4000:]
        [started] = result.named("run_started")
        assert (started["rank"], started["world_size"], started["local_rank"],
                started["launcher"]) == (task, 2, task, "slurm")
        [joining] = result.named("job_store_joining")
        assert joining["address"] == f"localhost:{port}"
        assert result.named("plan_agreed")[0]["world_size"] == 2


def test_a_batch_script_with_slurm_ntasks_is_refused_instead_of_running_alone():
    env = clean_env({"SLURM_JOB_ID": "4242", "SLURM_NTASKS": "2", "SLURM_PROCID": "0",
                     "SLURM_NODELIST": "localhost"})
    [result] = wait_all([spawn(NO_MOONCAKE, env)])
    assert result.returncode == 2
    assert result.last["event"] == "error"
    assert "the world size is ambiguous: SLURM_NTASKS=2, but this process is not an srun " \
           "task" in result.last["text"]
    assert not result.named("run_started")


IN_CODE = """
import json, sys
import torch, torch.distributed as dist
from initorch import LaunchArguments, RankInfo, Registry, Run, load_plan, start

how, rank, port = sys.argv[1], int(sys.argv[2]), int(sys.argv[3])
lean = {"mooncake.enabled": False, "hicache.enabled": False}

def summed() -> int:
    value = torch.tensor([rank + 1])
    dist.all_reduce(value)
    return int(value.item())

if how == "rank-info":  # where to meet: the settings, since RankInfo names no rendezvous
    registry = Registry.with_plugins()
    plan = load_plan(["cpu"], settings={**lean, "distributed.master_port": port},
                     registry=registry)
    with Run(plan, diagnoses=registry.diagnoses, rank=RankInfo(rank=rank, world_size=2),
             heartbeat=None):
        result = summed()
else:  # SGLang-style arguments
    with start(profile="cpu", settings=lean,
               launch=LaunchArguments(f"127.0.0.1:{port}", nnodes=2, node_rank=rank)):
        result = summed()
print(json.dumps({"sum": result, "group_after": dist.is_initialized()}))
"""


@pytest.mark.parametrize("how", ["rank-info", "dist-init-addr"])
def test_in_code_ranks_need_no_launcher_variables(how):
    """``Run(plan, rank=RankInfo(...))`` with the settings saying where to meet, and
    ``start(launch=LaunchArguments(dist_init_addr=..., nnodes=..., node_rank=...))``: a real
    gloo group of two with no MASTER_ADDR, MASTER_PORT, RANK or WORLD_SIZE anywhere in the
    environment."""
    port = free_port()
    env = clean_env()
    assert not {"MASTER_ADDR", "MASTER_PORT", "RANK", "WORLD_SIZE"} & set(env)
    procs = [subprocess.Popen([sys.executable, "-c", IN_CODE, how, str(rank), str(port)],
                              env=env, text=True, stdout=subprocess.PIPE,
                              stderr=subprocess.PIPE)
             for rank in (0, 1)]
    for result in wait_all(procs):
        assert result.returncode == 0, result.stderr[-4000:]
        assert json.loads(result.stdout.splitlines()[-1]) == {"sum": 3, "group_after": False}


def test_server_steps_take_the_local_ranks_from_the_arguments():
    """Two plain processes on one node (``--nproc-per-node 2 --local-rank L``), no
    ``LOCAL_WORLD_SIZE``: ``bind_cpu_threads`` splits the cores between the two local
    ranks as the arguments describe them, and the model-parallel groups span both."""
    address = f"127.0.0.1:{free_port()}"
    procs = [spawn(["run", "--profile", "cpu", "--profile", "server",
                    "--set", "mooncake.enabled=false", "--set", "hicache.enabled=false",
                    "--set", "parallel.tp_size=2", "--log-format", "json",
                    "--dist-init-addr", address, "--nnodes", "1", "--node-rank", "0",
                    "--nproc-per-node", "2", "--local-rank", str(rank)], clean_env())
             for rank in (0, 1)]
    ended = wait_all(procs)
    bound = []
    for rank, result in enumerate(ended):
        assert result.returncode == 0, result.stderr[-4000:]
        [started] = result.named("run_started")
        assert (started["rank"], started["local_rank"], started["world_size"]) == (rank, rank, 2)
        [binding] = result.named("cpu_threads_bound")
        assert binding["local_world_size"] == 2
        bound.append(binding["cpus"])
    if len(os.sched_getaffinity(0)) >= 2:  # a core each where there are two to share
        assert bound[0] != bound[1], bound
