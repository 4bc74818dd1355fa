"""SIMULATED Ascend builds of Mooncake: the transfer engine and the store client.

Mooncake ships two Ascend transports, one per build (``multi_transport.cpp
installTransport``), and an Ascend build installs its transport whatever
protocol ``initialize`` is given, unless ``MC_FORCE_TCP`` is set
(``transfer_engine_impl.cpp init``).  Which build the simulation plays is chosen
by ``INITORCH_SIM_MOONCAKE_BUILD``:

``ascend_direct`` (default: the shipped ``mooncake-transfer-engine-npu`` wheel)
    The hostname is parsed like any build's (a plain host; the real CPU engine
    underneath parses it the same way).  Installing the transport calls
    ``aclrtGetDevice`` on the calling thread (``allocateLocalSegmentID``,
    ``ascend_direct_transport.cpp:244``); so does registering memory
    (``StampBufferDeviceId``, ``:80``).  A failed ACL call logs ``Call acl failed,
    detail: <aclGetRecentErrMsg()>`` (``utils.h CHECK_ACL``; the detail is CANN's
    text, simulated here and marked so).
``hccl`` (the legacy build, from source with ``USE_ASCEND``)
    The hostname is ``host:port:npu_<physical id>`` (``parseHostNameWithPortAscend``);
    installing calls ``aclrtGetDevice`` in ``rankInfoParse``
    (``hccl_transport.cpp:323``: ``HcclTransport: aclrtGetDevice failed, ret: 107002``).

A failed install is followed by Mooncake's own lines (``Failed to install Ascend
transport``) and ``initialize`` returns -1.  After a successful check the real
CPU engine runs underneath over TCP, so real bytes move; it logs its own TCP lines
after the simulated install line.  ``mooncake.engine.__file__`` is pointed at a
stub ``engine.so`` laid out like the real npu wheel (a thin binding that needs
``libtransfer_engine.so``, which needs ``ascend_transport.so``; only those two name
the transport classes), because initorch reads the installed build from the
engine binary and the libraries it links (:mod:`initorch_simulation.elf_stub`).

The store client (``mooncake.store.MooncakeDistributedStore``) is simulated the
same way for ``protocol="ascend"``: its own engine (``client_service.cpp
InitTransferEngine``) checks the device context at ``setup`` and, in the
ascend-direct build, again in ``register_buffer``, which then returns -600
(``INVALID_PARAMS``, as ``Client::RegisterLocalMemory`` does).

Both swaps happen through one ``sys.meta_path`` hook, so importing the simulated
torch_npu does not import Mooncake; classes are replaced when the modules load.
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
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

from initorch_simulation.acl import ACL, SimulatedAclError
from initorch_simulation.elf_stub import engine_stub

ENGINE_MODULE = "mooncake.engine"
STORE_MODULE = "mooncake.store"
ASCEND_PROTOCOL = "ascend"
DELEGATE_PROTOCOL = "tcp"
BUILD_ENV = "INITORCH_SIM_MOONCAKE_BUILD"
BUILDS = ("ascend_direct", "hccl")
STORE_INVALID_PARAMS = -600  # mooncake-store/include/types.h ErrorCode::INVALID_PARAMS

_ASCEND_HOSTNAME = re.compile(r"^(?P<base>.+):npu_(?P<physical>\d+)$")

_patched: dict[tuple[str, int], type] = {}
_patch_lock = threading.Lock()


def simulated_build() -> str:
    build = os.environ.get(BUILD_ENV, "ascend_direct")
    if build not in BUILDS:
        raise ValueError(f"simulation: {BUILD_ENV}={build!r} must be one of {BUILDS}")
    return build


@dataclass(frozen=True)
class SimulatedAscendBinding:
    """What a successful simulated Ascend ``initialize`` bound to (tests inspect it)."""

    build: str
    thread_name: str
    device_logic_id: int
    device_physical_id: int
    hostname_physical_id: int | None
    requested_hostname: str
    delegated_hostname: str


def glog_line(level: str, message: str, where: str) -> str:
    """``message`` the way glog prints it from native code (``where`` is file:line)."""
    now = time.time()
    stamp = time.localtime(now)
    micros = int((now - int(now)) * 1_000_000)
    return (
        f"{level}{stamp.tm_mon:02d}{stamp.tm_mday:02d} "
        f"{stamp.tm_hour:02d}:{stamp.tm_min:02d}:{stamp.tm_sec:02d}.{micros:06d} "
        f"{threading.get_native_id():5d} {where}] {message}\n"
    )


def log(level: str, message: str, where: str) -> None:
    os.write(2, glog_line(level, message, where).encode())


def split_ascend_hostname(hostname: str) -> tuple[str, int | None]:
    """``host:port:npu_3`` -> (``host:port``, 3); other forms pass through unchanged."""
    match = _ASCEND_HOSTNAME.match(hostname)
    if match is None:
        return hostname, None
    return match.group("base"), int(match.group("physical"))


def acl_detail(error: SimulatedAclError) -> str:
    """Stands in for CANN's aclGetRecentErrMsg(), whose words depend on the CANN release
    (so diagnosis must not depend on them either)."""
    return f"(simulated CANN error text) {error.api} returned {error.code}"


def check_context(build: str, store: bool) -> SimulatedAclError | None:
    """The device check the build's transport makes on the calling thread at install;
    logs what Mooncake logs when it fails."""
    try:
        ACL.get_device()
    except SimulatedAclError as error:
        if build == "ascend_direct":
            log("E", f"Call acl failed, detail: {acl_detail(error)}",
                "ascend_direct_transport.cpp:244")
            log("E", "AscendDirectTransport: cannot allocate local segment, ret: -1",
                "ascend_direct_transport.cpp:128")
        else:
            log("E", f"HcclTransport: aclrtGetDevice failed, ret: {error.code}",
                "hccl_transport.cpp:323")
            log("E", f"HcclTransport: rankInfoParse failed, ret: {error.code}",
                "hccl_transport.cpp:424")
        if store:
            log("E", "Failed to install ascend transport", "client_service.cpp:940")
            log("E", "Failed to initialize transfer engine", "client_service.cpp:1120")
            log("E", "Failed to create client after 20 retries", "real_client.cpp:865")
        else:
            log("E", "Failed to install Ascend transport", "transfer_engine_impl.cpp:230")
        return error
    return None


def check_registration() -> bool:
    """ascend-direct's StampBufferDeviceId: aclrtGetDevice on the registering thread."""
    try:
        ACL.get_device()
    except SimulatedAclError as error:
        log("E", f"Call acl failed, detail: {acl_detail(error)}", "ascend_direct_transport.cpp:80")
        return False
    return True


