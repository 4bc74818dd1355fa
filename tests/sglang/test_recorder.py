"""Order and thread checks of verify mode, on the sglang overlay's real plan."""

from __future__ import annotations

import threading
from collections.abc import Callable
from pathlib import Path

import pytest

from initorch.kit import MOONCAKE_CALLS, OrderViolation, Recorder, build_report, call_site
from initorch_sglang.engine import IDLE
from initorch_sglang.verify import new_recorder
from tests.sglang.helpers import sglang_plan

ENGINE_INIT = next(call for call in MOONCAKE_CALLS if call.method == "initialize")
# A device whose context is per thread and whose Mooncake transport reads it (Ascend's).
PER_THREAD = {"device.context_per_thread": True, "device.mooncake_protocol": "ascend"}

ORDER = ["bind_cpu_threads", "set_device", "init_shared_mooncake_transfer_engine",
         "init_torch_distributed", "init_model_parallel", "set_device", "memory_baseline",
         "sglang_load_model", "sglang_alloc_kv_pool", "alloc_host_mem_pool", "init_mooncake_store",
         "register_mem_pool_host"]


def record(recorder: Recorder, steps: list[str]) -> None:
    for step in steps:
        with recorder.observe(step, binds="cpu:0" if step == "set_device" else None):
            pass


def on_thread(name: str, work: Callable[[], None], *, daemon: bool = False) -> list[BaseException]:
    """Run ``work`` on a new thread; the errors it raised."""
    errors: list[BaseException] = []

    def run() -> None:
        try:
            work()
        except BaseException as error:  # handed back to the test
            errors.append(error)

    thread = threading.Thread(target=run, name=name, daemon=daemon)
    thread.start()
    thread.join()
    return errors


def test_sglangs_own_order_passes() -> None:
    recorder = new_recorder(sglang_plan())
    record(recorder, ORDER)
    assert recorder.violations == []
    assert [call.index for call in recorder.calls if call.step == "set_device"] == [0, 1]


def test_engine_after_the_process_group_is_stopped_with_the_profiles_reason() -> None:
    recorder = new_recorder(sglang_plan())
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
    recorder = new_recorder(sglang_plan(), stop_on_violation=False)
    record(recorder, ["set_device", "init_torch_distributed",
                      "init_shared_mooncake_transfer_engine", "init_model_parallel"])
    assert len(recorder.violations) == 1
    assert recorder.calls[-1].step == "init_model_parallel"


def test_a_step_that_starts_inside_its_predecessor_is_a_violation() -> None:
    recorder = new_recorder(sglang_plan())
    with recorder.observe("sglang_load_model"), pytest.raises(OrderViolation) as caught:
        record(recorder, ["sglang_alloc_kv_pool"])
    assert "sglang_load_model was still running when it started" in str(caught.value)


def test_a_device_bound_call_on_a_thread_without_the_device_is_a_violation() -> None:
    recorder = new_recorder(sglang_plan(**PER_THREAD))
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
    recorder = new_recorder(sglang_plan("sglang-drive"))
    record(recorder, ["set_device", "sglang_load_model", "init_shared_mooncake_transfer_engine"])
    assert recorder.violations == []


def test_on_a_host_device_a_helper_thread_is_no_hazard() -> None:
    recorder = new_recorder(sglang_plan())  # cpu: device.context_per_thread is false
    record(recorder, ["bind_cpu_threads", "set_device"])
    errors = on_thread("deadline-helper",
                       lambda: record(recorder, ["init_shared_mooncake_transfer_engine"]))
    assert errors == [] and recorder.violations == []


def test_set_device_binds_the_device_it_was_given_to_its_thread_only() -> None:
    recorder = new_recorder(sglang_plan(**PER_THREAD))
    record(recorder, ["bind_cpu_threads", "set_device", "init_shared_mooncake_transfer_engine"])
    assert [call.device for call in recorder.calls] == [None, "cpu:0", "cpu:0"]
    main = threading.main_thread().ident
    assert recorder.bound == {main: ("MainThread", "cpu:0")}


def vendor_call(recorder: Recorder) -> None:
    with recorder.observe_vendor(ENGINE_INIT, call_site(Path(__file__).parent)) as made:
        made.returned(0)


