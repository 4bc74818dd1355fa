"""Regressions for the two seed bugs, on the simulated Ascend and MUSA stacks.

The simulations (tests/simulated) keep a per-thread device context and fail
exactly as the real stacks do.  For each bug: the old behaviour reproduces the
failure and the diagnosis names it; the shipped profile passes.
"""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest

from tests.conftest import initorch_command, run_python

pytestmark = pytest.mark.e2e

OLD_ORDER = """
import json, threading
from initorch import Registry, load_plan
from initorch.execution.context import RankInfo, RunState, RunStepContext
from initorch.errors import StepError

registry = Registry.with_plugins()
plan = load_plan(["npu"], registry=registry)
state = RunState(plan, RankInfo())

def call(name):
    planned = plan.step(name)
    output = planned.step.action(RunStepContext(state, name, __import__("structlog").get_logger()))
    state.record_output(name, output, binds_device=planned.step.binds_device)
    return output

def engine_init():
    try:
        call("init_shared_mooncake_transfer_engine")
    except StepError as exc:
        finding = registry.diagnoses.match(exc)
        return {"error": str(exc), "native_log": exc.native_log,
                "diagnosis": finding.diagnosis.id if finding else None,
                "vendor_code": finding.vendor_code if finding else None}
    return {"error": None}

call("import_backend")
results = {}
if "__MODE__" == "before_set_device":
    # The old hand-written order: the engine before set_device on this thread.
    results = engine_init()
else:
    # set_device on the main thread, engine init on a helper thread (to add a deadline).
    call("set_device")
    box = {}
    helper = threading.Thread(target=lambda: box.update(engine_init()))
    helper.start(); helper.join()
    results = box
print(json.dumps(results))
"""


# What each simulated Mooncake build logs, and which diagnosis that gets.
NO_CONTEXT = {
    "ascend_direct": ("Call acl failed, detail: ", "ascend-acl-call-failed", None),
    "hccl": ("HcclTransport: aclrtGetDevice failed, ret: 107002", "ascend-context-null",
             "107002"),
}


@pytest.mark.parametrize("build", ["ascend_direct", "hccl"])
@pytest.mark.parametrize("mode", ["before_set_device", "helper_thread"])
def test_old_npu_order_fails_in_both_ascend_builds_and_is_diagnosed(mode: str,
                                                                     build: str) -> None:
    result = run_python(OLD_ORDER.replace("__MODE__", mode), simulated=True,
                        env={"INITORCH_SIM_MOONCAKE_BUILD": build})
    assert result.returncode == 0, result.stderr[-3000:]
    facts = json.loads(result.stdout.strip().splitlines()[-1])
    assert "TransferEngine.initialize" in facts["error"]
    logged, diagnosis, code = NO_CONTEXT[build]
    assert logged in facts["native_log"]
    assert "Failed to install Ascend transport" in facts["native_log"]
    assert (facts["diagnosis"], facts["vendor_code"]) == (diagnosis, code)


@pytest.mark.parametrize(("executor", "build", "physical", "hostname"), [
    ("sequential", "ascend_direct", "", "127.0.0.1"),       # plain host: the npu wheel
    # LOCAL_RANK 0 -> physical 4; SGLang would write npu_0, the logical id
    # (mooncake_transfer_engine.py:202-204): a deliberate difference, asserted here.
    ("parallel", "hccl", "", r"127\.0\.0\.1:\d+:npu_4"),
    ("sequential", "hccl", "6", r"127\.0\.0\.1:\d+:npu_6"),  # ASCEND_NPU_PHY_ID, as SGLang
])
def test_shipped_npu_profile_passes_with_either_build(executor: str, build: str, physical: str,
                                                      hostname: str, tmp_path: Path) -> None:
    # A timeout moves the engine init onto a helper thread: it must still have context.
    overlay = tmp_path / "deadline.yaml"
    overlay.write_text("steps:\n  init_shared_mooncake_transfer_engine:\n    timeout: 60\n",
                       encoding="utf-8")
    result = initorch_command(
        "run", "--profile", "npu", "--profile", str(overlay), "--executor", executor,
        "--set", "checks.verify_transfer=true", "--log-format", "json",
        simulated=True, env={"ASCEND_RT_VISIBLE_DEVICES": "4,5", "ASCEND_NPU_PHY_ID": physical,
                             "INITORCH_SIM_MOONCAKE_BUILD": build})
    assert result.returncode == 0, result.stderr[-3000:]
    events = [json.loads(line) for line in result.stderr.splitlines() if line.startswith("{")]
    ready = next(e for e in events if e["event"] == "transfer_engine_ready")
    assert ready["protocol"] == "ascend" and ready["ascend_build"] == build
    assert re.fullmatch(hostname, ready["hostname"])
    assert "ascend" in ready["transports"]
    verified = next(e for e in events if e["event"] == "transfer_verified")
    assert verified["layout"] == "page_first_direct"