def _simulated_engine_class(real: type) -> type:
    """Subclass the real pybind11 TransferEngine with the simulated Ascend build."""

    class SimulatedAscendTransferEngine(real):  # type: ignore[misc]
        """SIMULATED: the real Mooncake engine behind a simulated Ascend transport."""

        __initorch_simulated__ = True
        simulated_ascend: SimulatedAscendBinding | None = None

        def _simulated_ascend_setup(self, hostname: str) -> str | None:
            """The hostname to hand the real engine, or None after logging a failure."""
            build = simulated_build()
            delegated, physical = (split_ascend_hostname(hostname) if build == "hccl"
                                   else (hostname, None))
            if check_context(build, store=False) is not None:
                return None
            device = ACL.get_device()
            if build == "hccl" and physical is None:
                # parseHostNameWithPortAscend leaves devicePhyId at -1: no NIC for it.
                log("E", "HcclTransport: rankInfoParse failed, ret: -1", "hccl_transport.cpp:424")
                log("E", "Failed to install Ascend transport", "transfer_engine_impl.cpp:230")
                return None
            self.simulated_ascend = SimulatedAscendBinding(
                build=build,
                thread_name=threading.current_thread().name,
                device_logic_id=device,
                device_physical_id=ACL.physical_id(device),
                hostname_physical_id=physical,
                requested_hostname=hostname,
                delegated_hostname=delegated,
            )
            return delegated

        def _install(self, delegate: Callable[[str, str], int], hostname: str) -> int:
            if os.environ.get("MC_FORCE_TCP"):  # transfer_engine_impl.cpp: TCP only
                stripped = split_ascend_hostname(hostname)[0]
                return int(delegate(stripped if simulated_build() == "hccl" else hostname,
                                    DELEGATE_PROTOCOL))
            delegated = self._simulated_ascend_setup(hostname)
            if delegated is None:
                return -1
            binding = self.simulated_ascend
            assert binding is not None
            if binding.build == "ascend_direct":
                log("I", f"install AscendDirectTransport for: {delegated}",
                    "ascend_direct_transport.cpp:118")
            else:
                log("I", f"HcclTransport: initPdThread, pid: {os.getpid()};init 8 initiator "
                    f"threads and accept threads, deviceLogicId: {binding.device_logic_id}",
                    "hccl_transport.cpp:266")
            return int(delegate(delegated, DELEGATE_PROTOCOL))

        def initialize(self, hostname: str, metadata_server: str, protocol: str,
                       device_name: str) -> int:
            return self._install(
                lambda host, proto: super(SimulatedAscendTransferEngine, self).initialize(
                    host, metadata_server, proto, ""), hostname)

        def initialize_ext(self, hostname: str, metadata_server: str, protocol: str,
                           device_name: str, metadata_type: str) -> int:
            return self._install(
                lambda host, proto: super(SimulatedAscendTransferEngine, self).initialize_ext(
                    host, metadata_server, proto, "", metadata_type), hostname)

        def register_memory(self, *args: Any, **kwargs: Any) -> int:
            if simulated_build() == "ascend_direct" and not os.environ.get("MC_FORCE_TCP") \
                    and not check_registration():
                return -1
            return int(super().register_memory(*args, **kwargs))

    SimulatedAscendTransferEngine.__module__ = __name__
    SimulatedAscendTransferEngine.__qualname__ = "SimulatedAscendTransferEngine"
    return SimulatedAscendTransferEngine