def test_a_vendor_call_on_a_thread_without_the_device_names_the_call_the_thread_and_the_site(
        ) -> None:
    recorder = new_recorder(sglang_plan(**PER_THREAD), label="SGLang 0.5.23")
    record(recorder, ["bind_cpu_threads", "set_device"])
    errors = on_thread("Thread-1 (_target)", lambda: vendor_call(recorder), daemon=True)
    assert len(errors) == 1 and isinstance(errors[0], OrderViolation)
    message = str(errors[0])
    assert message.startswith("SGLang 0.5.23 called Mooncake TransferEngine.initialize on "
                              "daemon thread 'Thread-1 (_target)', started in ")
    assert "where set_device never ran (it ran on MainThread (cpu:0))" in message
    assert "the call is made at test_recorder.py:" in message  # the innermost frame here
    assert "aclrtGetDevice, 107002 without a context" in message  # the vendor's reason
    record_ = recorder.vendor_calls[0]
    assert (record_.device, record_.daemon, record_.error) == (None, True, errors[0])
    assert record_.to_dict()["thread_entry"].startswith("on_thread.<locals>.run (test_recorder.py:")


def test_a_vendor_call_where_set_device_ran_is_recorded_with_that_device() -> None:
    recorder = new_recorder(sglang_plan(**PER_THREAD))

    def bound_then_call() -> None:
        record(recorder, ["set_device"])
        vendor_call(recorder)

    assert on_thread("bound-helper", bound_then_call) == []
    assert recorder.violations == []
    made = recorder.vendor_calls[0].to_dict()
    assert (made["device"], made["thread"], made["returned"]) == ("cpu:0", "bound-helper", 0)


def test_warn_mode_records_the_unbound_vendor_call_and_lets_it_run() -> None:
    recorder = new_recorder(sglang_plan(**PER_THREAD), stop_on_violation=False)
    record(recorder, ["set_device"])
    assert on_thread("helper", lambda: vendor_call(recorder)) == []
    assert len(recorder.violations) == 1 and recorder.vendor_calls[0].result == 0


def test_a_call_that_made_none_of_its_vendor_calls_did_nothing() -> None:
    recorder = new_recorder(sglang_plan(device="npu"))
    record(recorder, ["bind_cpu_threads", "set_device",  # _bind_threads_if_cpu off the CPU
                      "init_shared_mooncake_transfer_engine"])
    with recorder.observe("init_mooncake_store"):
        vendor_call(recorder)  # made while the store's call runs: the store's
    outcomes = build_report(recorder, mode="verify", rank=0, started_at="now", idle=IDLE).outcomes
    engine = outcomes["init_shared_mooncake_transfer_engine"]
    assert (engine.status, engine.reason) == (
        "skipped", "called by SGLang, did nothing: it made no Mooncake "
                   "TransferEngine.initialize or Mooncake TransferEngine.initialize_ext call")
    assert outcomes["bind_cpu_threads"].reason.startswith(
        "called by SGLang, did nothing: SGLang binds threads on device cpu only")
    assert outcomes["init_mooncake_store"].status == "succeeded"
    assert outcomes["set_device"].status == "succeeded"


def test_on_the_cpu_binding_threads_did_something_whatever_it_returned() -> None:
    recorder = new_recorder(sglang_plan())
    with recorder.observe("bind_cpu_threads") as bind:
        bind.result = None  # 0.5.17's ModelRunner.init_threads_binding binds, returns None
    outcomes = build_report(recorder, mode="verify", rank=0, started_at="now", idle=IDLE).outcomes
    assert outcomes["bind_cpu_threads"].status == "succeeded"


def test_an_unbound_vendor_call_over_a_transport_that_reads_no_device_is_no_violation() -> None:
    # MUSA: the context is per thread, but Mooncake's tcp and musa transports install
    # without asking the thread for a device (initorch.kit.mooncake): record, never refuse.
    recorder = new_recorder(sglang_plan(device="musa"))
    assert recorder.per_thread
    record(recorder, ["set_device"])
    assert on_thread("helper", lambda: vendor_call(recorder), daemon=True) == []
    assert recorder.violations == []
    made = recorder.vendor_calls[0]
    assert (made.device, made.daemon, made.result) == (None, True, 0)
