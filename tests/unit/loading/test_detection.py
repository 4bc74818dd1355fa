"""Hardware detection: ``initorch detect``, ``--profile auto`` and no ``--profile`` at all.

On this machine the CPU is chosen and every other candidate is rejected with a reason;
with the simulated Ascend stack (``tests/support/simulated/``) and a simulated host root that
also has an NVIDIA driver, npu is chosen over cuda, because npu is probed first.
"""

from __future__ import annotations

import importlib
import json
import sys
from pathlib import Path

import pytest

from initorch import Registry, detect_device
from initorch.loading.detection import PROBE_GRACE_S, ProbeCatalog, detect
from initorch.plugin import Detection, Machine, Verdict
from initorch.steps.detect import BUILTIN_PROBES, HardwareProbe, find_library
from tests.support.commands import initorch_command, run_python
from tests.support.paths import SIMULATED_SITE

PRIORITY = ["npu", "musa", "rocm", "cuda", "xpu", "mps", "cpu"]
REJECTIONS = ("package ", "runtime library ", "no device node ", "needs darwin",
              "no device visible", "this torch is not that build")


def simulated_host(root: Path, *devices: str) -> Path:
    """A host root with the simulated device nodes and vendor libraries of ``devices``."""
    sys.path.insert(0, str(SIMULATED_SITE))
    try:
        machine = importlib.import_module("initorch_simulation.machine")
    finally:
        sys.path.remove(str(SIMULATED_SITE))
    return Path(machine.build_root(root, devices))


def detect_json(*args: str, env: dict[str, str] | None = None, simulated: bool = False
                ) -> dict:
    result = initorch_command("detect", "--json", *args, env=env, simulated=simulated)
    assert result.returncode == 0, result.stderr
    return json.loads(result.stdout)


def by_device(data: dict) -> dict[str, dict]:
    return {c["device"]: c for c in data["candidates"]}


def test_the_documented_priority_order():
    assert [probe.device for probe in sorted(BUILTIN_PROBES, key=lambda p: p.priority)] == \
        PRIORITY


def test_this_cpu_machine_chooses_cpu_and_says_why_each_other_is_rejected():
    data = detect_json()
    assert [c["device"] for c in data["candidates"]] == PRIORITY
    assert (data["chosen"], data["deep"]) == ("cpu", False)
    for candidate in data["candidates"][:-1]:
        assert candidate["status"] == "rejected", candidate
        assert candidate["reasons"] and all(
            reason.startswith(REJECTIONS) for reason in candidate["reasons"]), candidate
    candidates = by_device(data)
    assert "package torch_npu missing" in candidates["npu"]["reasons"]
    assert "runtime library libcuda.so.1 missing" in candidates["cuda"]["reasons"]
    assert candidates["cpu"] == {"device": "cpu", "priority": 1000, "status": "chosen",
                                 "reasons": ["the host CPU is always there"]}


def test_the_table_names_every_candidate_and_the_choice():
    result = initorch_command("detect")
    assert result.returncode == 0, result.stderr
    lines = result.stdout.splitlines()
    assert lines[0].split() == ["device", "result", "why"]
    assert [line.split()[0] for line in lines[1:8]] == PRIORITY
    assert lines[1].split()[1] == "rejected" and lines[7].split()[1] == "chosen"
    assert lines[-1] == "chosen: cpu (static: nothing imported; --import also counts devices)"


def test_npu_is_chosen_over_cuda_on_a_simulated_host_with_both(tmp_path):
    root = simulated_host(tmp_path / "host", "npu", "cuda")
    data = detect_json("--root", str(root), simulated=True)
    candidates = by_device(data)
    assert data["chosen"] == "npu"
    assert candidates["npu"]["reasons"] == [
        "package torch_npu installed",
        "libascendcl.so at /usr/local/Ascend/ascend-toolkit/latest/lib64/libascendcl.so",
        "device node /dev/davinci0, /dev/davinci1"]
    assert candidates["cuda"]["status"] == "fits"
    assert candidates["cuda"]["reasons"][-1] == "npu comes first"
    assert candidates["cpu"]["status"] == "fits"


@pytest.mark.e2e  # --import: the simulated torch_npu imports torch
def test_a_deep_probe_imports_the_simulated_torch_npu_and_counts_its_devices(tmp_path):
    root = simulated_host(tmp_path / "host", "npu", "cuda")
    data = detect_json("--root", str(root), "--import", simulated=True,
                       env={"ASCEND_RT_VISIBLE_DEVICES": "4,5,6"})
    npu = by_device(data)["npu"]
    assert (data["chosen"], data["deep"], npu["status"]) == ("npu", True, "chosen")
    assert npu["reasons"][-1] == "3 device(s) visible (torch.npu.device_count)"


