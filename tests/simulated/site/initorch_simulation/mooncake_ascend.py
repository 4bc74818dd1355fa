"""SIMULATED Ascend transport for the Mooncake transfer engine.

The real ``mooncake.engine.TransferEngine`` built for Ascend calls ``aclrtGetDevice``
on the *calling thread* while ``initialize(..., protocol="ascend", ...)`` sets up the
local segment.  Without a device context on that thread it logs (glog, stderr), as
one line::

    E<mmdd> <hh:mm:ss.uuuuuu> <tid> ascend_transport.cpp:<line>] \
        Call aclrtGetDevice failed, ret: 107002

and ``initialize`` returns -1.  The CPU build of Mooncake has no Ascend transport, so
this module swaps ``mooncake.engine.TransferEngine`` for a subclass that performs that
check against the simulated ACL runtime and then runs the real engine over TCP, so
real bytes still move.  Every other protocol and method is the real engine untouched.

The swap is done by a ``sys.meta_path`` hook, so importing the simulated torch_npu
does not import Mooncake; the class is replaced the moment ``mooncake.engine`` loads.
"""

from __future__ import annotations

import importlib.abc
import importlib.machinery
import os
import re
import sys
import threading
import time
import types
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from initorch_simulation.acl import ACL, SimulatedAclError

ENGINE_MODULE = "mooncake.engine"
ASCEND_PROTOCOL = "ascend"
DELEGATE_PROTOCOL = "tcp"

GLOG_SOURCE_FILE = "ascend_transport.cpp"
GLOG_SOURCE_LINE = 112
"""Fixed by the simulation; the real line number depends on the Mooncake release."""

_ASCEND_HOSTNAME = re.compile(r"^(?P<base>.+):npu_(?P<physical>\d+)$")

_patched: dict[int, type] = {}
_patch_lock = threading.Lock()


@dataclass(frozen=True)
class SimulatedAscendBinding:
    """What a successful simulated Ascend ``initialize`` bound to (tests inspect it)."""

    thread_name: str
    device_logic_id: int
    device_physical_id: int
    hostname_physical_id: int | None
    requested_hostname: str
    delegated_hostname: str


def glog_error_line(message: str, source_file: str, source_line: int) -> str:
    """Format ``message`` the way glog prints an ERROR line from native code."""
    now = time.time()
    stamp = time.localtime(now)
    micros = int((now - int(now)) * 1_000_000)
    return (
        f"E{stamp.tm_mon:02d}{stamp.tm_mday:02d} "
        f"{stamp.tm_hour:02d}:{stamp.tm_min:02d}:{stamp.tm_sec:02d}.{micros:06d} "
        f"{threading.get_native_id():5d} {source_file}:{source_line}] {message}\n"
    )


def split_ascend_hostname(hostname: str) -> tuple[str, int | None]:
    """``host:port:npu_3`` -> (``host:port``, 3); other forms pass through unchanged.

    The real CPU engine accepts ``host`` and ``host:port`` (it parses the port), so
    only the ``:npu_<id>`` suffix is stripped.
    """
    match = _ASCEND_HOSTNAME.match(hostname)
    if match is None:
        return hostname, None
    return match.group("base"), int(match.group("physical"))


