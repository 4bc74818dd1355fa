"""Where a process stands in its job: torchrun's, SLURM's and SGLang-style descriptions,
and every way they can be malformed or ambiguous (exit code 2, never a world of one)."""

from __future__ import annotations

import ast
import dataclasses
import inspect
import re

import pytest
from hypothesis import given
from hypothesis import strategies as st

from initorch import RankInfo
from initorch.errors import EXIT_INVALID_INPUT, LaunchError
from initorch.execution import launchers
from initorch.execution.launchers import (
    LaunchArguments,
    detect_rank,
    expand_hostlist,
    first_host,
    tasks_on_node,
)

SRUN_TASK = {"SLURM_JOB_ID": "200505", "SLURM_STEP_ID": "0", "SLURM_NTASKS": "2",
             "SLURM_NODELIST": "gnode[10,20]", "SLURM_TASKS_PER_NODE": "1(x2)"}


def problem(error: LaunchError) -> str:
    return error.problems[0].message


# -- torchrun -------------------------------------------------------------------------------

@pytest.mark.parametrize(("env", "expected"), [
    ({}, RankInfo(launcher="none")),
    ({"RANK": "", "LOCAL_RANK": "  ", "WORLD_SIZE": ""}, RankInfo(launcher="none")),
    ({"RANK": "5", "LOCAL_RANK": "1", "WORLD_SIZE": "8", "LOCAL_WORLD_SIZE": "4",
      "MASTER_ADDR": "10.0.0.1", "MASTER_PORT": "29500", "TORCHELASTIC_RUN_ID": "x"},
     RankInfo(5, 1, 8, 4, "10.0.0.1:29500", "torchrun")),
    ({"RANK": " 1 ", "WORLD_SIZE": "2\n"}, RankInfo(1, 0, 2, launcher="env")),
    ({"WORLD_SIZE": "1"}, RankInfo(launcher="env")),
    ({"RANK": "0", "WORLD_SIZE": "2", "MASTER_ADDR": "::1", "MASTER_PORT": "9"},
     RankInfo(0, 0, 2, rendezvous="[::1]:9", launcher="env")),
], ids=["unset", "blank", "torchrun", "padded", "world-of-one", "ipv6"])
def test_torchrun_variables(env, expected):
    assert detect_rank(env) == expected


def test_from_env_reads_os_environ_only_without_a_mapping(monkeypatch):
    monkeypatch.setenv("RANK", "not a number")
    assert RankInfo.from_env({}) == RankInfo(launcher="none")
    with pytest.raises(LaunchError, match="RANK 'not a number' is not a whole number"):
        RankInfo.from_env()


NOT_A_NUMBER = "is not a whole number (ASCII digits 0-9 only)"


@pytest.mark.parametrize(("env", "message"), [
    ({"LOCAL_RANK": "one"}, f"environment variable LOCAL_RANK 'one' {NOT_A_NUMBER}"),
    ({"WORLD_SIZE": "2.0"}, f"environment variable WORLD_SIZE '2.0' {NOT_A_NUMBER}"),
    ({"RANK": "4", "WORLD_SIZE": "4"}, "RANK=4 is outside WORLD_SIZE=4"),
    ({"RANK": "0", "LOCAL_RANK": "2", "WORLD_SIZE": "2"}, "LOCAL_RANK=2 is outside WORLD_SIZE=2"),
    ({"RANK": "-1", "WORLD_SIZE": "4"},
     "environment variable RANK '-1' is not a whole number (ASCII digits 0-9 only)"),
    ({"LOCAL_RANK": "-1", "WORLD_SIZE": "2"},
     "environment variable LOCAL_RANK '-1' is not a whole number (ASCII digits 0-9 only)"),
    ({"RANK": "0", "WORLD_SIZE": "0"}, "WORLD_SIZE=0 must be at least 1"),
    ({"RANK": "1"}, "the world size is ambiguous: RANK is set but WORLD_SIZE is not"),
    ({"WORLD_SIZE": "2"}, "the world size is ambiguous: WORLD_SIZE is set but RANK is not"),
    ({"LOCAL_RANK": "1"}, "LOCAL_RANK=1 is set but RANK and WORLD_SIZE are not"),
    ({"RANK": "0", "WORLD_SIZE": "\u00b2"},  # "²".isdigit() is True, int("²") raises
     "environment variable WORLD_SIZE '\u00b2' is not a whole number (ASCII digits 0-9 only)"),
    ({"RANK": "0", "WORLD_SIZE": "9" * 40},
     f"environment variable WORLD_SIZE '{'9' * 40}' is larger than 1048576"),
], ids=["word", "float", "rank-too-big", "local-rank-beyond-world", "negative-rank",
        "negative-local-rank", "empty-world", "rank-alone", "world-alone", "local-rank-alone",
        "superscript-two", "beyond-the-bound"])
