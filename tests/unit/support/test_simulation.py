"""Prove that the SIMULATED Ascend / MUSA stacks fail and succeed like the real ones.

The torch-free core (``initorch_simulation``) is tested in this process.  Everything
that registers with torch (PrivateUse1 rename, c10d backends, factory wrappers) is
process-global, so those checks run in fresh interpreters with the simulation's site
directory on PYTHONPATH; each script prints one JSON report that several tests read.
"""

from __future__ import annotations

import importlib
import json
import os
import re
import subprocess
import sys
import textwrap
import threading
from pathlib import Path
from types import ModuleType
from typing import Any

import pytest

SITE = Path(__file__).resolve().parents[2] / "support" / "simulated" / "site"

# What each simulated Ascend build logs when aclrtGetDevice finds no context (glog).
GLOG_NO_CONTEXT = {
    "ascend_direct": re.compile(
        r"^E\d{4} \d{2}:\d{2}:\d{2}\.\d{6} +(?P<tid>\d+) ascend_direct_transport\.cpp:244\] "
        r"Call acl failed, detail: \(simulated CANN error text\) aclrtGetDevice returned "
        r"107002$", re.MULTILINE),
    "hccl": re.compile(
        r"^E\d{4} \d{2}:\d{2}:\d{2}\.\d{6} +(?P<tid>\d+) hccl_transport\.cpp:323\] "
        r"HcclTransport: aclrtGetDevice failed, ret: 107002$", re.MULTILINE),
}

_SIM_ENV_VARS = (
    "PYTHONPATH",
    "ASCEND_RT_VISIBLE_DEVICES",
    "MUSA_VISIBLE_DEVICES",
    "INITORCH_SIM_DEVICE_COUNT",
    "INITORCH_SIM_CANN_MISSING",
    "INITORCH_SIM_MOONCAKE_BUILD",
    "MC_FORCE_TCP",
)


def _load_core() -> dict[str, ModuleType]:
    """Import the torch-free core without leaving the site dir on sys.path.

    Keeping it off sys.path matters: other tests probe ``import torch_npu`` to detect
    Ascend, and must not find the simulated plugin in this process.
    """
    sys.path.insert(0, str(SITE))
    try:
        names = ("acl", "musa", "pinned", "mooncake_ascend")
        return {n: importlib.import_module(f"initorch_simulation.{n}") for n in names}
    finally:
        sys.path.remove(str(SITE))


CORE = _load_core()
acl = CORE["acl"]
musa = CORE["musa"]
pinned = CORE["pinned"]
mooncake_ascend = CORE["mooncake_ascend"]


def _run_simulated(code: str, tmp_dir: Path, **env: str) -> subprocess.CompletedProcess[str]:
    """Run ``code`` in a fresh interpreter that sees the simulated plugins."""
    full_env = {k: v for k, v in os.environ.items() if k not in _SIM_ENV_VARS}
    full_env.update(PYTHONPATH=str(SITE), PYTHONWARNINGS="ignore", **env)
    return subprocess.run(
        [sys.executable, "-c", textwrap.dedent(code)],
        env=full_env,
        cwd=tmp_dir,
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )


def _report(proc: subprocess.CompletedProcess[str]) -> dict[str, Any]:
    assert proc.returncode == 0, f"stdout:\n{proc.stdout}\nstderr:\n{proc.stderr}"
    report: dict[str, Any] = json.loads(proc.stdout.strip().splitlines()[-1])
    report["_stderr"] = proc.stderr
    return report


def _thread_result(fn: Any) -> Any:
    """Run ``fn`` on a fresh thread; return its value or the exception it raised."""
    box: list[Any] = []

    def target() -> None:
        try:
            box.append(fn())
        except Exception as error:
            box.append(error)

    thread = threading.Thread(target=target, name="sim-helper")
    thread.start()
    thread.join()
    return box[0]


