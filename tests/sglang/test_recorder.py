"""Order and thread checks of verify mode, on the sglang overlay's real plan."""

from __future__ import annotations

import threading

import pytest

from initorch_sglang.recorder import OrderViolation, Recorder
from tests.sglang.helpers import sglang_plan

ORDER = ["bind_cpu_threads", "set_device", "init_shared_mooncake_transfer_engine",
         "init_torch_distributed", "init_model_parallel", "set_device", "memory_baseline",
         "sglang_load_model", "sglang_alloc_kv_pool", "alloc_host_mem_pool", "init_mooncake_store",
         "register_mem_pool_host"]


def record(recorder: Recorder, steps: list[str]) -> None:
    for step in steps:
        with recorder.observe(step):
            pass


def test_sglangs_own_order_passes() -> None:
    recorder = Recorder(sglang_plan())
    record(recorder, ORDER)
    assert recorder.violations == []
    assert [call.index for call in recorder.calls if call.step == "set_device"] == [0, 1]


def test_engine_after_the_process_group_is_stopped_with_the_profiles_reason() -> None:
    recorder = Recorder(sglang_plan())
    record(recorder, ["bind_cpu_threads", "set_device", "init_torch_distributed"])
    with pytest.raises(OrderViolation) as caught:
        record(recorder, ["init_shared_mooncake_transfer_engine"])
    message = str(caught.value)
    assert message.startswith("SGLang called init_shared_mooncake_transfer_engine but "
                              "init_torch_distributed had already run")
    assert "then _init_parallel_groups (init_distributed_environment)" in message
    assert [(e.source, e.target) for e in caught.value.edges] == [
        ("init_shared_mooncake_transfer_engine", "init_torch_distributed")]
    assert recorder.calls[-1].error is caught.value


def test_warn_mode_keeps_the_violation_and_goes_on() -> None:
    recorder = Recorder(sglang_plan(), stop_on_violation=False)
    record(recorder, ["set_device", "init_torch_distributed",
                      "init_shared_mooncake_transfer_engine", "init_model_parallel"])
    assert len(recorder.violations) == 1
    assert recorder.calls[-1].step == "init_model_parallel"


def test_a_step_that_starts_inside_its_predecessor_is_a_violation() -> None:
    recorder = Recorder(sglang_plan())
    with recorder.observe("sglang_load_model"), pytest.raises(OrderViolation) as caught:
        record(recorder, ["sglang_alloc_kv_pool"])
    assert "sglang_load_model was still running when it started" in str(caught.value)


def test_a_device_bound_call_on_a_thread_without_the_device_is_a_violation() -> None:
    recorder = Recorder(sglang_plan())
    record(recorder, ["bind_cpu_threads", "set_device"])
    errors: list[BaseException] = []

    def helper() -> None:  # SGLang's run_with_deadline moves engine init to a thread
        try:
            record(recorder, ["init_shared_mooncake_transfer_engine"])
        except OrderViolation as error:
            errors.append(error)

    thread = threading.Thread(target=helper, name="deadline-helper")
    thread.start()
    thread.join()
    assert len(errors) == 1
    assert "on thread 'deadline-helper', where set_device never ran" in str(errors[0])


def test_calls_outside_the_plan_are_recorded_not_checked() -> None:
    recorder = Recorder(sglang_plan("sglang-drive"))
    record(recorder, ["set_device", "sglang_load_model", "init_shared_mooncake_transfer_engine"])
    assert recorder.violations == []
