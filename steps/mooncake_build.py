"""Which Mooncake build is installed, read from the engine binary itself.

Mooncake's Python API does not say which transports a wheel was built with,
but the engine extension names every transport class it contains (log texts
and C++ type names).  ``mooncake-transfer-engine-npu`` contains
``AscendDirectTransport`` (the ascend-direct, ADXL/HIXL build); a source build
with ``USE_ASCEND`` contains ``HcclTransport`` (the legacy HCCL build); the CPU
and CUDA wheels contain neither (``multi_transport.cpp installTransport``,
Mooncake 0.3.x).  Reading the file does not import it: importing
``mooncake.engine`` before ``set_device`` can abort an Ascend worker.

The two Ascend builds want different local hostnames (``transfer_engine_impl.cpp
init``): the legacy build parses ``host:port:npu_<physical id>``
(``parseHostNameWithPortAscend``); ascend-direct takes a plain ``host`` and asks
``aclrtGetDevice`` on the calling thread which device it serves.
"""

from __future__ import annotations

import importlib.util
import sys
from dataclasses import dataclass
from functools import lru_cache
from typing import Literal

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


@dataclass(frozen=True, slots=True)
class MooncakeBuild:
    """What the installed engine binary was built with."""

    binary: str | None
    classes: frozenset[str]

    @property
    def protocols(self) -> frozenset[str]:
        """Protocol names this build can install."""
        return frozenset(TRANSPORT_MARKERS[name.encode()] for name in self.classes)

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
        return f"{self.binary or 'mooncake.engine (not found)'} ({names})"


def engine_binary() -> str | None:
    """Path of the ``mooncake.engine`` extension; found without importing it when it
    is not imported yet."""
    loaded = sys.modules.get("mooncake.engine")
    if loaded is not None:
        return getattr(loaded, "__file__", None)
    try:
        spec = importlib.util.find_spec("mooncake.engine")
    except (ImportError, ValueError):
        return None
    return spec.origin if spec is not None and spec.origin not in (None, "built-in") else None


@lru_cache(maxsize=8)
def scan_binary(path: str) -> frozenset[str]:
    """Transport class names that occur in the file at ``path`` (a few MB, read once)."""
    with open(path, "rb") as handle:
        data = handle.read()
    return frozenset(marker.decode() for marker in TRANSPORT_MARKERS if marker in data)


def installed_build(binary: str | None = None) -> MooncakeBuild:
    """The build of ``binary`` (default: the installed ``mooncake.engine``)."""
    path = binary or engine_binary()
    return MooncakeBuild(path, scan_binary(path) if path else frozenset())
