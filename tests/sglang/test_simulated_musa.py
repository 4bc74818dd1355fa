"""The real SGLang 0.5.23 server meets the SIMULATED Moore Threads MUSA device context:
neither of MUSA's two start-up hazards fails it, and the tests prove why.

The launch is the Ascend test's: tp=2, HiCache with the Mooncake Store,
``SGLANG_HICACHE_MOONCAKE_REUSE_TE=1`` so that SGLang builds the shared engine
(``mooncake_transfer_engine.py:315-340``), on the test vehicle with its simulated MUSA
semantics (``tests/sglang/site``, ``simulated_musa``): ``set_device`` binds the calling
thread in the simulated MUSA runtime, and host memory is pinned by the simulated MUSA
plugin's allocator.

- **Per-thread context.**  SGLang 0.5.23 still runs ``TransferEngine.initialize`` on
  ``run_with_deadline``'s daemon thread, where ``set_device`` never ran
  (``srt/utils/common.py:3755-3775``, from ``mooncake_transfer_engine.py:211-220``).  On
  MUSA that thread works on device 0 and nothing fails, because the MUSA build's
  ``initialize`` reads no device (Mooncake main@3b5a594, the source of the
  ``mooncake-transfer-engine-musa`` 0.3.13.post1 wheel: TCP only with ``MC_FORCE_TCP``,
  ``transfer_engine_impl.cpp:209-223``; the musa transport only writes its segment
  descriptor, ``nvlink_transport.cpp:701-731``).  Everything that does need the device,
  the store's ``setup`` and ``register_buffer`` and the host pool, runs on the rank's main
  thread after ``set_device`` (``bootstrap.py:133``, ``model_runner.py:455``).
- **Host pool.**  0.5.23 lists ``musa`` in ``ALLOC_MEMORY_FUNCS``
  (``srt/mem_cache/pool_host/common.py:453-459``, SGLang PR 23361) and looks the pool's
  device type up there (``pool_host/mha.py:343``): the pool is pinned with
  ``torch.empty(..., pin_memory=True)`` (``common.py:353-365``), never ``cudaHostRegister``.

So stock SGLang starts and serves, verify mode records every vendor call with its thread
and bound device, and drive mode serves.
"""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
import textwrap
from pathlib import Path
from typing import Any

import pytest

from tests.sglang.server import (
    BIND,
    REPO,
    SIMULATED_SITE,
    Master,
    assert_nothing_left,
    report_paths,
    running,
)

pytestmark = pytest.mark.e2e

PROFILE = str(REPO / "tests" / "sglang" / "simulated-musa.yaml")
LAUNCH: dict[str, str | None] = {
    # The test vehicle's SIMULATED MUSA semantics (initorch_test_cpu_platform.simulated_musa).
    "INITORCH_TEST_SIMULATED_MUSA": str(SIMULATED_SITE),
    "MUSA_VISIBLE_DEVICES": "0,1",
    # SGLang builds the shared engine on its deadline thread (mooncake_transfer_engine.py:
    # 315-340; SGLang 0.5.23's default, environ.py:881, set so a later default cannot hide it).
    "SGLANG_HICACHE_MOONCAKE_REUSE_TE": "1",
    **BIND,
}
ENGINE_LINE = "srt/distributed/device_communicators/mooncake_transfer_engine.py:212"
DEADLINE_ENTRY = "run_with_deadline.<locals>._target (srt/utils/common.py:3759)"
BOUND = re.compile(r"SIMULATED musa runtime: set_device\((\d)\) bound thread '([^']+)'")
PINNED = re.compile(r"SIMULATED musa runtime: pinned (\d+) bytes of host memory on thread "
                    r"'([^']+)' \(([^)]+)\)")


def outputs(tmp_path: Path) -> dict[str, str | None]:
    return {**report_paths(tmp_path), "INITORCH_SGLANG_PROFILE": PROFILE}


def pinned_blocks(log: str) -> list[tuple[int, str, str]]:
    """(bytes, thread, device) of each block the simulated MUSA allocator pinned."""
    return [(int(size), thread, device) for size, thread, device in PINNED.findall(log)]


def served(model: Path, master: Master, environ: dict[str, str | None], log: Path) -> str:
    """Launch, wait until SGLang serves, generate 8 greedy tokens, stop (nothing left
    behind): the launch's log."""
    with running(model, master, environ, log) as server:
        server.wait_ready()
        tokens = server.generate()
    assert len(tokens) == 8
    assert_nothing_left(server)
    return server.text()


