"""The built-in device probes: how ``--profile auto`` tells an Ascend host from a CUDA one.

Priority order, first fit wins (documented in docs/hardware.md): **npu, musa, rocm,
cuda, xpu, mps, cpu**.  npu comes before cuda because torch_npu's
``transfer_to_npu`` patches ``torch.cuda`` names onto the NPU, so a CUDA check
run after ``import torch_npu`` answers yes on an Ascend host (accelerate probes
``is_npu_available`` before CUDA for that reason, ``accelerate/utils/imports.py``);
musa before cuda for the same reason (torch_musa's CUDA compatibility layer);
rocm before cuda because ROCm builds of torch answer ``torch.cuda`` too.

A static probe imports nothing; it checks, in this order, and reports every
check that fails:

* the Python package (``importlib.util.find_spec``: found, not imported);
* the runtime library, on the loader's path (``LD_LIBRARY_PATH``, ``ld.so.conf``,
  the system folders) or where the vendor installs it;
* a device node (``/dev/davinci0``, ``/dev/nvidia0``, ...);
* the visible-devices variable: set to nothing (or ``-1``) it hides every device.

A deep probe (``initorch detect --import``) also imports the package and asks
the device module how many devices it sees, in a child process (one per probe that
passed its static checks) that it stops after ``Machine.import_timeout_s``, naming
the package it was importing: a vendor import that never ends, even in native code
that holds the interpreter, is a rejection, not a command that hangs.
"""

from __future__ import annotations

import glob
import importlib.util
import os
import re
from collections.abc import Iterator, Mapping
from pathlib import Path

from initorch.plugin import DeviceProbe, Machine, Verdict, record

# Where the dynamic loader looks when nothing else says (ld.so(8); Debian multiarch).
SYSTEM_LIBRARY_DIRS = ("/lib", "/usr/lib", "/lib64", "/usr/lib64", "/usr/local/lib",
                       "/lib/x86_64-linux-gnu", "/usr/lib/x86_64-linux-gnu",
                       "/lib/aarch64-linux-gnu", "/usr/lib/aarch64-linux-gnu")
HIDDEN = ("", "-1", "none", "NoDevFiles")  # visible-devices values that hide every device


@record
class HardwareProbe:
    """One device's probe, as data: what must be installed and present.

    ``library_dirs`` may name environment variables (``$ASCEND_TOOLKIT_HOME/lib64``);
    ``device_nodes`` are glob patterns, any match will do; ``systems`` limits the
    probe to operating systems (``darwin`` and ``arm64`` for MPS).  ``count`` is the
    device module's function a deep probe calls; ``build`` an attribute of torch
    that must be set (``torch.version.hip`` tells ROCm builds from CUDA ones).
    """

    device: str
    priority: int
    source: str
    packages: tuple[str, ...] = ()
    libraries: tuple[str, ...] = ()
    library_dirs: tuple[str, ...] = ()
    device_nodes: tuple[str, ...] = ()
    visible_env: tuple[str, ...] = ()
    systems: tuple[str, ...] = ("linux",)
    arches: tuple[str, ...] = ()
    count: str | None = None
    build: str | None = None
    always: str | None = None

    def probe(self, machine: Machine, deep: bool) -> Verdict:
        if self.always is not None:
            return Verdict(True, (self.always,))
        problems = list(self._static_problems(machine))
        if problems:
            return Verdict(False, tuple(problems))
        found = [f"package {', '.join(self.packages)} installed"] if self.packages else []
        found += [f"{name} at {path}" for name in self.libraries
                  if (path := find_library(machine, name, self.library_dirs)) is not None]
        nodes = self._device_nodes(machine)
        if nodes:
            shown = ", ".join(nodes[:2]) + (f" (+{len(nodes) - 2})" if len(nodes) > 2 else "")
            found.append(f"device node {shown}")
        if deep:
            return self._deep(found, machine)
        return Verdict(True, tuple(found) or (f"this is {machine.system} {machine.arch}",))

    def _static_problems(self, machine: Machine) -> Iterator[str]:
        if machine.system not in self.systems or (self.arches and
                                                  machine.arch not in self.arches):
            wanted = " or ".join(self.systems) + (f" on {'/'.join(self.arches)}"
                                                  if self.arches else "")
            yield f"needs {wanted}; this is {machine.system} {machine.arch}"
            return
        for package in self.packages:
            if not package_installed(package):
                yield f"package {package} missing"
        for name in self.libraries:
            if find_library(machine, name, self.library_dirs) is None:
                yield f"runtime library {name} missing"
        if self.device_nodes and not self._device_nodes(machine):
            yield f"no device node {' or '.join(self.device_nodes)}"
        for variable in self.visible_env:
            value = machine.environ.get(variable)
            if value is not None and value.strip() in HIDDEN:
                yield f"no device visible: {variable}={value!r} hides them all"

    def _device_nodes(self, machine: Machine) -> list[str]:
        found: list[str] = []
        for pattern in self.device_nodes:
            found += sorted("/" + str(Path(hit).relative_to(machine.root))
                            for hit in glob.glob(str(machine.path(pattern))))
        return found

    def _deep(self, found: list[str], machine: Machine) -> Verdict:
        """Import the packages and count devices, in a child process given
        ``machine.import_timeout_s``: the answer torch itself gives, without importing a
        vendor stack into this process, and bounded even when the import hangs in
        native code that holds the interpreter (a thread cannot be stopped, nor even
        waited for then)."""
        answer = import_in_child(self, machine)
        if answer.problem is not None:
            return Verdict(False, (answer.problem,))
        if self.build is not None and not answer.build:
            return Verdict(False, (f"this torch is not that build ({self.build} is not set)",))
        if self.count is None:
            return Verdict(True, tuple(found))
        if not answer.devices:
            return Verdict(False, (f"no device visible: {self.count}() is 0",))
        return Verdict(True, (*found, f"{answer.devices} device(s) visible ({self.count})"))


