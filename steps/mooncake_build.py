"""Which Mooncake build is installed, read from the engine binary itself.

Mooncake's Python API does not say which transports a wheel was built with
(its ``SUPPORT_*`` flags cover cuda, hip, musa, efa and nvlink, not ascend, and
exist only once the module is imported), but the native code names every
transport class it contains (log texts and C++ type names).  The engine
extension is not always that code: in ``mooncake-transfer-engine-npu``
0.3.13.post1 ``mooncake/engine.so`` is a thin binding that holds no transport
name; it needs ``libtransfer_engine.so`` (``AscendDirectTransport``,
``RdmaTransport``, ``TcpTransport``), which needs ``ascend_transport.so``
(``AscendDirectTransport``), all in the ``mooncake/`` folder.  The CPU, CUDA and
ROCm wheels (0.3.13.post1) and the cuda13 wheel (0.3.14) link their transports
into ``engine.so`` itself.  So the build is read from the engine binary and every
library it needs from its own folder, followed through ``DT_NEEDED``
(:mod:`initorch.steps.elf`).  ``AscendDirectTransport`` marks the ascend-direct
(ADXL/HIXL) build; a source build with ``USE_ASCEND`` contains ``HcclTransport``
(the legacy HCCL build, never published as a wheel); the other wheels contain
neither (``multi_transport.cpp installTransport``).  Reading the files does not
import them: importing ``mooncake.engine`` before ``set_device`` can abort an
Ascend worker.

The two Ascend builds want different local hostnames (``transfer_engine_impl.cpp
init``): the legacy build parses ``host:port:npu_<physical id>``
(``parseHostNameWithPortAscend``); ascend-direct takes a plain ``host`` and asks
``aclrtGetDevice`` on the calling thread which device it serves.
"""

from __future__ import annotations

import importlib.util
import sys
from functools import lru_cache
from pathlib import Path
from typing import Literal

from initorch.plugin import record
from initorch.steps.elf import needed

# Which published wheel fits which stack, for hints (one per environment: they share the
# mooncake/ folder).  The CUDA wheels need the CUDA runtime of their major version.
WHEEL_CHOICE = (
    "mooncake-transfer-engine for CUDA 12 torch, mooncake-transfer-engine-cuda13 for CUDA 13 "
    "torch (torch 2.15 from PyPI), mooncake-transfer-engine-rocm on ROCm, "
    "mooncake-transfer-engine-npu on Ascend, mooncake-transfer-engine-non-cuda on CPU and "
    "other devices; only one of them"
)

AscendBuild = Literal["ascend_direct", "hccl"]
ASCEND_BUILDS: tuple[AscendBuild, ...] = ("ascend_direct", "hccl")

# Transport class name in the binary -> the protocol name Mooncake installs it as.
TRANSPORT_MARKERS = {
    b"AscendDirectTransport": "ascend",
    b"HcclTransport": "ascend",
    b"HeterogeneousRdmaTransport": "ascend",
    b"RdmaTransport": "rdma",
    b"TcpTransport": "tcp",
    b"MusaTransport": "musa",
    b"HipTransport": "hip",
    b"NvlinkTransport": "nvlink",
    b"EfaTransport": "efa",
}

# Metadata storage plugin class -> the schemes it serves.  MetadataStoragePlugin::Create
# (transfer_metadata_plugin.cpp:544-595, Mooncake 0.3.13) compiles each in only with
# USE_ETCD / USE_REDIS / USE_HTTP and LOG(FATAL)s -- abort(), the whole process -- on a
# scheme it lacks; a value without "://" is etcd (parseConnectionString, :525-543).  The
# published wheels (npu, non-cuda, CUDA, rocm 0.3.13.post1; cuda13 0.3.14) name
# EtcdStoragePlugin and HTTPStoragePlugin, none RedisStoragePlugin.
METADATA_PLUGINS = {
    b"EtcdStoragePlugin": ("etcd",),
    b"RedisStoragePlugin": ("redis",),
    b"HTTPStoragePlugin": ("http", "https"),
}
_MARKERS = (*TRANSPORT_MARKERS, *METADATA_PLUGINS)
# mooncake.engine's build flags (transfer_engine_py.cpp:1164-1198, Mooncake 0.3.13) -> the
# protocol each one compiles in; read only once the engine is imported, and then they
# decide over the binary scan.  No flag tells ascend apart: the scan does.
FLAG_PROTOCOLS = {"SUPPORT_EFA": "efa", "SUPPORT_HIP": "hip", "SUPPORT_MNNVL": "nvlink",
                  "SUPPORT_MUSA": "musa", "SUPPORT_INTRA_NVLINK": "nvlink_intra"}