# ---------------------------------------------------------------------------------------
# torch-free core, in process
# ---------------------------------------------------------------------------------------
def test_acl_context_is_per_thread():
    rt = acl.SimulatedAclRuntime(environ={})
    rt.set_device(3)

    error = _thread_result(rt.get_device)

    assert rt.get_device() == 3
    assert isinstance(error, acl.SimulatedAclError)
    assert isinstance(error, RuntimeError)
    assert str(error) == "Call aclrtGetDevice failed, ret: 107002"
    assert error.code == 107002 == acl.ACL_ERROR_RT_CONTEXT_NULL
    [record] = rt.set_device_log()
    assert (record.thread_name, record.device) == ("MainThread", 3)
    assert rt.devices_by_thread() == {threading.get_ident(): 3}


def test_acl_thread_without_set_device_fails_even_on_main_thread():
    rt = acl.SimulatedAclRuntime(environ={})
    with pytest.raises(acl.SimulatedAclError) as info:
        rt.get_device()
    assert info.value.code == 107002
    rt.set_device(0)
    rt.reset_thread()
    with pytest.raises(acl.SimulatedAclError):
        rt.get_device()


@pytest.mark.parametrize("index", [2, 9, -1])
def test_acl_invalid_device_index(index):
    rt = acl.SimulatedAclRuntime(environ={"INITORCH_SIM_DEVICE_COUNT": "2"})
    with pytest.raises(RuntimeError, match="invalid device id") as info:
        rt.set_device(index)
    assert info.value.code == acl.ACL_ERROR_RT_INVALID_DEVICEID
    assert str(info.value).startswith("Call aclrtSetDevice failed, ret: 107001")
    assert rt.thread_device() is None


def test_acl_visible_devices_win_over_simulated_count():
    env = {"ASCEND_RT_VISIBLE_DEVICES": "4, 6", "INITORCH_SIM_DEVICE_COUNT": "8"}
    rt = acl.SimulatedAclRuntime(environ=env)
    assert rt.device_count() == 2
    assert rt.physical_id(1) == 6
    rt.set_device(1)
    assert rt.set_device_log()[0].physical_id == 6
    with pytest.raises(RuntimeError, match="invalid device id 2"):
        rt.set_device(2)


def test_acl_device_count_defaults():
    assert acl.SimulatedAclRuntime(environ={}).device_count() == 8
    assert acl.SimulatedAclRuntime(environ={"INITORCH_SIM_DEVICE_COUNT": "3"}).device_count() == 3
    assert acl.SimulatedAclRuntime(environ={"ASCEND_RT_VISIBLE_DEVICES": ""}).device_count() == 0
    with pytest.raises(ValueError, match="ASCEND_RT_VISIBLE_DEVICES"):
        acl.SimulatedAclRuntime(environ={"ASCEND_RT_VISIBLE_DEVICES": "0,x"}).device_count()


def test_musa_context_is_per_thread_and_defaults_to_zero():
    rt = musa.SimulatedMusaRuntime(environ={"MUSA_VISIBLE_DEVICES": "0,1,2"})
    assert rt.device_count() == 3
    rt.set_device(2)
    assert rt.current_device() == 2
    assert _thread_result(rt.current_device) == 0
    assert _thread_result(rt.thread_device) is None
    with pytest.raises(RuntimeError, match="MUSA error: invalid device ordinal"):
        rt.set_device(3)


def test_pinned_registry_tracks_live_blocks():
    registry = pinned.SimulatedPinnedHostAllocator()
    block = registry.record(4096, 256, "npu")
    assert registry.is_pinned(4096 + 255)
    assert not registry.is_pinned(4096 + 256)
    assert registry.live_bytes() == 256
    registry.release(block.serial)
    assert not registry.is_pinned(4096)
    assert registry.history() == [block]


def test_ascend_hostname_split_keeps_port():
    split = mooncake_ascend.split_ascend_hostname
    assert split("10.0.0.1:12001:npu_5") == ("10.0.0.1:12001", 5)
    assert split("10.0.0.1:npu_0") == ("10.0.0.1", 0)
    assert split("10.0.0.1:12001") == ("10.0.0.1:12001", None)


