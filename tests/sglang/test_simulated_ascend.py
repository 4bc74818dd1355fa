"""The real SGLang 0.5.23 server meets the SIMULATED Ascend device context: the bug of the
seed's class that 0.5.23 still has, caught and fixed.

The launch: tp=2, HiCache with the Mooncake Store, ``SGLANG_HICACHE_MOONCAKE_REUSE_TE=1``
so that SGLang builds the shared engine (``mooncake_transfer_engine.py:315-340``), on the
test vehicle with its simulated Ascend semantics (``tests/sglang/site``,
``simulated_ascend``): ``set_device`` binds the calling thread, and the simulated
ascend-direct Mooncake build reads the calling thread's device when ``initialize`` runs.
SGLang 0.5.23 runs that ``initialize`` inside ``run_with_deadline``, on a new daemon
thread that never set the device (``srt/utils/common.py:3755-3775``, from
``mooncake_transfer_engine.py:211-220``): stock SGLang fails as it would on an Ascend
machine, verify mode stops it naming the vendor call, the thread and SGLang's line, and
drive mode starts it by binding that thread.
"""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest

from tests.sglang.server import (
    BIND,
    REPO,
    SIMULATED_ASCEND,
    Master,
    assert_nothing_left,
    report_paths,
    running,
)

pytestmark = pytest.mark.e2e

PROFILE = str(REPO / "tests" / "sglang" / "simulated-ascend.yaml")
LAUNCH = {**SIMULATED_ASCEND, **BIND}
ENGINE_LINE = "srt/distributed/device_communicators/mooncake_transfer_engine.py:212"


def outputs(tmp_path: Path) -> dict[str, str | None]:
    return {**report_paths(tmp_path), "INITORCH_SGLANG_PROFILE": PROFILE}


def test_stock_sglang_fails_as_it_would_on_ascend(tiny_model: Path, master: Master,
                                                   tmp_path: Path) -> None:
    with running(tiny_model, master, {**LAUNCH, "INITORCH_TEST_STOCK_CPU_POOL": "1"},
                 tmp_path / "stock.log") as server:
        code = server.wait_exit()
    assert code != 0
    assert_nothing_left(server)
    log = server.text()
    # The simulated ascend-direct build's lines (Mooncake ascend_direct_transport.cpp:244,
    # transfer_engine_impl.cpp:230), then SGLang's own error (mooncake_transfer_engine.py:223).
    assert re.search(r"ascend_direct_transport\.cpp:244\] Call acl failed, detail: .*107002", log)
    assert "Failed to install Ascend transport" in log
    assert "RuntimeError: Mooncake Transfer Engine initialization failed." in log
    assert "initorch-sglang" not in log


def test_verify_mode_stops_it_naming_the_vendor_call_the_deadline_thread_and_the_line(
        tiny_model: Path, master: Master, tmp_path: Path) -> None:
    environ = {**LAUNCH, "INITORCH_SGLANG": "verify", **outputs(tmp_path)}
    with running(tiny_model, master, environ, tmp_path / "verify.log") as server:
        code = server.wait_exit()
    assert code != 0
    assert_nothing_left(server)
    log = server.text()
    violation = re.search(r"initorch-sglang: order violation: (.*)", log)
    assert violation is not None, log[-3000:]
    message = violation.group(1)
    assert message.startswith("SGLang 0.5.23 called Mooncake TransferEngine.initialize on "
                              "daemon thread ")
    assert ("started in run_with_deadline.<locals>._target (srt/utils/common.py:3759), where "
            "set_device never ran") in message
    assert f"the call is made at {ENGINE_LINE} (MooncakeTransferEngine.initialize." in message
    # Stopped before the vendor call: the simulated transport never had to fail.
    assert "Call acl failed" not in log
    written = [json.loads(path.read_text()) for path in sorted(tmp_path.glob("report-*.json"))]
    assert written
    for report in written:
        assert not report["ok"]
        engine = [made for made in report["sglang"]["vendor_calls"]
                  if made["call"] == "Mooncake TransferEngine.initialize"]
        assert len(engine) == 1 and engine[0]["device"] is None and engine[0]["daemon"]
        assert engine[0]["thread_entry"] == ("run_with_deadline.<locals>._target "
                                             "(srt/utils/common.py:3759)")
        failed = [step["step"] for step in report["steps"] if step["status"] == "failed"]
        assert failed == ["init_shared_mooncake_transfer_engine"]


def test_drive_mode_starts_and_serves_it(tiny_model: Path, master: Master,
                                         tmp_path: Path) -> None:
    environ = {**LAUNCH, "INITORCH_SGLANG": "drive", **outputs(tmp_path)}
    with running(tiny_model, master, environ, tmp_path / "drive.log") as server:
        server.wait_ready()
        tokens = server.generate()
    assert len(tokens) == 8
    assert_nothing_left(server)
    log = server.text()
    assert log.count("initorch-sglang: drive ok") == 2
    assert "Call acl failed" not in log
    for rank in (0, 1):
        report = json.loads((tmp_path / f"report-{rank}.json").read_text())
        assert report["ok"] and report["sglang"]["violations"] == []
        engine = [made for made in report["sglang"]["vendor_calls"]
                  if made["call"] == "Mooncake TransferEngine.initialize"]
        # Still SGLang's deadline thread (the deadline is kept), now with the device.
        assert len(engine) == 1 and engine[0]["returned"] == 0 and engine[0]["daemon"]
        assert engine[0]["device"] == f"cpu:{rank}"
        assert engine[0]["thread_entry"].startswith("run_with_deadline.<locals>._target")
        assert engine[0]["called_from"].startswith(ENGINE_LINE)