def test_stock_sglang_starts_and_serves_on_simulated_musa(tiny_model: Path, master: Master,
                                                          tmp_path: Path) -> None:
    log = served(tiny_model, master, LAUNCH, tmp_path / "stock.log")
    assert "initorch-sglang" not in log
    # Each rank bound its device on its main thread (bootstrap.py:133, model_runner.py:455),
    # and only there: the deadline thread that ran the engine's initialize never did.
    assert {(int(device), thread) for device, thread in BOUND.findall(log)} == {
        (0, "MainThread"), (1, "MainThread")}
    # Each rank's host pool, pinned through SGLang's own musa entry on its bound thread.
    blocks = pinned_blocks(log)
    assert sorted(device for _, _, device in blocks) == ["device 0", "device 1"]
    assert all(thread == "MainThread" and size > 0 for size, thread, _ in blocks)
    assert "cudaHostRegister" not in log
    # Both engines of each rank, SGLang's shared one and the store's own, over TCP.
    assert log.count("MC_FORCE_TCP is set, using TCP transport only") == 4


def vendor_calls(report: dict[str, Any], call: str) -> list[dict[str, Any]]:
    return [made for made in report["sglang"]["vendor_calls"] if made["call"] == call]


def test_verify_mode_records_each_vendor_call_with_its_thread_and_device(
        tiny_model: Path, master: Master, tmp_path: Path) -> None:
    environ = {**LAUNCH, "INITORCH_SGLANG": "verify", "INITORCH_SGLANG_ON_VIOLATION": "warn",
               **outputs(tmp_path)}
    log = served(tiny_model, master, environ, tmp_path / "verify.log")
    for rank in (0, 1):
        report = json.loads((tmp_path / f"report-{rank}.json").read_text())
        device = f"cpu:{rank}"
        sets = [call for call in report["sglang"]["calls"] if call["step"] == "set_device"]
        assert {(call["thread"], call["device"]) for call in sets} == {("MainThread", device)}
        engine = vendor_calls(report, "Mooncake TransferEngine.initialize")
        # SGLang's deadline thread, where set_device never ran, and the call succeeded.
        assert len(engine) == 1 and engine[0]["returned"] == 0 and engine[0]["daemon"]
        assert engine[0]["device"] is None and engine[0]["thread_entry"] == DEADLINE_ENTRY
        assert engine[0]["called_from"].startswith(ENGINE_LINE)
        for call in ("Mooncake MooncakeDistributedStore.setup",
                     "Mooncake MooncakeDistributedStore.register_buffer",
                     "host registration alloc_with_pin_memory"):
            made = vendor_calls(report, call)
            assert made and all(record["thread"] == "MainThread" and record["device"] == device
                                and record["thread_entry"] is None for record in made), call
        assert report["sglang"]["host_allocator"] == {
            "device": "cpu", "allocator": "alloc_with_pin_memory",
            "installed_by_initorch": False}
    assert sorted(device for _, _, device in pinned_blocks(log)) == ["device 0", "device 1"]


def test_verify_mode_lets_stock_0_5_23_start_on_simulated_musa(
        tiny_model: Path, master: Master, tmp_path: Path) -> None:
    environ = {**LAUNCH, "INITORCH_SGLANG": "verify", **outputs(tmp_path)}
    with running(tiny_model, master, environ, tmp_path / "verify-stop.log") as server:
        server.wait_ready()  # RuntimeError: SGLang exited, stopped by the violation
    assert "initorch-sglang: order violation" not in server.text()


def test_drive_mode_starts_and_serves_it(tiny_model: Path, master: Master,
                                         tmp_path: Path) -> None:
    environ = {**LAUNCH, "INITORCH_SGLANG": "drive", **outputs(tmp_path)}
    log = served(tiny_model, master, environ, tmp_path / "drive.log")
    assert log.count("initorch-sglang: drive ok") == 2
    # Drive gives SGLang's deadline thread (threading's "Thread-N (_target)") the rank's
    # device; the deadline is kept.
    assert sorted(int(device) for device, thread in BOUND.findall(log)
                  if thread.endswith("(_target)")) == [0, 1]
    for rank in (0, 1):
        report = json.loads((tmp_path / f"report-{rank}.json").read_text())
        assert report["ok"] and report["sglang"]["violations"] == []
        engine = vendor_calls(report, "Mooncake TransferEngine.initialize")
        assert len(engine) == 1 and engine[0]["returned"] == 0 and engine[0]["daemon"]
        assert engine[0]["device"] == f"cpu:{rank}"
        assert engine[0]["thread_entry"] == DEADLINE_ENTRY
    assert sorted(device for _, _, device in pinned_blocks(log)) == ["device 0", "device 1"]