def test_asking_for_the_other_build_fails_before_the_engine_starts() -> None:
    result = initorch_command("run", "--profile", "npu", "--profile", "npu-hccl",
                              simulated=True, env={"INITORCH_SIM_MOONCAKE_BUILD": "ascend_direct"})
    assert result.returncode == 1
    assert "mooncake.ascend_build is hccl, but the installed Mooncake is the ascend_direct " \
           "build" in result.stderr


WITHOUT_CONTEXT = """
import json, threading
from initorch import Registry, load_plan
from initorch.errors import StepError
from initorch.execution.context import RunStepContext
from initorch.execution.run import Run

registry = Registry.with_plugins()
plan = load_plan(["npu", "__PROFILE__"], registry=registry)
run = Run(plan, diagnoses=registry.diagnoses)
assert run.start().ok
facts = {}

def step_on_a_fresh_thread(name):
    # What the old code did: call into Mooncake from a thread that never ran set_device.
    ctx = RunStepContext(run.state, name, __import__("structlog").get_logger())
    box = {}
    def target():
        try:
            output = registry.steps.get(name).action(ctx)
            box["error"] = None
            if name == "init_mooncake_store":
                output.store.close()
        except StepError as exc:
            finding = registry.diagnoses.match(exc)
            box.update(error=str(exc), native_log=exc.native_log,
                       diagnosis=finding.diagnosis.id if finding else None)
    thread = threading.Thread(target=target); thread.start(); thread.join()
    assert box, name + " raised something other than a StepError"
    return box

facts["register"] = step_on_a_fresh_thread("register_mem_pool_host")
facts["store"] = step_on_a_fresh_thread("init_mooncake_store")
run.teardown()
print(json.dumps(facts))
"""


@pytest.mark.parametrize("build", ["ascend_direct", "hccl"])
def test_store_steps_without_device_context_fail_as_the_build_does(build: str,
                                                                   tmp_path: Path) -> None:
    # Registration is the one the steps leave for last: initorch runs it after
    # init_mooncake_store, device_bound; here it is run bare, on a fresh thread.
    overlay = tmp_path / "no-register.yaml"
    overlay.write_text("steps:\n  register_mem_pool_host: {enabled: false}\n"
                       "  verify_transfer: {enabled: false}\n", encoding="utf-8")
    result = run_python(WITHOUT_CONTEXT.replace("__PROFILE__", str(overlay)), simulated=True,
                        env={"INITORCH_SIM_MOONCAKE_BUILD": build})
    assert result.returncode == 0, result.stderr[-3000:]
    facts = json.loads(result.stdout.strip().splitlines()[-1])
    logged, diagnosis, _ = NO_CONTEXT[build]
    store = facts["store"]
    if build == "ascend_direct":  # the store's own engine asks aclrtGetDevice at setup
        assert store["error"] == "Failed to setup Mooncake store, error code: -1"
        assert logged in store["native_log"] and store["diagnosis"] == diagnosis
    else:  # the legacy store rides on the shared engine, installed with context before
        assert store["error"] is None
    register = facts["register"]
    if build == "ascend_direct":  # aclrtGetDevice again at registration (StampBufferDeviceId)
        assert register["error"] == ("Failed to register buffer to Mooncake Store, error "
                                     "code: -600")
        assert "ascend_direct_transport.cpp:80] Call acl failed" in register["native_log"]
        assert register["diagnosis"] == "ascend-acl-call-failed"
    else:  # the legacy HCCL build does not ask for the device when registering
        assert register["error"] is None