def test_glog_line_format():
    line = mooncake_ascend.glog_line(
        "E", "HcclTransport: aclrtGetDevice failed, ret: 107002", "hccl_transport.cpp:323")
    assert line.endswith("\n")
    match = GLOG_NO_CONTEXT["hccl"].match(line.rstrip("\n"))
    assert match is not None
    assert int(match["tid"]) == threading.get_native_id()


def test_core_import_does_not_leak_plugins_into_this_process():
    assert str(SITE) not in sys.path
    assert "torch_npu" not in sys.modules
    assert "mooncake.engine" not in sys.modules or not hasattr(
        sys.modules["mooncake.engine"], "SimulatedAscendTransferEngine"
    )


# ---------------------------------------------------------------------------------------
# simulated torch_npu, in a subprocess
# ---------------------------------------------------------------------------------------
NPU_SCRIPT = """
import json, sys, threading
import torch
import torch_npu
import torch.distributed as dist
from initorch_simulation.acl import ACL, SimulatedAclError
from initorch_simulation.pinned import PINNED

r = {"mooncake_imported_by_torch_npu": "mooncake.engine" in sys.modules}
r["device_str"] = str(torch.device("npu:1"))
mod = torch.get_device_module("npu")
r["module_is_torch_npu_npu"] = mod is torch_npu.npu is torch.npu
r["count"] = mod.device_count()
mod.set_device(1)
r["acl_main"] = ACL.get_device()
r["current_main"] = torch.npu.current_device()
r["log"] = [(x.thread_name, x.device, x.physical_id) for x in ACL.set_device_log()]

def helper():
    r["current_helper"] = torch.npu.current_device()
    try:
        ACL.get_device()
    except SimulatedAclError as e:
        r["helper_error"] = [str(e), e.code]
t = threading.Thread(target=helper); t.start(); t.join()

try:
    mod.set_device(2)
except RuntimeError as e:
    r["invalid"] = str(e)

torch.accelerator.set_device_index(0)
r["accelerator"] = [str(torch.accelerator.current_accelerator()),
                    torch.accelerator.current_device_index(), ACL.get_device()]
with torch.accelerator.device_index(1):
    r["accelerator"].append(ACL.get_device())
r["accelerator"].append(ACL.get_device())
mod.set_device(1)

pool = torch.empty(1024, dtype=torch.uint8, pin_memory=True)
r["pool_pinned"] = PINNED.is_pinned(pool.data_ptr()) and pool.is_pinned()
r["pool_block"] = [
    [b.ptr, b.nbytes, b.backend] for b in PINNED.live_blocks() if b.ptr == pool.data_ptr()
]
r["pool_ptr"] = pool.data_ptr()
r["plain_pinned"] = torch.empty(8).is_pinned()
copy = torch.arange(4.0).pin_memory()
r["copy"] = [copy.is_pinned(), copy.tolist()]

dist.init_process_group(backend="hccl", store=dist.HashStore(), rank=0, world_size=1)
t = torch.full((3,), 2.0)
dist.all_reduce(t)
r["pg"] = [dist.get_backend(), t.tolist(), type(dist.group.WORLD._get_backend(
    torch.device("cpu"))).__name__]
dist.destroy_process_group()

from mooncake.engine import TransferEngine
r["engine_class"] = TransferEngine.__name__
try:
    import torch_musa
except RuntimeError as e:
    r["musa_refused"] = str(e)
print(json.dumps(r))
"""


@pytest.fixture(scope="module")
def npu_report(tmp_path_factory):
    tmp = tmp_path_factory.mktemp("npu")
    return _report(_run_simulated(NPU_SCRIPT, tmp, ASCEND_RT_VISIBLE_DEVICES="4,5"))