@pytest.mark.e2e  # --import: the simulated torch_npu imports torch
def test_hidden_devices_and_a_missing_cann_are_rejections_with_reasons(tmp_path):
    root = simulated_host(tmp_path / "host", "npu", "cuda")
    hidden = by_device(detect_json("--root", str(root), simulated=True,
                                   env={"ASCEND_RT_VISIBLE_DEVICES": ""}))
    assert hidden["npu"]["reasons"] == ["no device visible: ASCEND_RT_VISIBLE_DEVICES='' hides "
                                        "them all"]
    assert hidden["cuda"]["status"] == "chosen"  # statically, the NVIDIA host is there
    deep = detect_json("--root", str(root), "--import", simulated=True,
                       env={"INITORCH_SIM_CANN_MISSING": "1"})
    candidates = by_device(deep)
    assert candidates["npu"]["reasons"][0].startswith(
        "package torch_npu fails to import: libhccl.so: cannot open shared object file")
    # the CPU build of torch is no CUDA build, however the host looks
    assert candidates["cuda"]["reasons"] == [
        "this torch is not that build (torch.version.cuda is not set)"]
    assert deep["chosen"] == "cpu"


def test_the_static_probe_imports_no_torch_and_plan_auto_is_a_dry_run():
    result = run_python("""
        import sys
        from initorch import detect_device, load_plan
        detection = detect_device()
        plan = load_plan(["auto"])
        print(detection.chosen, plan.device.type,
              sorted(m for m in ("torch", "torch_npu", "torch_musa", "mooncake")
                     if m in sys.modules))
    """)
    assert result.returncode == 0, result.stderr
    assert result.stdout.split() == ["cpu", "cpu", "[]"]


@pytest.mark.parametrize("args", [(), ("--profile", "auto")], ids=["no-profile", "auto"])
def test_plan_without_a_profile_detects_the_machine(args):
    result = initorch_command("plan", *args, env={"INITORCH_PROFILE": ""})
    assert result.returncode == 0, result.stderr
    assert result.stdout.splitlines()[:2] == ["profiles: base -> cpu", "device:   cpu"]
    assert result.stderr == ("initorch: profile auto: this machine is cpu ('initorch detect' "
                             "says why)\n")


def test_initorch_profile_is_the_default_selection():
    result = initorch_command("plan", "--json", env={"INITORCH_PROFILE": "npu,npu-hccl"})
    assert result.returncode == 0, result.stderr
    assert json.loads(result.stdout)["profiles"] == ["base", "npu", "npu-hccl"]
    assert result.stderr == ""


class Exploding:
    device, priority = "boom", 5

    def probe(self, machine: Machine, deep: bool) -> Verdict:
        raise SystemExit("a vendor library called exit()")


def test_a_probe_that_raises_is_a_rejection_never_a_crash():
    probes = ProbeCatalog()
    probes.extend([Exploding(), *BUILTIN_PROBES])
    detection = detect(probes, Machine())
    boom = detection.candidates[0]
    assert (boom.device, boom.status) == ("boom", "rejected")
    assert boom.reasons == ("the probe failed: SystemExit: a vendor library called exit()",)
    assert detection.chosen == "cpu"


class Hanging:
    """A vendor package whose import never ends, as a deep probe meets it."""

    device, priority = "hang", 5

    def __init__(self) -> None:
        import threading

        self.release = threading.Event()

    def probe(self, machine: Machine, deep: bool) -> Verdict:
        if deep:
            self.release.wait(30)  # stands for the import that never returns
        return Verdict(True, ("would fit",))


def test_a_deep_probe_that_hangs_is_a_bounded_rejection_that_says_where():
    # Issue 19: 'detect --import' printed nothing and waited for ever.
    import time

    hanging = Hanging()
    probes = ProbeCatalog()
    probes.extend([hanging, *BUILTIN_PROBES])
    announced: list[str] = []
    began = time.monotonic()
    try:
        detection = detect(probes, Machine(), deep=True, timeout_s=0.3,
                           announce=announced.append)
    finally:
        hanging.release.set()
    assert time.monotonic() - began < 10
    stuck = detection.candidates[0]
    assert (stuck.device, stuck.status) == ("hang", "rejected")
    assert stuck.reasons[0].startswith(f"the probe did not finish within "
                                       f"{0.3 + PROBE_GRACE_S:g}s: it hangs at ")
    assert detection.chosen == "cpu"
    assert announced[:2] == ["hang", "npu"]  # each deep probe is said before it starts


