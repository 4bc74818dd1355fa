"""The vendor boundary (:mod:`initorch.kit.vendor`) against the SIMULATED Ascend build:
the hooks import nothing, wrap the class SGLang will call, stop an engine init on a thread
without the device before the vendor call runs, and never change device state.

Each case runs in a fresh interpreter with ``tests/support/simulated/site`` on the path
(the simulated torch_npu registers ``torch.npu`` process-wide) and the real Mooncake CPU
wheel underneath the simulated build.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap
from typing import Any

import pytest

from tests.sglang.server import REPO, SIMULATED_SITE

pytestmark = pytest.mark.e2e

SCRIPT = textwrap.dedent('''
    import json, sys, threading
    sys.path[:0] = [{repo!r}, {integration!r}]
    from initorch.kit import MOONCAKE_CALLS, OrderViolation, call_site, install_vendor_hooks
    from initorch_sglang.verify import new_recorder
    from tests.sglang.helpers import sglang_plan

    recorder = new_recorder(sglang_plan(**{{"device.context_per_thread": True,
                                             "device.mooncake_protocol": "ascend"}}),
                            label="SGLang (test)")
    import torch_npu  # SIMULATED: installs the simulated Ascend build's finder first
    from initorch_simulation.acl import ACL, SimulatedAclError
    install_vendor_hooks(lambda call: recorder.observe_vendor(call, call_site(None)),
                         MOONCAKE_CALLS)
    imported_by_install = "mooncake.engine" in sys.modules
    import torch
    with recorder.observe("set_device", binds="npu:0"):
        torch.npu.set_device(0)
    from mooncake.engine import TransferEngine
    engine = TransferEngine()
    seen = {{}}

    def helper():
        try:
            seen["returned"] = engine.initialize("127.0.0.1", "P2PHANDSHAKE", "ascend", "")
        except OrderViolation as violation:
            seen["violation"] = str(violation)
        try:
            ACL.get_device()
            seen["helper_bound_after"] = True
        except SimulatedAclError:
            seen["helper_bound_after"] = False

    thread = threading.Thread(target=helper, name="deadline-helper", daemon=True)
    thread.start()
    thread.join()
    seen |= {{
        "imported_by_install": imported_by_install,
        "simulated_class": getattr(TransferEngine, "__initorch_simulated__", False),
        "wrapped": getattr(TransferEngine.initialize, "__initorch_vendor__", False),
        "bindings": [(record.thread_name, record.device) for record in ACL.set_device_log()],
        "vendor_calls": [record.to_dict() for record in recorder.vendor_calls],
    }}
    print(json.dumps(seen, default=str))
''')


def run(**environ: str) -> dict[str, Any]:
    script = SCRIPT.format(repo=str(REPO), integration=str(REPO / "integrations" / "sglang"))
    env = {key: value for key, value in os.environ.items()
           if not key.startswith(("MC_", "INITORCH_SIM"))}
    env |= {"PYTHONPATH": str(SIMULATED_SITE), **environ}
    done = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True,
                          env=env, timeout=300, check=False)
    assert done.returncode == 0, done.stderr[-3000:]
    result: dict[str, Any] = json.loads(done.stdout.strip().splitlines()[-1])
    result["stderr"] = done.stderr
    return result


def test_an_engine_init_on_an_unbound_thread_is_stopped_before_the_vendor_call() -> None:
    seen = run()
    assert seen["imported_by_install"] is False  # importing mooncake first aborts an NPU worker
    assert seen["simulated_class"] and seen["wrapped"]  # the class SGLang calls is wrapped
    assert "returned" not in seen
    assert seen["violation"].startswith(
        "SGLang (test) called Mooncake TransferEngine.initialize on daemon thread "
        "'deadline-helper'")
    assert "where set_device never ran (it ran on MainThread (npu:0))" in seen["violation"]
    # Stopped before the simulated transport's aclrtGetDevice could fail.
    assert "Call acl failed" not in seen["stderr"]


def test_recording_never_changes_device_state() -> None:
    seen = run()
    # Only torch.npu.set_device on the main thread bound anything; the helper thread that
    # made the recorded call is as unbound after it as before.
    assert seen["bindings"] == [["MainThread", 0]]
    assert seen["helper_bound_after"] is False
    assert [call["device"] for call in seen["vendor_calls"]] == [None]