@pytest.mark.e2e  # the report comes from a fresh interpreter with torch
def test_npu_device_module_reaches_simulated_runtime(npu_report):
    assert npu_report["device_str"] == "npu:1"
    assert npu_report["module_is_torch_npu_npu"] is True
    assert npu_report["count"] == 2
    assert npu_report["acl_main"] == 1
    assert npu_report["current_main"] == 1
    assert npu_report["log"][0] == ["MainThread", 1, 5]


@pytest.mark.e2e  # the report comes from a fresh interpreter with torch
def test_torch_accelerator_api_reaches_simulated_runtime(npu_report):
    # torch.accelerator.set_device_index(0), then device_index(1) as a context manager
    assert npu_report["accelerator"] == ["npu", 0, 0, 1, 0]


@pytest.mark.e2e  # the report comes from a fresh interpreter with torch
def test_npu_helper_thread_has_no_context(npu_report):
    assert npu_report["current_helper"] == 0  # torch_npu answers 0 without binding...
    assert npu_report["helper_error"] == ["Call aclrtGetDevice failed, ret: 107002", 107002]


@pytest.mark.e2e  # the report comes from a fresh interpreter with torch
def test_npu_invalid_index_through_torch(npu_report):
    assert "invalid device id 2" in npu_report["invalid"]
    assert npu_report["invalid"].startswith("Call aclrtSetDevice failed, ret: 107001")


@pytest.mark.e2e  # the report comes from a fresh interpreter with torch
def test_npu_pin_memory_is_recorded_as_pinned(npu_report):
    assert npu_report["pool_pinned"] is True
    assert npu_report["pool_block"] == [[npu_report["pool_ptr"], 1024, "npu"]]
    assert npu_report["plain_pinned"] is False
    assert npu_report["copy"] == [True, [0.0, 1.0, 2.0, 3.0]]


@pytest.mark.e2e  # the report comes from a fresh interpreter with torch
def test_hccl_process_group_runs_real_gloo(npu_report):
    assert npu_report["pg"] == ["hccl", [2.0, 2.0, 2.0], "ProcessGroupGloo"]


@pytest.mark.e2e  # the report comes from a fresh interpreter with torch
def test_torch_npu_import_does_not_import_mooncake_but_hooks_it(npu_report):
    assert npu_report["mooncake_imported_by_torch_npu"] is False
    assert npu_report["engine_class"] == "SimulatedAscendTransferEngine"


@pytest.mark.e2e  # the report comes from a fresh interpreter with torch
def test_npu_and_musa_refuse_to_share_a_process(npu_report):
    message = npu_report["musa_refused"]
    assert "PrivateUse1" in message
    assert "already claimed by 'npu'" in message


# ---------------------------------------------------------------------------------------
# torch.npu.current_device() on an unbound thread, in a subprocess
# ---------------------------------------------------------------------------------------
# torch_npu 2.14.0 answers 0 there and binds nothing: c10_npu::GetDevice turns
# ACL_ERROR_RT_CONTEXT_NULL into 0 without aclrtSetDevice (Ascend/pytorch 9e73e708,
# torch_npu/csrc/core/npu/NPUFunctions.cpp:196-221; the wheel's libtorch_npu.so calls no
# aclrtSetDevice from GetDevice), and the first call's _lazy_init binds nothing on
# CANN >= 8.3.RC1 (npu_sys_ctrl.cpp:238-252).  The script asks first on the main thread
# (the process's first query) and then on a helper thread, before any set_device.
NPU_UNBOUND_SCRIPT = """
import json, threading
import torch
import torch_npu
from initorch_simulation.acl import ACL, SimulatedAclError

def probe():
    answer = torch.npu.current_device()
    try:
        after = ACL.get_device()
    except SimulatedAclError as e:
        after = e.code
    return {"answer": answer, "acl_after": after, "thread": threading.get_ident()}

r = {"main": probe()}
box = []
helper = threading.Thread(target=lambda: box.append(probe()), name="asker")
helper.start(); helper.join()
r["helper"] = box[0]
r["log"] = [[x.thread_name, x.device] for x in ACL.set_device_log()]
r["bound"] = sorted(ACL.devices_by_thread())
print(json.dumps(r))
"""