def _simulated_engine_class(real: type) -> type:
    """Subclass the real pybind11 TransferEngine with the simulated Ascend check."""

    class SimulatedAscendTransferEngine(real):  # type: ignore[misc]
        """SIMULATED: the real Mooncake engine plus a simulated ``ascend`` transport.

        For protocol ``ascend`` it first calls the simulated ``aclrtGetDevice`` on the
        calling thread (failing with the real log line and -1), then delegates to the
        real engine over TCP.
        """

        __initorch_simulated__ = True
        simulated_ascend: SimulatedAscendBinding | None = None

        def _simulated_ascend_setup(self, hostname: str) -> str | None:
            """Return the hostname to hand the real engine, or None after logging."""
            try:
                device = ACL.get_device()
            except SimulatedAclError as error:
                line = glog_error_line(str(error), GLOG_SOURCE_FILE, GLOG_SOURCE_LINE)
                os.write(2, line.encode())
                return None
            delegated, physical = split_ascend_hostname(hostname)
            self.simulated_ascend = SimulatedAscendBinding(
                thread_name=threading.current_thread().name,
                device_logic_id=device,
                device_physical_id=ACL.physical_id(device),
                hostname_physical_id=physical,
                requested_hostname=hostname,
                delegated_hostname=delegated,
            )
            return delegated

        def initialize(
            self, hostname: str, metadata_server: str, protocol: str, device_name: str
        ) -> int:
            if protocol != ASCEND_PROTOCOL:
                return int(super().initialize(hostname, metadata_server, protocol, device_name))
            delegated = self._simulated_ascend_setup(hostname)
            if delegated is None:
                return -1
            return int(super().initialize(delegated, metadata_server, DELEGATE_PROTOCOL, ""))

        def initialize_ext(
            self,
            hostname: str,
            metadata_server: str,
            protocol: str,
            device_name: str,
            metadata_type: str,
        ) -> int:
            if protocol != ASCEND_PROTOCOL:
                return int(
                    super().initialize_ext(
                        hostname, metadata_server, protocol, device_name, metadata_type
                    )
                )
            delegated = self._simulated_ascend_setup(hostname)
            if delegated is None:
                return -1
            return int(
                super().initialize_ext(
                    delegated, metadata_server, DELEGATE_PROTOCOL, "", metadata_type
                )
            )

    SimulatedAscendTransferEngine.__module__ = __name__
    SimulatedAscendTransferEngine.__qualname__ = "SimulatedAscendTransferEngine"
    return SimulatedAscendTransferEngine


def patch_engine_module(module: types.ModuleType) -> type:
    """Replace ``module.TransferEngine`` by the simulated subclass (idempotent)."""
    with _patch_lock:
        current = module.TransferEngine
        if getattr(current, "__initorch_simulated__", False):
            return current  # type: ignore[no-any-return]
        simulated = _patched.get(id(current))
        if simulated is None:
            simulated = _simulated_engine_class(current)
            _patched[id(current)] = simulated
        module.TransferEngine = simulated  # type: ignore[attr-defined]
        module.SimulatedAscendTransferEngine = simulated  # type: ignore[attr-defined]
        return simulated


class _PatchingLoader(importlib.abc.Loader):
    """Run the real loader, then swap in the simulated engine class."""

    def __init__(self, inner: importlib.abc.Loader) -> None:
        self._inner = inner

    def create_module(self, spec: importlib.machinery.ModuleSpec) -> types.ModuleType | None:
        return self._inner.create_module(spec)

    def exec_module(self, module: types.ModuleType) -> None:
        self._inner.exec_module(module)
        patch_engine_module(module)


class SimulatedAscendEngineFinder(importlib.abc.MetaPathFinder):
    """Meta-path hook that wraps the loader of ``mooncake.engine`` only."""

    def find_spec(
        self,
        fullname: str,
        path: Sequence[str] | None,
        target: types.ModuleType | None = None,
    ) -> importlib.machinery.ModuleSpec | None:
        if fullname != ENGINE_MODULE:
            return None
        for finder in sys.meta_path:
            if finder is self or isinstance(finder, SimulatedAscendEngineFinder):
                continue
            find_spec = getattr(finder, "find_spec", None)
            if find_spec is None:
                continue
            spec: Any = find_spec(fullname, path, target)
            if spec is not None:
                if spec.loader is not None:
                    spec.loader = _PatchingLoader(spec.loader)
                return spec  # type: ignore[no-any-return]
        return None


def install_simulated_ascend_transport() -> None:
    """Make ``mooncake.engine.TransferEngine`` simulate the Ascend transport.

    Patches at once if Mooncake is already imported (names bound earlier with
    ``from mooncake.engine import TransferEngine`` keep the real class), otherwise
    when it is first imported.
    """
    if not any(isinstance(finder, SimulatedAscendEngineFinder) for finder in sys.meta_path):
        sys.meta_path.insert(0, SimulatedAscendEngineFinder())
    module = sys.modules.get(ENGINE_MODULE)
    if module is not None:
        patch_engine_module(module)


def simulated_engine_class() -> type | None:
    """The simulated class, once ``mooncake.engine`` has been imported and patched."""
    module = sys.modules.get(ENGINE_MODULE)
    if module is None:
        return None
    current = module.TransferEngine
    return current if getattr(current, "__initorch_simulated__", False) else None