def test_impossible_or_partial_torchrun_variables(env, message):
    # LOCAL_RANK is the device index: -1 (a common "not distributed" value) would reach
    # set_device(-1), a no-op in torch.cuda, so the rank would land on device 0.
    with pytest.raises(LaunchError) as caught:
        detect_rank(env)
    assert problem(caught.value) == message
    assert caught.value.exit_code == EXIT_INVALID_INPUT
    assert isinstance(caught.value, ValueError)  # what RankInfo.from_env raised before


# -- SLURM -------------------------------------------------------------------------------------

def test_two_srun_tasks_are_ranks_0_and_1_meeting_on_the_first_node():
    ranks = [detect_rank({**SRUN_TASK, "SLURM_PROCID": str(task), "SLURM_LOCALID": "0",
                          "SLURM_NODEID": str(task)}) for task in (0, 1)]
    assert [(r.rank, r.world_size, r.local_rank, r.local_world_size) for r in ranks] == [
        (0, 2, 0, 1), (1, 2, 0, 1)]
    # Lightning's port: 15000 + the last 4 digits of the job id
    assert {r.rendezvous for r in ranks} == {"gnode10:15505"}
    assert {r.launcher for r in ranks} == {"slurm"}
    assert all(r.spans_hosts for r in ranks)


def test_slurm_master_addr_and_port_win_and_tasks_per_node_give_the_local_world():
    info = detect_rank({**SRUN_TASK, "SLURM_PROCID": "3", "SLURM_LOCALID": "1",
                        "SLURM_NTASKS": "4", "SLURM_NODEID": "1",
                        "SLURM_TASKS_PER_NODE": "2(x2)", "MASTER_ADDR": "10.1.2.3",
                        "MASTER_PORT": "29400"})
    assert (info.rank, info.local_rank, info.world_size, info.local_world_size,
            info.rendezvous) == (3, 1, 4, 2, "10.1.2.3:29400")


def test_torchrun_under_srun_is_read_as_torchrun():
    env = {**SRUN_TASK, "SLURM_PROCID": "0", "RANK": "3", "WORLD_SIZE": "8",
           "TORCHELASTIC_RUN_ID": "job"}
    assert detect_rank(env).launcher == "torchrun"


@pytest.mark.parametrize(("env", "fragment"), [
    ({"SLURM_PROCID": "0"}, "SLURM_PROCID=0 is set but neither SLURM_NTASKS nor "
                            "SLURM_STEP_NUM_TASKS"),
    ({**SRUN_TASK, "SLURM_PROCID": "0", "SLURM_STEP_NUM_TASKS": "3"},
     "SLURM_NTASKS=2 but SLURM_STEP_NUM_TASKS=3"),
    ({**SRUN_TASK, "SLURM_PROCID": "0", "SLURM_STEP_ID": ""},
     "SLURM_NTASKS=2, but this process is not an srun task (no SLURM_STEP_ID): it would "
     "wait for 1 rank(s) that never start"),
    ({**SRUN_TASK, "SLURM_PROCID": "2"}, "SLURM_PROCID=2 is outside SLURM_NTASKS=2"),
    ({**SRUN_TASK, "SLURM_PROCID": "1", "SLURM_LOCALID": "1", "SLURM_NODEID": "1"},
     "SLURM_LOCALID=1 is outside the 1 task(s) SLURM places on this node"),
], ids=["no-task-count", "counts-differ", "batch-script", "procid-too-big", "localid-too-big"])
def test_ambiguous_slurm_worlds_are_refused(env, fragment):
    with pytest.raises(LaunchError) as caught:
        detect_rank(env)
    assert fragment in problem(caught.value)
    assert "srun" in (caught.value.problems[0].hint or "")


def test_a_malformed_slurm_node_list_is_a_launch_error_not_a_crash():
    with pytest.raises(LaunchError) as caught:
        detect_rank({**SRUN_TASK, "SLURM_PROCID": "0", "SLURM_NODELIST": "node[01-"})
    assert problem(caught.value) == ("cannot tell where the ranks meet: malformed host list "
                                     "'node[01-'")
    assert "MASTER_ADDR" in (caught.value.problems[0].hint or "")


def test_a_single_slurm_task_outside_srun_is_a_world_of_one():
    info = detect_rank({"SLURM_JOB_ID": "7", "SLURM_PROCID": "0", "SLURM_NTASKS": "1"})
    assert (info.rank, info.world_size, info.launcher) == (0, 1, "slurm")


