"""Drive mode's pieces that need no running SGLang: the core split as SGLang indexes it,
the deadline helper's thread binding, the profile environment kept for SGLang's lifetime,
and the CUDA warm-ups it refuses."""

from __future__ import annotations

import os
import threading
from collections.abc import Callable, Iterator
from types import SimpleNamespace
from typing import Any

import pytest

from initorch_sglang import drive
from initorch_sglang.drive import DriveError, bind_deadline_thread, indexed_split
from tests.sglang.helpers import sglang_plan


def test_the_split_puts_each_local_ranks_cores_at_its_gpu_id() -> None:
    assert indexed_split(2, [0, 1]) == "0|1"
    # --base-gpu-id 2 --gpu-id-step 2: local ranks 0 and 1 are gpu_id 2 and 4
    # (compute_local_gpu_id); SGLang reads entry gpu_id (numa_utils.init_threads_binding).
    groups = indexed_split(2, [0, 1, 2, 3], base_gpu_id=2, gpu_id_step=2).split("|")
    shares = indexed_split(2, [0, 1, 2, 3]).split("|")  # initorch's split, unindexed
    assert len(groups) == 5
    assert (groups[2], groups[4]) == (shares[0], shares[1]) and shares[0] != shares[1]
    assert groups[0] == groups[1] == groups[3] == "0-3"  # no local rank: every core


@pytest.fixture
def drive_run() -> Iterator[list[str]]:
    """Drive mode's state while its ``set_device`` step has bound the device."""
    bound: list[str] = []
    drive._Current.context = SimpleNamespace()  # type: ignore[assignment]
    drive._Current.binding = lambda: bound.append(threading.current_thread().name)
    yield bound
    drive._Current.context, drive._Current.binding = None, None


def deadline_helper(fn: Callable[[], Any], *, timeout_s: float, what: str) -> Any:
    """SGLang's run_with_deadline, in shape: ``fn`` on a new daemon thread, joined with a
    timeout (srt/utils/common.py:3755-3775)."""
    result: list[Any] = []
    thread = threading.Thread(target=lambda: result.append(fn()), daemon=True,
                              name="deadline")
    thread.start()
    thread.join(timeout_s)
    return result[0]


def test_drive_binds_the_deadline_thread_before_the_engine_init(drive_run: list[str]) -> None:
    def engine_init() -> str:
        assert drive_run == ["deadline"]  # bound on this thread, before the work
        return threading.current_thread().name

    assert bind_deadline_thread(deadline_helper, engine_init, timeout_s=5,
                                what="init") == "deadline"


def test_outside_drive_the_deadline_helper_is_sglangs_own() -> None:
    calls: list[str] = []
    assert bind_deadline_thread(deadline_helper, lambda: calls.append("ran") or 7,
                                timeout_s=5, what="init") == 7
    assert calls == ["ran"]


def test_the_profiles_environment_outlives_the_run(monkeypatch: pytest.MonkeyPatch) -> None:
    plan = sglang_plan(device="npu")
    monkeypatch.delenv("MOONCAKE_PROTOCOL", raising=False)
    drive._keep_profile_environment(plan)
    assert os.environ.pop("MOONCAKE_PROTOCOL") == "ascend"  # the store reads it later


def test_the_process_environment_wins_over_the_profile(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("MOONCAKE_PROTOCOL", "tcp")
    drive._keep_profile_environment(sglang_plan(device="npu"))
    assert os.environ["MOONCAKE_PROTOCOL"] == "tcp"


def sglang_state(**flags: Any) -> tuple[Any, Any]:
    exec_args = SimpleNamespace(
        comm=SimpleNamespace(pre_warm_nccl=flags.get("pre_warm_nccl", False)),
        moe=SimpleNamespace(enable_eplb=flags.get("enable_eplb", False),
                            elastic_ep_backend=flags.get("elastic_ep_backend")))
    parallel = SimpleNamespace(dp_size=1, tp_size=2, enable_tp_lm_head_all_to_all=flags.get(
        "enable_tp_lm_head_all_to_all", False))
    return exec_args, parallel


@pytest.mark.parametrize(("flag", "option"), [
    ("pre_warm_nccl", "--pre-warm-nccl"),
    ("enable_tp_lm_head_all_to_all", "--enable-tp-lm-head-all-to-all"),
    ("enable_eplb", "--enable-eplb"),
])
def test_drive_refuses_sglangs_cuda_warm_ups_in_one_line(flag: str, option: str) -> None:
    with pytest.raises(DriveError) as refused:
        drive._refuse_unmodelled("cuda", *sglang_state(**{flag: True}))
    assert option in str(refused.value) and "\n" not in str(refused.value)
    assert "bootstrap.py:" in str(refused.value)


def test_drive_runs_launches_without_cuda_warm_ups() -> None:
    drive._refuse_unmodelled("cuda", *sglang_state())
    drive._refuse_unmodelled("cpu", *sglang_state(enable_tp_lm_head_all_to_all=True))


def test_drive_counts_its_own_steps_and_the_runs_bookkeeping_as_initorchs_cost() -> None:
    from initorch.kit import COST

    outcomes = {name: SimpleNamespace(started=started, duration=duration)
                for name, started, duration in (("rendezvous", 1.0, 0.25),
                                                ("init_torch_distributed", 1.25, 9.0),
                                                ("warmup_collectives", None, 0.0))}
    before = dict(COST.phases)
    drive._account_run(SimpleNamespace(outcomes=outcomes), 9.5)
    added = {name: round(COST.phases[name] - before.get(name, 0.0), 6) for name in COST.phases
             if COST.phases[name] != before.get(name)}
    # SGLang's own groups are not initorch's; the run's 0.25 s beyond its steps is
    assert added == {"drive rendezvous": 0.25, "drive run": 0.25}