# What the child of a deep probe runs: it says each package before importing it (on stdout
# for the parent, which names the one that hangs; on stderr for whoever watches), then
# answers one JSON line.  Arguments: a JSON object with the probe's device, packages,
# build attribute and count function.
_CHILD = """
import importlib, json, sys
spec = json.loads(sys.argv[1])
def say(**answer):
    sys.stdout.write(json.dumps(answer) + "\\n")
    sys.stdout.flush()
def attribute(dotted):
    value = sys.modules["torch"]
    for name in dotted.split(".")[1:]:
        value = getattr(value, name, None)
    return value
for name in spec["packages"]:
    say(doing="importing " + name)
    sys.stderr.write("initorch: detect: importing %s for %s\\n" % (name, spec["device"]))
    sys.stderr.flush()
    try:
        importlib.import_module(name)
    except ImportError as exc:
        say(problem="package %s fails to import: %s" % (name, exc))
        raise SystemExit(0)
    except Exception as exc:
        say(problem="package %s fails to import: %s: %s" % (name, type(exc).__name__, exc))
        raise SystemExit(0)
build = bool(attribute(spec["build"])) if spec["build"] else True
devices = None
if spec["count"] and build:
    say(doing="calling " + spec["count"] + "()")
    devices = int(attribute(spec["count"])())
say(build=build, devices=devices)
"""


@record
class ChildAnswer:
    """What a deep probe's child found: a problem that rejects the device, or whether
    torch is the probe's build and how many devices it counts."""

    problem: str | None = None
    build: bool = False
    devices: int | None = None


def import_in_child(probe: HardwareProbe, machine: Machine) -> ChildAnswer:
    """Run :data:`_CHILD` for ``probe`` with this interpreter and the machine's
    environment, and stop it (SIGKILL) after ``machine.import_timeout_s``, naming what
    it was doing."""
    import json
    import subprocess
    import sys

    spec = {"device": probe.device, "packages": [*probe.packages, "torch"],
            "build": probe.build, "count": probe.count}
    timeout = machine.import_timeout_s
    child = subprocess.Popen([sys.executable, "-c", _CHILD, json.dumps(spec)],
                             stdin=subprocess.DEVNULL, stdout=subprocess.PIPE,
                             env=dict(machine.environ), text=True)
    try:
        out, _ = child.communicate(timeout=timeout)
        timed_out = False
    except subprocess.TimeoutExpired:
        child.kill()
        out, _ = child.communicate()
        timed_out = True
    said = [json.loads(line) for line in out.splitlines() if line.startswith("{")]
    doing = next((line["doing"] for line in reversed(said) if "doing" in line), "starting")
    if timed_out:
        return ChildAnswer(f"{doing} did not finish within {timeout:g}s (stopped; a driver "
                           "waiting for a device that is not there?)")
    final = said[-1] if said else {}
    if "problem" in final:
        return ChildAnswer(str(final["problem"]))
    if "build" not in final:
        return ChildAnswer(f"{doing} ended the probe's process with status "
                           f"{child.returncode} (its own lines are above)")
    devices = final["devices"]
    return ChildAnswer(None, bool(final["build"]), None if devices is None else int(devices))


def package_installed(name: str) -> bool:
    """Whether ``name`` can be imported, found without importing it (nor its parent)."""
    try:
        return importlib.util.find_spec(name) is not None
    except (ImportError, ValueError):  # a parent package that is not there
        return False


def find_library(machine: Machine, name: str, extra_dirs: tuple[str, ...] = ()) -> str | None:
    """Where the loader (or the vendor's install) has ``name`` (``libcuda.so.1``), or None."""
    for folder in _library_dirs(machine, extra_dirs):
        hits = sorted(glob.glob(str(machine.path(folder) / f"{name}*")))
        if hits:
            return "/" + str(Path(hits[0]).relative_to(machine.root))
    return None