@pytest.mark.parametrize(("hostlist", "hosts"), [
    ("node1", ["node1"]),
    ("gnode[10,20,25,37]", ["gnode10", "gnode20", "gnode25", "gnode37"]),
    ("node[001-003,07],gpu5", ["node001", "node002", "node003", "node07", "gpu5"]),
    ("a[1-2]b[8-9]", ["a1b8", "a1b9", "a2b8", "a2b9"]),
    ("n[9-11]-ib", ["n9-ib", "n10-ib", "n11-ib"]),
])
def test_slurm_host_lists_expand(hostlist, hosts):
    assert expand_hostlist(hostlist) == hosts
    assert first_host(hostlist) == hosts[0]


@pytest.mark.parametrize("hostlist", ["", "node[1-", "node[3-1]", "node[a-b]", "n]1", "n[]",
                                      "n1,x[2-"])
def test_malformed_host_lists_are_refused(hostlist):
    with pytest.raises(ValueError, match=r"host list|range"):
        expand_hostlist(hostlist)
    with pytest.raises(ValueError, match=r"host list|range"):
        first_host(hostlist)  # checked whole, though only the first host is read


def test_the_first_host_of_a_huge_host_list_is_read_without_expanding_it():
    # It used to be expanded in full: a MemoryError, exit 70 (issue 19).
    assert first_host("n[1-999999999]") == "n1"
    assert first_host("rack[07-99999]n[0005-99999999],gpu[1-9999999]") == "rack07n0005"
    info = detect_rank({**SRUN_TASK, "SLURM_PROCID": "0", "SLURM_NODELIST": "n[1-999999999]"})
    assert info.rendezvous == "n1:15505"
    with pytest.raises(ValueError, match="names 999999999 hosts, more than 1048576"):
        expand_hostlist("n[1-999999999]")


@given(prefix=st.from_regex(r"[a-z][a-z0-9-]{0,6}", fullmatch=True),
       start=st.integers(0, 500), count=st.integers(1, 20), width=st.integers(1, 4))
def test_a_padded_range_expands_to_every_number_in_order(prefix, start, count, width):
    first, last = str(start).zfill(width), str(start + count - 1).zfill(width)
    hosts = expand_hostlist(f"{prefix}[{first}-{last}]")
    assert len(hosts) == count
    numbers = [int(host[len(prefix):]) for host in hosts]
    assert numbers == list(range(start, start + count))


@pytest.mark.parametrize(("layout", "counts"), [
    ("4", [4]), ("2(x3),1", [2, 2, 2, 1]), ("1(x2)", [1, 1])])
def test_tasks_on_each_node(layout, counts):
    assert [tasks_on_node(layout, node) for node in range(len(counts) + 1)] == [*counts, None]


def test_a_huge_repeat_is_read_without_expanding_it():
    assert tasks_on_node("8(x999999999),1", 999999999) == 1


@pytest.mark.parametrize("layout", ["2(x", "a", "1,,2"])
def test_a_malformed_tasks_per_node_is_refused_not_ignored(layout):
    with pytest.raises(ValueError, match="not a tasks-per-node layout"):
        tasks_on_node(layout, 0)
    env = {**SRUN_TASK, "SLURM_PROCID": "0", "SLURM_NODEID": "0",
           "SLURM_TASKS_PER_NODE": layout}
    with pytest.raises(LaunchError) as caught:
        detect_rank(env)
    assert problem(caught.value).startswith(f"SLURM_TASKS_PER_NODE={layout!r}: not a ")


# -- SGLang-style arguments ----------------------------------------------------------------------

def test_arguments_without_environment_variables():
    info = detect_rank({}, LaunchArguments(dist_init_addr="10.0.0.1:5000", nnodes=2,
                                           node_rank=1))
    assert info == RankInfo(1, 0, 2, 1, "10.0.0.1:5000", "args")
    several = detect_rank({}, LaunchArguments("[fe80::1]:5000", nnodes=2, node_rank=1,
                                              nproc_per_node=4, local_rank=3))
    assert (several.rank, several.local_rank, several.world_size, several.rendezvous) == (
        7, 3, 8, "[fe80::1]:5000")