def _simulated_store_class(real: type) -> type:
    """Subclass the real MooncakeDistributedStore with the simulated Ascend build."""

    class SimulatedAscendStore(real):  # type: ignore[misc]
        """SIMULATED: the real store client; protocol ascend gets the simulated checks."""

        __initorch_simulated__ = True
        simulated_ascend_build: str | None = None

        def setup(self, local_hostname: str, metadata_server: str, *args: Any,
                  **kwargs: Any) -> int:
            values = list(args)
            # (global_segment_size, local_buffer_size, protocol, rdma_devices, master, engine)
            own_engine = len(values) < 6 or values[5] is None
            if len(values) >= 3 and values[2] == ASCEND_PROTOCOL and own_engine \
                    and not os.environ.get("MC_FORCE_TCP"):
                build = simulated_build()
                if check_context(build, store=True) is not None:
                    return -1
                if build == "hccl":
                    # The store builds its own engine's hostname as host:port
                    # (real_client.cpp:797-860): no :npu_<id>, so the legacy transport
                    # finds no device for it, as the engine does without one.
                    log("E", "HcclTransport: rankInfoParse failed, ret: -1",
                        "hccl_transport.cpp:424")
                    log("E", "Failed to install ascend transport", "client_service.cpp:940")
                    log("E", "Failed to create client after 20 retries", "real_client.cpp:865")
                    return -1
                self.simulated_ascend_build = build
                values[2] = DELEGATE_PROTOCOL
                if len(values) >= 4:
                    values[3] = ""
            return int(super().setup(local_hostname, metadata_server, *values, **kwargs))

        def register_buffer(self, buffer_ptr: int, size: int) -> int:
            if self.simulated_ascend_build == "ascend_direct" and not check_registration():
                return STORE_INVALID_PARAMS
            return int(super().register_buffer(buffer_ptr, size))

    SimulatedAscendStore.__module__ = __name__
    SimulatedAscendStore.__qualname__ = "SimulatedAscendStore"
    return SimulatedAscendStore


def _swap(module: types.ModuleType, attribute: str, make: Callable[[type], type]) -> type:
    with _patch_lock:
        current = getattr(module, attribute)
        if getattr(current, "__initorch_simulated__", False):
            return current  # type: ignore[no-any-return]
        key = (attribute, id(current))
        simulated = _patched.get(key)
        if simulated is None:
            simulated = make(current)
            _patched[key] = simulated
        setattr(module, attribute, simulated)
        setattr(module, simulated.__qualname__, simulated)
        return simulated


def patch_engine_module(module: types.ModuleType) -> type:
    """Replace ``module.TransferEngine`` by the simulated subclass (idempotent) and point
    ``module.__file__`` at the stub ``engine.so`` of the simulated build, laid out as in
    the real npu wheel (:mod:`initorch_simulation.elf_stub`)."""
    simulated = _swap(module, "TransferEngine", _simulated_engine_class)
    module.__file__ = str(engine_stub(simulated_build()))
    return simulated


def patch_store_module(module: types.ModuleType) -> type:
    return _swap(module, "MooncakeDistributedStore", _simulated_store_class)


_PATCHES = {ENGINE_MODULE: patch_engine_module, STORE_MODULE: patch_store_module}


class _PatchingLoader(importlib.abc.Loader):
    """Run the real loader, then swap in the simulated class."""

    def __init__(self, inner: importlib.abc.Loader, patch: Callable[[types.ModuleType], type]
                 ) -> None:
        self._inner = inner
        self._patch = patch

    def create_module(self, spec: importlib.machinery.ModuleSpec) -> types.ModuleType | None:
        return self._inner.create_module(spec)

    def exec_module(self, module: types.ModuleType) -> None:
        self._inner.exec_module(module)
        self._patch(module)


class SimulatedAscendEngineFinder(importlib.abc.MetaPathFinder):
    """Meta-path hook that wraps the loaders of ``mooncake.engine`` and ``mooncake.store``."""

    def find_spec(
        self,
        fullname: str,
        path: Sequence[str] | None,
        target: types.ModuleType | None = None,
    ) -> importlib.machinery.ModuleSpec | None:
        patch = _PATCHES.get(fullname)
        if patch is None:
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
                    spec.loader = _PatchingLoader(spec.loader, patch)
                return spec  # type: ignore[no-any-return]
        return None


def install_simulated_ascend_transport() -> None:
    """Make Mooncake's engine and store simulate the Ascend build.

    Patches at once what is already imported (names bound earlier with ``from
    mooncake.engine import TransferEngine`` keep the real class), otherwise on import.
    """
    simulated_build()  # a bad INITORCH_SIM_MOONCAKE_BUILD fails the import, loudly
    if not any(isinstance(finder, SimulatedAscendEngineFinder) for finder in sys.meta_path):
        sys.meta_path.insert(0, SimulatedAscendEngineFinder())
    for name, patch in _PATCHES.items():
        module = sys.modules.get(name)
        if module is not None:
            patch(module)


def simulated_engine_class() -> type | None:
    """The simulated class, once ``mooncake.engine`` has been imported and patched."""
    module = sys.modules.get(ENGINE_MODULE)
    if module is None:
        return None
    current = module.TransferEngine
    return current if getattr(current, "__initorch_simulated__", False) else None