def test_profile_cannot_reintroduce_the_old_order(tmp_path: Path) -> None:
    old = tmp_path / "old-order.yaml"
    old.write_text("extends: npu\nsteps:\n  init_shared_mooncake_transfer_engine:\n"
                   "    before: [set_device]\n", encoding="utf-8")
    result = initorch_command("plan", "--profile", str(old))
    assert result.returncode == 2
    assert "ordering cycle" in result.stderr
    assert "device_bound, so it runs after set_device" in result.stderr
    assert "old-order.yaml:4:14" in result.stderr


MUSA_PROBE = """
import json
from initorch_simulation.pinned import PINNED
from initorch import Registry, load_plan
from initorch.execution.run import Run

registry = Registry.with_plugins()
plan = load_plan(["musa"], settings=__SETTINGS__, registry=registry)
run = Run(plan, diagnoses=registry.diagnoses)
report = run.start()
pool = run.output("alloc_host_mem_pool") if report.ok else None
failed = report.failed[0] if report.failed else None
print(json.dumps({
    "ok": report.ok,
    "pinned": PINNED.is_pinned(pool.ptr) if pool else None,
    "error": f"{type(failed.error).__name__}: {failed.error}" if failed else None,
    "diagnosis": failed.finding.diagnosis.id if failed and failed.finding else None,
}))
run.teardown()
"""


def test_old_musa_allocator_reproduces_the_crash_and_is_diagnosed() -> None:
    code = MUSA_PROBE.replace("__SETTINGS__", '{"device.host_allocator": "cuda_host_register"}')
    result = run_python(code, simulated=True)
    assert result.returncode == 0, result.stderr[-3000:]
    facts = json.loads(result.stdout.strip().splitlines()[-1])
    assert not facts["ok"]
    assert facts["error"] == "AttributeError: 'NoneType' object has no attribute 'cudaHostRegister'"
    assert facts["diagnosis"] == "cuda-host-register-on-non-cuda"


def test_shipped_musa_profile_pins_the_pool() -> None:
    result = run_python(MUSA_PROBE.replace("__SETTINGS__", '{"checks.verify_transfer": True}'),
                        simulated=True)
    assert result.returncode == 0, result.stderr[-3000:]
    facts = json.loads(result.stdout.strip().splitlines()[-1])
    assert facts == {"ok": True, "pinned": True, "error": None, "diagnosis": None}


def test_the_legacy_hccl_store_rides_on_the_shared_engine(tmp_path: Path) -> None:
    # Mooncake real_client.cpp:797-860: the store names its own engine host:port, without
    # the :npu_<id> the legacy transport needs; the simulation fails that setup as the build
    # does, so the store reuses the shared engine (whose hostname has the id), or says why not.
    env = {"ASCEND_RT_VISIBLE_DEVICES": "4,5", "INITORCH_SIM_MOONCAKE_BUILD": "hccl"}
    result = initorch_command("run", "--profile", "npu", "--set", "checks.verify_transfer=true",
                              "--log-format", "json", simulated=True, env=env)
    assert result.returncode == 0, result.stderr[-3000:]
    events = [json.loads(line) for line in result.stderr.splitlines() if line.startswith("{")]
    engine = next(e for e in events if e["event"] == "transfer_engine_ready")
    reused = next(e for e in events if e["event"] == "store_reuses_hccl_engine")
    store = next(e for e in events if e["event"] == "mooncake_store_ready")
    assert store["reused_engine"] is True and reused["session_id"] == engine["session_id"]
    refused = initorch_command("run", "--profile", "npu", "--set",
                               "mooncake.store.reuse_engine=false", simulated=True, env=env)
    assert refused.returncode == 1
    assert "the legacy HCCL build's store cannot have an engine of its own" in refused.stderr