@pytest.mark.parametrize(("arguments", "fragment"), [
    (LaunchArguments(nnodes=2, node_rank=2), "--node-rank 2 is outside --nnodes 2"),
    (LaunchArguments(nproc_per_node=2, local_rank=2),
     "--local-rank 2 is outside --nproc-per-node 2"),
    (LaunchArguments(nnodes=0), "--nnodes must be a whole number >= 1, got 0"),
    (LaunchArguments(dist_init_addr="10.0.0.1"), "--dist-init-addr: '10.0.0.1' is not "
                                                 "HOST:PORT"),
    (LaunchArguments(dist_init_addr="host:70000"), "a port in 1-65535"),
    # Without a launcher's variables nothing else says which process this is.
    (LaunchArguments("10.0.0.1:5000", nnodes=2),
     "--nnodes 2 needs --node-rank: which one of the 2 is this process?"),
    (LaunchArguments("10.0.0.1:5000", nproc_per_node=4),
     "--nproc-per-node 4 needs --local-rank: which one of the 4 is this process?"),
])
def test_bad_arguments_are_refused(arguments, fragment):
    with pytest.raises(LaunchError) as caught:
        detect_rank({}, arguments)
    assert fragment in problem(caught.value)


def test_a_launcher_that_numbers_the_processes_needs_no_node_rank():
    env = {"RANK": "0", "WORLD_SIZE": "2", "LOCAL_RANK": "0"}
    info = detect_rank(env, LaunchArguments(nnodes=2))  # it restates what the launcher says
    assert (info.rank, info.world_size, info.launcher) == (0, 2, "args")


def test_master_addr_and_port_in_a_world_of_one_are_where_it_meets():
    # As torch's env:// reads them; before, they were silently ignored for a free port.
    env = {"MASTER_ADDR": "127.0.0.1", "MASTER_PORT": "29511"}
    assert detect_rank(env) == RankInfo(rendezvous="127.0.0.1:29511", launcher="none")
    assert detect_rank({"MASTER_ADDR": "127.0.0.1"}).rendezvous is None  # torch needs both
    with pytest.raises(LaunchError, match=re.escape("MASTER_PORT 'x' is not a whole number")):
        detect_rank({"MASTER_ADDR": "127.0.0.1", "MASTER_PORT": "x"})


def test_arguments_may_restate_the_launcher_but_not_contradict_it():
    env = {**SRUN_TASK, "SLURM_PROCID": "1", "SLURM_NODEID": "1"}
    same = detect_rank(env, LaunchArguments("10.0.0.1:5000", nnodes=2, node_rank=1))
    assert (same.rank, same.world_size, same.rendezvous) == (1, 2, "10.0.0.1:5000")
    with pytest.raises(LaunchError) as caught:
        detect_rank(env, LaunchArguments(nnodes=4, node_rank=1))
    assert problem(caught.value) == (
        "the world size is ambiguous: the arguments make this rank 1 of 4, but "
        "SLURM_PROCID/SLURM_NTASKS make it rank 1 of 2")
    torchrun = {"RANK": "0", "WORLD_SIZE": "1", "MASTER_ADDR": "a", "MASTER_PORT": "1",
                "TORCHELASTIC_RUN_ID": "x"}
    with pytest.raises(LaunchError, match=re.escape("differs from MASTER_ADDR:MASTER_PORT a:1")):
        detect_rank(torchrun, LaunchArguments("b:2"))


# -- RankInfo ----------------------------------------------------------------------------------

@pytest.mark.parametrize(("fields", "fragment"), [
    ({"rank": 2, "world_size": 2}, "rank 2 is outside a world of 2"),
    ({"world_size": 0}, "the world size must be at least 1"),
    ({"rank": -1}, "rank must be a whole number >= 0"),
    ({"local_rank": 2, "world_size": 4, "local_world_size": 2}, "local rank 2 of 2"),
    ({"rendezvous": "nowhere"}, "rendezvous: 'nowhere' is not HOST:PORT"),
])
def test_rank_info_refuses_what_cannot_be(fields, fragment):
    with pytest.raises(LaunchError, match=re.escape(fragment)):
        RankInfo(**fields)


def test_spans_hosts_only_when_some_rank_may_be_elsewhere():
    assert not RankInfo().spans_hosts
    assert not RankInfo(0, 0, 4, local_world_size=4).spans_hosts
    assert RankInfo(0, 0, 4, local_world_size=2).spans_hosts
    assert RankInfo(0, 0, 4).spans_hosts  # the launcher does not say: assume it may


def test_every_option_the_launch_messages_name_is_a_field_of_the_launch_arguments():
    # The messages spell the options out, to read as the user typed them; this holds the
    # spelling to the fields, each of which is the `initorch run` option of its name
    # (srun's own options aside).
    texts = [node.value for node in ast.walk(ast.parse(inspect.getsource(launchers)))
             if isinstance(node, ast.Constant) and isinstance(node.value, str)]
    named = {option for text in texts if "srun" not in text
             for option in re.findall(r"(?<![\w-])--[a-z][a-z-]*", text)}
    assert named == {launchers.option_name(spec)
                     for spec in dataclasses.fields(LaunchArguments)}