@pytest.fixture(scope="module")
def npu_unbound_report(tmp_path_factory):
    tmp = tmp_path_factory.mktemp("npu_unbound")
    return _report(_run_simulated(NPU_UNBOUND_SCRIPT, tmp))


@pytest.mark.e2e  # the report comes from a fresh interpreter with torch
@pytest.mark.parametrize("thread", ["main", "helper"])
def test_npu_current_device_on_unbound_thread_answers_zero(npu_unbound_report, thread):
    assert npu_unbound_report[thread]["answer"] == 0


@pytest.mark.e2e  # the report comes from a fresh interpreter with torch
@pytest.mark.parametrize("thread", ["main", "helper"])
def test_npu_current_device_leaves_the_asking_thread_unbound(npu_unbound_report, thread):
    # aclrtGetDevice still finds no context on the thread that asked...
    assert npu_unbound_report[thread]["acl_after"] == 107002
    assert npu_unbound_report[thread]["thread"] not in npu_unbound_report["bound"]
    # ...and asking recorded no set_device anywhere in the process.
    assert npu_unbound_report["log"] == []


# ---------------------------------------------------------------------------------------
# simulated Ascend transport for Mooncake, in a subprocess
# ---------------------------------------------------------------------------------------
MOONCAKE_SCRIPT = """
import ctypes, json, os, threading
import mooncake.engine            # imported first: the hook must patch at once
import torch, torch_npu
from mooncake.engine import TransferEngine
from initorch_simulation.acl import ACL
from initorch.steps.mooncake_build import installed_build

BUILD = os.environ["INITORCH_SIM_MOONCAKE_BUILD"]
HOST = "127.0.0.1:12001:npu_3" if BUILD == "hccl" else "127.0.0.1"
r = {"patched": TransferEngine.__name__, "build_read": installed_build().ascend}

def marker(text):
    os.write(2, ("@@ " + text + "\\n").encode())

def on_helper(fn):
    box = []
    t = threading.Thread(target=lambda: box.append(fn())); t.start(); t.join()
    return box[0]

marker("before-set-device")
r["rc_before_set_device"] = TransferEngine().initialize(HOST, "P2PHANDSHAKE", "ascend", "")
torch.npu.set_device(3)

def helper():
    marker("helper-tid %d" % threading.get_native_id())
    return [TransferEngine().initialize(HOST, "P2PHANDSHAKE", "ascend", ""),
            TransferEngine().initialize("127.0.0.1", "P2PHANDSHAKE", "tcp", "")]
r["rc_helper"], r["rc_helper_tcp"] = on_helper(helper)
marker("main-with-context")

engine = TransferEngine()
r["rc_main"] = engine.initialize(HOST, "P2PHANDSHAKE", "ascend", "")
b = engine.simulated_ascend
r["binding"] = [b.build, b.device_logic_id, b.hostname_physical_id, b.delegated_hostname]
src = ctypes.create_string_buffer(b"simulated ascend bytes", 64)
dst = ctypes.create_string_buffer(64)
s, d = ctypes.addressof(src), ctypes.addressof(dst)
marker("register-on-helper")
r["register_helper"] = on_helper(lambda: engine.register_memory(s, 64))
marker("register-on-main")
if r["register_helper"] == 0:
    engine.unregister_memory(s)
r["register"] = [engine.register_memory(s, 64), engine.register_memory(d, 64)]
peer = "127.0.0.1:%d" % engine.get_rpc_port()
r["write"] = engine.transfer_sync_write(peer, s, d, 32)
r["received"] = dst.raw[:22].decode()
r["unregister"] = [engine.unregister_memory(s), engine.unregister_memory(d)]
os.environ["MC_FORCE_TCP"] = "1"
r["rc_forced_tcp_helper"] = on_helper(
    lambda: TransferEngine().initialize(HOST, "P2PHANDSHAKE", "ascend", ""))
print(json.dumps(r))
"""