def metadata_scheme(server: str) -> str | None:
    """The plugin scheme Mooncake picks for a metadata server; None for P2PHANDSHAKE."""
    if server == "P2PHANDSHAKE":
        return None
    scheme, found, _ = server.partition("://")
    return scheme if found else "etcd"


@record
class MooncakeBuild:
    """What the installed engine binary was built with."""

    binary: str | None
    classes: frozenset[str]
    files: tuple[str, ...] = ()
    flags: tuple[tuple[str, bool], ...] = ()  # SUPPORT_* of the imported engine, if any

    @property
    def protocols(self) -> frozenset[str]:
        """Protocol names this build can install (the flags decide where they exist)."""
        found = {TRANSPORT_MARKERS[name.encode()] for name in self.classes
                 if name.encode() in TRANSPORT_MARKERS}
        for flag, on in self.flags:
            protocol = FLAG_PROTOCOLS.get(flag)
            if protocol is not None:
                (found.add if on else found.discard)(protocol)
        return frozenset(found)

    @property
    def metadata_schemes(self) -> frozenset[str]:
        """Metadata server schemes this build has a plugin for."""
        return frozenset(scheme for name in self.classes
                         for scheme in METADATA_PLUGINS.get(name.encode(), ()))

    @property
    def ascend(self) -> AscendBuild | None:
        """Which Ascend transport the build has, if any."""
        if "HcclTransport" in self.classes:
            return "hccl"
        if "AscendDirectTransport" in self.classes:
            return "ascend_direct"
        return None

    def describe(self) -> str:
        names = ", ".join(sorted(self.classes)) or "no known transport"
        linked = [Path(name).name for name in self.files[1:]]
        via = f" with {', '.join(linked)}" if linked else ""
        return f"{self.binary or 'mooncake.engine (not found)'}{via} ({names})"


def engine_binary() -> str | None:
    """Path of the ``mooncake.engine`` extension; found without importing ``mooncake``
    or its engine when they are not imported yet (a plan must not import them)."""
    loaded = sys.modules.get("mooncake.engine")
    if loaded is not None:
        return getattr(loaded, "__file__", None)
    try:
        spec = importlib.util.find_spec("mooncake")  # top level: found, not executed
    except (ImportError, ValueError):
        return None
    for folder in (spec.submodule_search_locations or ()) if spec is not None else ():
        found = sorted(Path(folder).glob("engine*.so"))
        if found:
            return str(found[0])
    return None


@lru_cache(maxsize=32)
def scan_binary(path: str) -> frozenset[str]:
    """Transport and metadata plugin class names in the file at ``path`` (a few MB, read
    once)."""
    with open(path, "rb") as handle:
        data = handle.read()
    return frozenset(marker.decode() for marker in _MARKERS if marker in data)


def linked_files(binary: str) -> tuple[str, ...]:
    """``binary``, then every library it needs, directly or not, that lies in its own
    folder (where Mooncake wheels put their own libraries; system and ``*.libs``
    libraries hold no transport), each once, in the order found."""
    folder = Path(binary).parent
    found = [binary]
    for current in found:
        for name in needed(current):
            candidate = str(folder / name)
            if candidate not in found and Path(candidate).is_file():
                found.append(candidate)
    return tuple(found)


def engine_flags() -> tuple[tuple[str, bool], ...]:
    """The ``SUPPORT_*`` flags of ``mooncake.engine`` when it is imported already (it is
    never imported here: that can abort an Ascend worker before ``set_device``)."""
    loaded = sys.modules.get("mooncake.engine")
    if loaded is None:
        return ()
    return tuple(sorted((name, bool(getattr(loaded, name))) for name in dir(loaded)
                        if name.startswith("SUPPORT_")))


def installed_build(binary: str | None = None) -> MooncakeBuild:
    """The build of ``binary`` (default: the installed ``mooncake.engine``, with its
    ``SUPPORT_*`` flags once imported) and of the libraries it loads from its folder."""
    path = binary or engine_binary()
    if path is None:
        return MooncakeBuild(None, frozenset())
    files = linked_files(path)
    return MooncakeBuild(path, frozenset().union(*(scan_binary(file) for file in files)), files,
                         () if binary else engine_flags())
