"""The server overlay's steps at plan time: group layouts, previews, refusals,
the memory balance rule and its diagnosis (no torch needed)."""

from __future__ import annotations

import json
import os
import re
from pathlib import Path

import pytest
from hypothesis import given
from hypothesis import strategies as st

from initorch import load_plan
from initorch.errors import StepError
from initorch.reporting.diagnosis import DiagnosisCatalog
from initorch.reporting.render import plan_text
from initorch.resolution.saved import save_plan
from initorch.steps.diagnoses import register_diagnoses
from initorch.steps.memory_baseline import MemoryBaseline
from initorch.steps.model_parallel import ParallelLayout

SERVER_ORDER = ("bind_cpu_threads", "set_device", "init_torch_distributed",
                "init_model_parallel", "warmup_collectives", "memory_baseline")


def test_layout_matches_sglangs_documented_example() -> None:
    # parallel_state.py initialize_model_parallel docstring: 8 GPUs, TP=2, PP=4.
    groups = ParallelLayout(tp_size=2, pp_size=4).groups()
    assert groups["tp"] == ((0, 1), (2, 3), (4, 5), (6, 7))
    assert groups["pp"] == ((0, 2, 4, 6), (1, 3, 5, 7))
    assert "ep" not in groups


def test_expert_groups_split_each_tensor_group() -> None:
    groups = ParallelLayout(tp_size=4, pp_size=2, ep_size=2).groups()
    assert groups["ep"] == ((0, 2), (1, 3), (4, 6), (5, 7))
    assert ParallelLayout(tp_size=4, ep_size=4).groups()["ep"] == ((0, 1, 2, 3),)


@given(tp=st.integers(1, 8), pp=st.integers(1, 8), ep_div=st.integers(1, 8))
def test_every_rank_is_in_exactly_one_group_of_each_kind(tp: int, pp: int, ep_div: int) -> None:
    ep = ep_div if tp % ep_div == 0 else 1
    layout = ParallelLayout(tp, pp, ep)
    for name, rank_lists in layout.groups().items():
        members = sorted(r for ranks in rank_lists for r in ranks)
        assert members == list(range(layout.world_size)), name
        size = {"tp": tp, "pp": pp, "ep": ep}[name]
        assert {len(ranks) for ranks in rank_lists} == {size}


def test_layout_problems_are_the_sizes_that_do_not_fit_together() -> None:
    problems = ParallelLayout(4, 1, 3).problems()
    assert problems and re.search(r"parallel.ep_size \(3\) must divide parallel.tp_size \(4\)",
                                  problems[0][1])
    assert ParallelLayout(4, 2, 2).problems() == []


@pytest.mark.parametrize("device", ["cpu", "cuda", "npu", "musa", "rocm", "xpu"])
def test_server_overlay_orders_the_start_up_as_sglang(device: str) -> None:
    order = load_plan(["server"], device=device, settings={"parallel.pre_warm": True}).order
    assert [s for s in order if s in SERVER_ORDER] == list(SERVER_ORDER)


def test_collectives_are_not_pre_warmed_unless_asked_as_in_sglang() -> None:
    # SGLang 0.5.23 --pre-warm-nccl defaults to False (arg_groups/fields/exec_.py:744-747).
    order = load_plan(["server"], device="cuda").order
    assert "warmup_collectives" not in order
    assert [s for s in order if s in SERVER_ORDER] == [
        s for s in SERVER_ORDER if s != "warmup_collectives"]


def plan_cli(run_cli, monkeypatch: pytest.MonkeyPatch, env: dict[str, str], *argv: str):
    for name in ("WORLD_SIZE", "LOCAL_WORLD_SIZE", "RANK", "LOCAL_RANK"):
        monkeypatch.delenv(name, raising=False)
    for name, value in env.items():
        monkeypatch.setenv(name, value)
    return run_cli("plan", *argv)


def test_plan_shows_each_local_ranks_cores_under_torchrun(run_cli, monkeypatch) -> None:
    code, out, err = plan_cli(run_cli, monkeypatch, {"LOCAL_WORLD_SIZE": "2", "WORLD_SIZE": "2"},
                              "-p", "cpu", "-p", "server", "--set", "parallel.tp_size=2")
    assert code == 0, err
    allowed = sorted(os.sched_getaffinity(0))
    assert "2 local rank(s) (LOCAL_WORLD_SIZE)" in out
    cores = re.findall(r"local rank (\d): cpus (\S+) \(node \d+, (\d+) core", out)
    assert [rank for rank, _, _ in cores] == ["0", "1"]
    if len(allowed) >= 2:  # this machine: 2 cores, so one each
        assert cores[0][1] != cores[1][1]
    assert "world of 2 rank(s) = tp 2 x pp 1 (matches WORLD_SIZE=2)" in out
    assert "tp groups: [0, 1]" in out


def test_plan_outside_torchrun_describes_one_process(run_cli, monkeypatch) -> None:
    code, out, _ = plan_cli(run_cli, monkeypatch, {}, "-p", "npu", "-p", "server",
                            "--set", "cpu_binding.policy=split")  # npu's own is none
    assert code == 0
    assert "1 local rank(s) (one process; export LOCAL_WORLD_SIZE=N" in out
    assert "WORLD_SIZE not set here: checked at run time" in out
    assert "query mem_get_info: free bytes of torch.npu.mem_get_info" in out