@pytest.fixture(scope="module", params=["ascend_direct", "hccl"])
def mooncake_report(request, tmp_path_factory):
    pytest.importorskip("mooncake.engine")
    tmp = tmp_path_factory.mktemp("mooncake")
    report = _report(_run_simulated(MOONCAKE_SCRIPT, tmp, INITORCH_SIM_DEVICE_COUNT="8",
                                    INITORCH_SIM_MOONCAKE_BUILD=request.param))
    report["_build"] = request.param
    return report


def _stderr_section(stderr: str, start: str, end: str) -> str:
    return stderr.split(f"@@ {start}", 1)[1].split(f"@@ {end}", 1)[0]


@pytest.mark.e2e  # the report comes from a fresh interpreter with torch
def test_hook_patches_an_already_imported_engine(mooncake_report):
    assert mooncake_report["patched"] == "SimulatedAscendTransferEngine"


@pytest.mark.e2e  # the report comes from a fresh interpreter with torch
def test_the_simulated_binary_names_the_build(mooncake_report):
    assert mooncake_report["build_read"] == mooncake_report["_build"]


@pytest.mark.e2e  # the report comes from a fresh interpreter with torch
def test_ascend_engine_fails_before_set_device(mooncake_report):
    assert mooncake_report["rc_before_set_device"] == -1
    section = _stderr_section(mooncake_report["_stderr"], "before-set-device", "helper-tid")
    assert len(GLOG_NO_CONTEXT[mooncake_report["_build"]].findall(section)) == 1
    assert "Failed to install Ascend transport" in section


@pytest.mark.e2e  # the report comes from a fresh interpreter with torch
def test_ascend_engine_fails_on_helper_thread_without_context(mooncake_report):
    assert mooncake_report["rc_helper"] == -1
    stderr = mooncake_report["_stderr"]
    helper_tid = re.search(r"@@ helper-tid (\d+)", stderr)[1]
    section = _stderr_section(stderr, "helper-tid", "main-with-context")
    matches = list(GLOG_NO_CONTEXT[mooncake_report["_build"]].finditer(section))
    assert {m["tid"] for m in matches} == {helper_tid}


@pytest.mark.e2e  # the report comes from a fresh interpreter with torch
def test_an_ascend_build_ignores_the_protocol(mooncake_report):
    # transfer_engine_impl.cpp init: Ascend builds install ascend whatever the protocol.
    assert mooncake_report["rc_helper_tcp"] == -1


@pytest.mark.e2e  # the report comes from a fresh interpreter with torch
def test_mc_force_tcp_skips_the_ascend_transport(mooncake_report):
    assert mooncake_report["rc_forced_tcp_helper"] == 0


@pytest.mark.e2e  # the report comes from a fresh interpreter with torch
def test_ascend_engine_succeeds_with_context_and_moves_real_bytes(mooncake_report):
    build = mooncake_report["_build"]
    assert mooncake_report["rc_main"] == 0
    expected = [build, 3, 3, "127.0.0.1:12001"] if build == "hccl" else \
        [build, 3, None, "127.0.0.1"]
    assert mooncake_report["binding"] == expected
    assert mooncake_report["register"] == [0, 0]
    assert mooncake_report["write"] == 0
    assert mooncake_report["received"] == "simulated ascend bytes"
    assert mooncake_report["unregister"] == [0, 0]
    section = _stderr_section(mooncake_report["_stderr"], "main-with-context",
                              "register-on-helper")
    assert GLOG_NO_CONTEXT[build].search(section) is None


@pytest.mark.e2e  # the report comes from a fresh interpreter with torch
def test_only_ascend_direct_registers_memory_through_acl(mooncake_report):
    section = _stderr_section(mooncake_report["_stderr"], "register-on-helper",
                              "register-on-main")
    if mooncake_report["_build"] == "ascend_direct":
        assert mooncake_report["register_helper"] == -1
        assert re.search(r"ascend_direct_transport\.cpp:80\] Call acl failed, detail: ", section)
    else:
        assert mooncake_report["register_helper"] == 0
        assert "Call acl failed" not in section