RECORDER_SCRIPT = textwrap.dedent('''
    import json, sys, threading
    sys.path[:0] = [{repo!r}, {integration!r}]
    from initorch.kit import (MOONCAKE_CALLS, Recorder, VendorCall, call_site,
                              install_vendor_hooks, wrap_vendor_function)
    from initorch_sglang.engine import SGLANG
    from tests.sglang.helpers import sglang_plan

    recorder = Recorder(sglang_plan(**{{"device.context_per_thread": True}}), SGLANG,
                        stop_on_violation=False, label="SGLang (test)")
    import torch, torch_musa  # SIMULATED torch_musa: torch.musa, pinned host memory
    from initorch_simulation.musa import MUSA
    from initorch_simulation.pinned import PINNED

    queries = []
    for name in ("current_device", "thread_device", "set_device"):
        real = getattr(MUSA, name)
        def counted(*args, _real=real, _name=name):
            queries.append((threading.current_thread().name, _name))
            return _real(*args)
        setattr(MUSA, name, counted)

    observe = lambda call: recorder.observe_vendor(call, call_site(None))
    install_vendor_hooks(observe, MOONCAKE_CALLS)
    with recorder.observe("set_device", binds="musa:1"):
        torch.musa.set_device(1)
    from mooncake.engine import TransferEngine
    engine = TransferEngine()
    pin = wrap_vendor_function(
        lambda: torch.empty(4096, dtype=torch.uint8, pin_memory=True),
        VendorCall("test", "ALLOC_MEMORY_FUNCS", "musa", "alloc_host_mem_pool", "pinning",
                   name="host registration alloc_with_pin_memory"), observe)
    seen = {{}}

    def helper():
        before = list(queries)
        seen["returned"] = engine.initialize("127.0.0.1", "P2PHANDSHAKE", "tcp", "")
        seen["pinned"] = pin().is_pinned()
        seen["recorder_queries"] = queries[len(before):]
        seen["helper_device_after"] = MUSA.thread_device()

    thread = threading.Thread(target=helper, name="deadline-helper", daemon=True)
    thread.start()
    thread.join()
    seen |= {{
        "bindings": [(record.thread_name, record.device) for record in MUSA.set_device_log()],
        "pinned_threads": [block.thread_name for block in PINNED.history()],
        "vendor_calls": [record.to_dict() for record in recorder.vendor_calls],
        "violations": [str(violation) for violation in recorder.violations],
    }}
    print(json.dumps(seen, default=str))
''')


def test_recording_never_changes_device_state_on_simulated_musa() -> None:
    """The recorder, on simulated MUSA, neither binds nor asks: a thread that never set
    the device is recorded as such (``None``), where ``torch.musa.current_device()`` would
    have answered 0 and passed it for a bound one."""
    script = RECORDER_SCRIPT.format(repo=str(REPO),
                                    integration=str(REPO / "integrations" / "sglang"))
    env = {key: value for key, value in os.environ.items()
           if not key.startswith(("MC_", "INITORCH_SIM", "MUSA_"))}
    env |= {"PYTHONPATH": str(SIMULATED_SITE), "MC_FORCE_TCP": "1"}
    done = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True,
                          env=env, timeout=300, check=False)
    assert done.returncode == 0, done.stderr[-3000:]
    seen = json.loads(done.stdout.strip().splitlines()[-1])
    assert seen["returned"] == 0 and seen["pinned"] is True
    # Only torch.musa.set_device on the main thread bound anything, and nothing the
    # recorder did on the helper thread queried or set the simulated runtime.
    assert seen["bindings"] == [["MainThread", 1]]
    assert seen["recorder_queries"] == [] and seen["helper_device_after"] is None
    assert seen["pinned_threads"] == ["deadline-helper"]
    assert [(call["call"], call["thread"], call["device"]) for call in seen["vendor_calls"]] \
        == [("Mooncake TransferEngine.initialize", "deadline-helper", None),
            ("host registration alloc_with_pin_memory", "deadline-helper", None)]