def _library_dirs(machine: Machine, extra_dirs: tuple[str, ...]) -> Iterator[str]:
    for entry in machine.environ.get("LD_LIBRARY_PATH", "").split(os.pathsep):
        if entry.startswith("/"):
            yield entry
    for folder in extra_dirs:
        expanded = _expand(folder, machine.environ)
        if expanded is not None:
            yield expanded
    yield from _ld_so_conf(machine, "/etc/ld.so.conf", depth=0)
    yield from SYSTEM_LIBRARY_DIRS


def _expand(folder: str, environ: Mapping[str, str]) -> str | None:
    """``$VAR/lib64`` with ``VAR`` from ``environ``; None when a variable is unset."""
    missing = False

    def value(match: re.Match[str]) -> str:
        nonlocal missing
        found = environ.get(match.group(1))
        missing = missing or not found
        return found or ""

    expanded = re.sub(r"\$\{?([A-Za-z_][A-Za-z0-9_]*)\}?", value, folder)
    return None if missing or not expanded.startswith("/") else expanded


def _ld_so_conf(machine: Machine, path: str, depth: int) -> Iterator[str]:
    """The folders ``/etc/ld.so.conf`` lists, following ``include`` lines."""
    if depth > 4:
        return
    try:
        text = machine.path(path).read_text(encoding="utf-8", errors="replace")
    except OSError:
        return
    for raw in text.splitlines():
        line = raw.split("#", 1)[0].strip()
        if line.startswith("include "):
            pattern = line.split(None, 1)[1]
            if not pattern.startswith("/"):
                pattern = str(Path(path).parent / pattern)
            for included in sorted(glob.glob(str(machine.path(pattern)))):
                relative = "/" + str(Path(included).relative_to(machine.root))
                yield from _ld_so_conf(machine, relative, depth + 1)
        elif line.startswith("/"):
            yield line


ASCEND_TOOLKIT_LIBS = ("$ASCEND_TOOLKIT_HOME/lib64", "$ASCEND_HOME_PATH/lib64",
                       "/usr/local/Ascend/ascend-toolkit/latest/lib64")

BUILTIN_PROBES: tuple[DeviceProbe, ...] = (
    HardwareProbe(
        "npu", 10, "torch_npu with CANN (libascendcl.so, from the toolkit's set_env.sh); the "
        "Ascend driver's /dev/davinciN; ASCEND_RT_VISIBLE_DEVICES",
        packages=("torch_npu",), libraries=("libascendcl.so",),
        library_dirs=ASCEND_TOOLKIT_LIBS, device_nodes=("/dev/davinci[0-9]*",),
        visible_env=("ASCEND_RT_VISIBLE_DEVICES",), count="torch.npu.device_count"),
    HardwareProbe(
        "musa", 20, "torch_musa with the MUSA toolkit (libmusart.so, /usr/local/musa); "
        "Moore Threads' driver /dev/mtgpu.N; MUSA_VISIBLE_DEVICES",
        packages=("torch_musa",), libraries=("libmusart.so",),
        library_dirs=("$MUSA_HOME/lib", "/usr/local/musa/lib"), device_nodes=("/dev/mtgpu*",),
        visible_env=("MUSA_VISIBLE_DEVICES",), count="torch.musa.device_count"),
    HardwareProbe(
        "rocm", 30, "a ROCm build of torch (torch.version.hip); HIP runtime libamdhip64.so "
        "(/opt/rocm/lib); the amdgpu driver's /dev/kfd; HIP_VISIBLE_DEVICES",
        packages=("torch",), libraries=("libamdhip64.so",),
        library_dirs=("$ROCM_PATH/lib", "/opt/rocm/lib"), device_nodes=("/dev/kfd",),
        visible_env=("HIP_VISIBLE_DEVICES", "ROCR_VISIBLE_DEVICES"),
        count="torch.cuda.device_count", build="torch.version.hip"),
    HardwareProbe(
        "cuda", 40, "a CUDA build of torch (torch.version.cuda); the NVIDIA driver's "
        "libcuda.so.1 and /dev/nvidiaN; CUDA_VISIBLE_DEVICES",
        packages=("torch",), libraries=("libcuda.so.1",), device_nodes=("/dev/nvidia[0-9]*",),
        visible_env=("CUDA_VISIBLE_DEVICES",), count="torch.cuda.device_count",
        build="torch.version.cuda"),
    HardwareProbe(
        "xpu", 50, "torch with XPU; the Level Zero loader libze_loader.so.1; a DRM render "
        "node /dev/dri/renderD*; ZE_AFFINITY_MASK",
        packages=("torch",), libraries=("libze_loader.so.1",),
        device_nodes=("/dev/dri/renderD*",), visible_env=("ZE_AFFINITY_MASK",),
        count="torch.xpu.device_count"),
    HardwareProbe(
        "mps", 60, "torch on macOS on Apple silicon (torch.backends.mps)",
        packages=("torch",), systems=("darwin",), arches=("arm64",),
        count="torch.backends.mps.is_available"),
    HardwareProbe("cpu", 1000, "the host CPU", always="the host CPU is always there"),
)