def test_plan_refuses_sizes_that_do_not_match_world_size(run_cli, monkeypatch,
                                                           write_profile) -> None:
    profile = write_profile("four.yaml", """\
        description: tp 2 x pp 2
        config:
          parallel:
            tp_size: 2
            pp_size: 2
        """)
    code, _, err = plan_cli(run_cli, monkeypatch, {"WORLD_SIZE": "2", "LOCAL_WORLD_SIZE": "2"},
                            "-p", "cpu", "-p", "server", "-p", str(profile))
    assert code == 2
    assert re.search(r"four\.yaml:4:\d+: step 'init_model_parallel': WORLD_SIZE=2, but "
                     r"parallel\.tp_size \(2\) x parallel\.pp_size \(2\) = 4", err)
    assert "start 4 ranks" in err


def test_plan_refuses_each_bad_size_by_its_declaration(run_cli, monkeypatch) -> None:
    code, _, err = plan_cli(run_cli, monkeypatch, {}, "-p", "cpu", "-p", "server",
                            "--set", "parallel.tp_size=0", "--set", "cpu_binding.threads=-1",
                            "--set", "memory.balance_threshold=1.5")
    assert code == 2
    assert "parallel.tp_size must be >= 1, got 0" in err
    assert "cpu_binding.threads must be >= 0, got -1" in err
    assert "memory.balance_threshold must be <= 1" in err


def test_plan_refuses_what_only_the_previews_can_tell(run_cli, monkeypatch) -> None:
    code, _, err = plan_cli(run_cli, monkeypatch, {"LOCAL_WORLD_SIZE": "two"},
                            "-p", "cpu", "-p", "server",
                            "--set", "parallel.tp_size=4", "--set", "parallel.ep_size=3")
    assert code == 2
    assert "2 problem(s) found by step previews" in err
    assert "parallel.ep_size (3) must divide parallel.tp_size (4)" in err
    assert "LOCAL_WORLD_SIZE" in err


def test_plan_refuses_an_unknown_memory_query_by_its_table(run_cli, monkeypatch) -> None:
    code, _, err = plan_cli(run_cli, monkeypatch, {}, "-p", "cpu", "-p", "server",
                            "--set", "memory.query=free")
    assert code == 2
    assert ("memory.query must be one of host, mem_get_info, total_minus_allocated, "
            "mps_working_set, got 'free'") in err


def test_plan_json_carries_previews_and_a_machine_independent_fingerprint(
        run_cli, monkeypatch) -> None:
    _, one, _ = plan_cli(run_cli, monkeypatch, {"LOCAL_WORLD_SIZE": "1"},
                         "-p", "cuda", "-p", "server", "--json")
    _, two, _ = plan_cli(run_cli, monkeypatch, {"LOCAL_WORLD_SIZE": "2", "WORLD_SIZE": "2"},
                         "-p", "cuda", "-p", "server", "--set", "parallel.tp_size=2", "--json")
    first, second = json.loads(one), json.loads(two)
    steps = {s["name"]: s for s in first["steps"]}
    assert steps["bind_cpu_threads"]["preview"][0].startswith("1 local rank(s)")
    assert steps["set_device"]["preview"] == []
    _, again, _ = plan_cli(run_cli, monkeypatch, {"LOCAL_WORLD_SIZE": "4"},
                           "-p", "cuda", "-p", "server", "--json")
    assert json.loads(again)["fingerprint"] == first["fingerprint"]
    assert second["fingerprint"] != first["fingerprint"]  # a setting changed


def baseline(*gib: float, rank: int = 0) -> MemoryBaseline:
    return MemoryBaseline("host", rank, tuple(int(g * (1 << 30)) for g in gib))


def test_balance_rule_is_sglangs_on_the_best_rank() -> None:
    assert baseline(10, 9.5).balanced(0.9)
    assert baseline(10, 9).balanced(0.9)
    assert not baseline(10, 8.9).balanced(0.9)
    assert not baseline(8.9, 10, 10, rank=1).balanced(0.9)  # the same verdict on every rank
    assert baseline(4).balanced(0.9)


def test_pool_budget_charges_weights_and_slack() -> None:
    gib = 1 << 30
    # SGLang: rest = available after weights - baseline x (1 - mem_fraction_static)
    assert baseline(10, 12).pool_budget(0.8, used_bytes=3 * gib) == 5 * gib
    assert baseline(1).pool_budget(0.5, used_bytes=2 * gib) == 0


def test_unbalanced_message_names_the_short_rank_and_is_diagnosed() -> None:
    message = baseline(11.0, 2.75).unbalanced_message(0.9)
    assert message.startswith("The memory capacity is unbalanced. Some GPUs may be occupied "
                              "by other processes.")
    assert "rank 1 has 25% of rank 0's" in message
    book = DiagnosisCatalog()
    register_diagnoses(book)
    finding = book.match(StepError(message))
    assert finding is not None and finding.diagnosis.id == "tp-memory-unbalanced"
    assert "memory.balance_threshold" in finding.diagnosis.remedy


