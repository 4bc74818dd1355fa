"""Which transport Mooncake really installed, and whether the profile meant it.

The ``protocol`` argument of the Python ``TransferEngine.initialize`` does not
choose the transport (``transfer_engine_py.cpp initializeExt`` only uses it to
pick a memory allocator, Mooncake 0.3.x).  ``TransferEngineImpl::init``
(``transfer_engine_impl.cpp``) decides: ``MC_FORCE_TCP`` set -> TCP only;
otherwise an Ascend build always installs ``ascend``; a MUSA build installs
``musa`` when no HCA is found; other builds install RDMA when topology
discovery finds HCAs and TCP when it finds none.  So ``protocol: tcp`` on a host
with NICs still gets RDMA, and ``protocol: ascend`` with the CPU wheel gets TCP.

Mooncake does not return its choice; it logs it while ``initialize`` runs.
:func:`installed_transports` reads those lines (captured from fd 2); the
markers below are the log texts of Mooncake 0.3.13.
"""

from __future__ import annotations

import re
from typing import Any

# (pattern, protocol or a group that names it); upstream file for each in the comment.
_MARKERS: tuple[tuple[re.Pattern[str], str | None], ...] = (
    # tcp_transport.cpp TcpTransport::install
    (re.compile(r"TcpTransport: listen on port \d+"), "tcp"),
    # transfer_engine_impl.cpp init: RDMA/barex path after topology discovery
    (re.compile(r"installTransport, type=(\w+)"), None),
    # transfer_engine_impl.cpp init: MUSA / MNNVL builds
    (re.compile(r"Using RDMA transport \(RoCE/iWARP\)"), "rdma"),
    (re.compile(r"Using (MUSA|NVLink) transport"), None),
    (re.compile(r"Using Intra-Node NVLink transport"), "nvlink_intra"),
    (re.compile(r"HIP transport installed for intra-node GPU P2P"), "hip"),
    # ascend_direct_transport.cpp install / hccl_transport.cpp initPdThread
    (re.compile(r"install AscendDirectTransport for:"), "ascend"),
    (re.compile(r"HcclTransport: initPdThread, pid:"), "ascend"),
    # transfer_engine_py.cpp initializeExt (EFA builds)
    (re.compile(r"EFA transport installed successfully"), "efa"),
)


def installed_transports(native_log: str) -> list[str]:
    """Protocols Mooncake logged as installed, in order, without repeats."""
    found: list[str] = []
    for line in native_log.splitlines():
        for pattern, protocol in _MARKERS:
            match = pattern.search(line)
            if match is None:
                continue
            name = (protocol or match.group(1)).lower()
            if name not in found:
                found.append(name)
    return found


def transport_mismatch(expected: str, installed: list[str]) -> str | None:
    """Why ``installed`` is not what the profile meant, or None when it is."""
    if not installed:
        return None  # nothing logged (e.g. GLOG_minloglevel>0): cannot tell
    if expected in installed:
        return None
    hint = ""
    if expected == "tcp":
        hint = "; set MC_FORCE_TCP=1 in the profile's env: to force TCP"
    elif expected == "ascend":
        hint = "; only an Ascend build of Mooncake (mooncake-transfer-engine-npu) installs it"
    elif expected == "rdma" and installed == ["tcp"]:
        hint = ("; Mooncake found no RDMA device (ibv_devices) or MC_FORCE_TCP is set; "
                "set MC_FORCE_HCA=1 only if the HCA exists")
    return (f"the profile means Mooncake transport '{expected}', but Mooncake installed "
            f"{', '.join(installed)}{hint}")


# Lines Mooncake logs at ERROR during a call that then succeeds, with why they are
# harmless there.  Measured: every successful initialize of the
# mooncake-transfer-engine-non-cuda 0.3.13.post1 wheel here logs the first, as
# "transfer_metadata.cpp:1098] Local segment descriptor not found", once per engine (the
# shared one and the store's own; tests/e2e/test_cpu.py asserts it on the real wheel).
# Upstream it is LOG(ERROR) in TransferMetadata's lookups of LOCAL_SEGMENT_ID
# (mooncake-transfer-engine/src/transfer_metadata.cpp, v0.3.12.post1:970 and 991).
EXPECTED_ERROR_LINES: tuple[tuple[str, str], ...] = (
    ("Local segment descriptor not found",
     "transfer_metadata.cpp looks up this process's own segment before initialize has "
     "published it; the call then succeeds, and the line means nothing here (it is a "
     "real error only when a peer's handshake fails with it)"),
)


def note_expected_errors(log: Any, component: str, native_text: str) -> None:
    """After a Mooncake call that succeeded, say which of its ERROR lines are expected,
    so that nobody chases them (``mooncake_error_line_expected``, info level)."""
    for text, why in EXPECTED_ERROR_LINES:
        if text in native_text:
            log.info("mooncake_error_line_expected", component=component, text=text, why=why)