# ---------------------------------------------------------------------------------------
# simulated torch_musa, in a subprocess
# ---------------------------------------------------------------------------------------
MUSA_SCRIPT = """
import json, threading
import torch
import torch_musa
import torch.distributed as dist
from initorch_simulation.musa import MUSA
from initorch_simulation.pinned import PINNED

r = {"count": torch.musa.device_count(), "device_str": str(torch.device("musa:2"))}
torch.get_device_module("musa").set_device(2)
r["main"] = torch.musa.current_device()
box = []
t = threading.Thread(target=lambda: box.append(torch.musa.current_device())); t.start(); t.join()
r["helper"] = box[0]
r["log"] = [(x.thread_name, x.device) for x in MUSA.set_device_log()]

buf = torch.empty(256, dtype=torch.uint8)
r["cudart"] = repr(torch.cuda.cudart())
try:
    torch.cuda.cudart().cudaHostRegister(buf.data_ptr(), buf.numel(), 0)
except AttributeError as e:
    r["host_register"] = f"{type(e).__name__}: {e}"

pool = torch.zeros(128, dtype=torch.uint8, pin_memory=True)
r["pool"] = [pool.is_pinned(), [b.backend for b in PINNED.live_blocks()]]

dist.init_process_group(backend="mccl", store=dist.HashStore(), rank=0, world_size=1)
t = torch.ones(2)
dist.all_reduce(t)
r["pg"] = [dist.get_backend(), t.tolist()]
dist.destroy_process_group()
try:
    import torch_npu
except RuntimeError as e:
    r["npu_refused"] = str(e)
print(json.dumps(r))
"""


@pytest.fixture(scope="module")
def musa_report(tmp_path_factory):
    tmp = tmp_path_factory.mktemp("musa")
    return _report(_run_simulated(MUSA_SCRIPT, tmp, MUSA_VISIBLE_DEVICES="0,1,2,3"))


@pytest.mark.e2e  # the report comes from a fresh interpreter with torch
def test_musa_device_module_is_per_thread(musa_report):
    assert musa_report["count"] == 4
    assert musa_report["device_str"] == "musa:2"
    assert musa_report["main"] == 2
    assert musa_report["helper"] == 0  # a thread without set_device lands on device 0
    assert musa_report["log"] == [["MainThread", 2]]


@pytest.mark.e2e  # the report comes from a fresh interpreter with torch
def test_musa_cuda_host_register_path_crashes_like_real_musa(musa_report):
    assert musa_report["cudart"] == "None"
    assert musa_report["host_register"] == (
        "AttributeError: 'NoneType' object has no attribute 'cudaHostRegister'"
    )


@pytest.mark.e2e  # the report comes from a fresh interpreter with torch
def test_musa_pin_memory_path_is_recorded(musa_report):
    assert musa_report["pool"] == [True, ["musa"]]


@pytest.mark.e2e  # the report comes from a fresh interpreter with torch
def test_mccl_process_group_runs_real_gloo(musa_report):
    assert musa_report["pg"] == ["mccl", [1.0, 1.0]]


@pytest.mark.e2e  # the report comes from a fresh interpreter with torch
def test_musa_then_npu_is_refused(musa_report):
    assert "already claimed by 'musa'" in musa_report["npu_refused"]


# ---------------------------------------------------------------------------------------
# simulated missing CANN toolkit
# ---------------------------------------------------------------------------------------
def test_torch_npu_without_cann_fails_like_the_real_import(tmp_path):
    code = """
    import json, sys
    try:
        import torch_npu
    except ImportError as e:
        print(json.dumps([type(e).__name__, str(e), "torch_npu" in sys.modules]))
    """
    proc = _run_simulated(code, tmp_path, INITORCH_SIM_CANN_MISSING="1")
    assert proc.returncode == 0, proc.stderr
    assert json.loads(proc.stdout) == [
        "ImportError",
        "libhccl.so: cannot open shared object file: No such file or directory",
        False,
    ]