def test_a_plugin_probe_is_registered_like_the_built_ins():
    registry = Registry.with_plugins()
    registry.probes.add(HardwareProbe("tpu", 5, "test", always="a test device"))
    detection = detect_device(registry)
    assert isinstance(detection, Detection)
    assert (detection.chosen, detection.candidates[0].device) == ("tpu", "tpu")
    with pytest.raises(Exception, match="registered twice"):
        registry.probes.add(HardwareProbe("tpu", 6, "test"))


def test_libraries_are_found_on_the_loader_path_and_in_vendor_folders(tmp_path):
    (tmp_path / "etc" / "ld.so.conf.d").mkdir(parents=True)
    (tmp_path / "etc" / "ld.so.conf").write_text("include /etc/ld.so.conf.d/*.conf\n")
    (tmp_path / "etc" / "ld.so.conf.d" / "vendor.conf").write_text("# x\n/opt/vendor/lib\n")
    for folder, name in (("opt/vendor/lib", "libone.so.2"), ("custom", "libtwo.so"),
                         ("toolkit/lib64", "libthree.so")):
        (tmp_path / folder).mkdir(parents=True)
        (tmp_path / folder / name).touch()
    machine = Machine(tmp_path, {"LD_LIBRARY_PATH": "/custom:relative", "KIT": "/toolkit"})
    assert find_library(machine, "libone.so") == "/opt/vendor/lib/libone.so.2"
    assert find_library(machine, "libtwo.so") == "/custom/libtwo.so"
    assert find_library(machine, "libthree.so", ("$KIT/lib64",)) == "/toolkit/lib64/libthree.so"
    assert find_library(machine, "libthree.so", ("$UNSET/lib64",)) is None


# -- deep probes bounded in a child process (issue 27) -----------------------------------------

HANGS_IN_PYTHON = "import time\nwhile True:\n    time.sleep(3600)\n"
# A native call that keeps the interpreter's lock (PyDLL does not release it), as a driver
# waiting for a device does: no other thread of the process runs again, so a probe bounded
# by a thread waited for ever, without a word.
HANGS_IN_NATIVE_CODE = "import ctypes\nctypes.PyDLL(None).sleep(100000)\n"


def hanging_package(tmp_path: Path, monkeypatch: pytest.MonkeyPatch, code: str) -> Machine:
    """A package ``initorch_test_vendor`` whose import runs ``code``, on the path of this
    process (found statically) and of the probe's child; the machine that child sees."""
    site = tmp_path / "site"
    (site / "initorch_test_vendor").mkdir(parents=True)
    (site / "initorch_test_vendor" / "__init__.py").write_text(code, encoding="utf-8")
    monkeypatch.syspath_prepend(str(site))
    import os

    return Machine(environ={**os.environ, "PYTHONPATH": str(site)})


@pytest.mark.parametrize("code", [HANGS_IN_PYTHON, HANGS_IN_NATIVE_CODE],
                         ids=["python", "native-holding-the-gil"])
def test_a_vendor_import_that_never_ends_is_stopped_and_named(tmp_path, monkeypatch, capfd,
                                                              code):
    machine = hanging_package(tmp_path, monkeypatch, code)
    vendor = HardwareProbe("vendor", 5, "test", packages=("initorch_test_vendor",),
                           count="torch.cuda.device_count")
    probes = ProbeCatalog()
    probes.extend([vendor, *BUILTIN_PROBES])
    detection = detect(probes, machine, deep=True, timeout_s=1.0)
    stuck = detection.candidates[0]
    assert (stuck.device, stuck.status) == ("vendor", "rejected")
    assert stuck.reasons == ("importing initorch_test_vendor did not finish within 1s "
                             "(stopped; a driver waiting for a device that is not there?)",)
    assert detection.chosen == "cpu"
    # what is being imported is said as it starts, not only once it failed
    assert "initorch: detect: importing initorch_test_vendor for vendor" in \
        capfd.readouterr().err


def test_a_deep_probe_leaves_the_vendor_stack_out_of_this_process(tmp_path, monkeypatch):
    machine = hanging_package(tmp_path, monkeypatch, "import torch\n")
    vendor = HardwareProbe("vendor", 5, "test", packages=("initorch_test_vendor",),
                           count="torch.get_num_threads")
    probes = ProbeCatalog()
    probes.add(vendor)
    detection = detect(probes, machine, deep=True, timeout_s=120)
    assert detection.chosen == "vendor"
    assert detection.candidates[0].reasons[-1].endswith("device(s) visible "
                                                        "(torch.get_num_threads)")
    assert "initorch_test_vendor" not in sys.modules