def test_profiles_name_a_memory_query_for_every_device() -> None:
    from initorch.steps.memory_baseline import QUERY

    for device in ("cpu", "cuda", "rocm", "npu", "musa", "xpu", "mps"):
        query = load_plan([device]).config()["memory.query"]
        assert query in QUERY.choices, device


def test_server_profile_is_a_layer_with_no_device(tmp_path: Path) -> None:
    from initorch import Registry

    registry = Registry.with_plugins()
    assert registry.profiles.load("server").device_type is None


def test_a_saved_plan_keeps_what_the_previews_said(tmp_path: Path) -> None:
    from initorch import Registry, load_saved_plan

    registry = Registry.with_plugins()
    plan = load_plan(["cpu", "server"], registry=registry)
    save_plan(plan, tmp_path / "plan.json")
    loaded = load_saved_plan(tmp_path / "plan.json", registry)
    assert loaded.fingerprint == plan.fingerprint
    assert loaded.step("bind_cpu_threads").notes == plan.step("bind_cpu_threads").notes
    assert "local rank 0: cpus" in plan_text(loaded)


@pytest.mark.parametrize(("device", "policy"), [
    ("cpu", "split"), ("cuda", "split"), ("xpu", "split"),
    ("npu", "none"), ("musa", "none"), ("rocm", "none")])
def test_threads_are_bound_only_where_sglang_binds_them(device: str, policy: str) -> None:
    # SGLang 0.5.23 bootstrap.py:75-87 (device cpu), numa at spawn on CUDA/XPU only.
    config = load_plan(["server"], device=device).config()
    assert config["cpu_binding.policy"] == policy


def test_a_bind_entry_outside_the_allowed_cpus_or_the_rank_count_is_refused() -> None:
    from initorch.steps.cpu_binding import sglang_thread_bind

    assert sglang_thread_bind({}, 0, [0, 1]) is None
    assert sglang_thread_bind({"SGLANG_CPU_OMP_THREADS_BIND": "all"}, 0, [0, 1]) is None
    with pytest.raises(StepError, match="out of range for the 2"):
        sglang_thread_bind({"SGLANG_CPU_OMP_THREADS_BIND": "0|1"}, 2, [0, 1])
    with pytest.raises(StepError, match="names CPUs this process may not use"):
        sglang_thread_bind({"SGLANG_CPU_OMP_THREADS_BIND": "0|7"}, 1, [0, 1])


@pytest.mark.parametrize("device", ["cpu", "cuda", "npu"])
def test_the_host_pool_comes_after_the_memory_baseline_as_in_sglang(device: str) -> None:
    order = load_plan(["server"], device=device).order
    assert order.index("memory_baseline") < order.index("alloc_host_mem_pool")


@pytest.mark.parametrize("device", ["cpu", "cuda", "npu", "musa", "rocm", "xpu"])
def test_the_host_pool_is_built_before_its_store_as_in_sglang(device: str) -> None:
    # SGLang 0.5.23: the KV cache, host pool included, is built first
    # (managers/scheduler.py:568-575), then the store over it (cache_controller.py:614-617).
    # Without the edge the store came a wave before the pool, and the parallel executor
    # set it up before the pool existed (issue 26).
    plan = load_plan(["server"], device=device)
    chain = plan.explain("alloc_host_mem_pool", "init_mooncake_store")
    assert [(edge.source, edge.target) for edge in chain] == [
        ("alloc_host_mem_pool", "init_mooncake_store")]
    assert "managers/cache_controller.py:614-617" in str(chain[0].reason)
    wave = {p.name: p.wave for p in plan.steps}
    assert wave["alloc_host_mem_pool"] < wave["init_mooncake_store"]


class CudaLike:
    """The few torch.cuda calls the query makes, with an integrated or a discrete GPU."""

    def __init__(self, integrated: bool) -> None:
        self.integrated = integrated

    def empty_cache(self) -> None:
        return None

    def get_device_properties(self, index: int) -> object:
        return type("Props", (), {"is_integrated": self.integrated})()

    def mem_get_info(self, index: int | None = None) -> tuple[int, int]:
        return 123, 456


@pytest.mark.parametrize(("device", "integrated", "host"), [
    ("cuda", True, True), ("cuda", False, False), ("rocm", True, True), ("npu", True, False)])
def test_an_integrated_gpu_counts_host_memory_as_sglang(device: str, integrated: bool,
                                                         host: bool) -> None:
    # SGLang 0.5.23 utils/common.py:448-456 (the cuda branch of get_available_gpu_memory).
    from types import SimpleNamespace

    from initorch.steps.memory_baseline import query_mem_get_info
    from initorch.steps.topology import host_available_bytes

    ctx = SimpleNamespace(device=SimpleNamespace(type=device))
    found = query_mem_get_info(ctx, CudaLike(integrated), 0)  # type: ignore[arg-type]
    if host:
        assert abs(found - host_available_bytes()) < 256 * 2**20
    else:
        assert found == 123
