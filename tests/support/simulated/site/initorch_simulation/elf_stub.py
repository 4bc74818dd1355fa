"""SIMULATED Mooncake Ascend binaries: tiny ELF files laid out like the real wheel.

The real ``mooncake-transfer-engine-npu`` 0.3.13.post1 wheel keeps its transports
out of ``mooncake/engine.so``: the binding needs ``libtransfer_engine.so``, which
needs ``ascend_transport.so`` (``readelf -d``), and only those two name
``AscendDirectTransport``.  The stubs copy that shape (file names, the links
between them, which class names each holds) so that initorch's build detection
meets the same puzzle as on a real NPU host; ``tests/unit/steps/test_mooncake_build.py``
checks the stubs against the downloaded wheel.  They hold no code and cannot be
loaded.  The legacy HCCL build was never published as a wheel; its stubs assume
the same layout with ``HcclTransport`` (a source build with ``USE_ASCEND``).
"""

from __future__ import annotations

import hashlib
import os
import struct
import tempfile
from pathlib import Path

# file -> (DT_NEEDED entries inside the mooncake/ folder, transport and metadata plugin
# class names held)
LAYOUTS: dict[str, dict[str, tuple[tuple[str, ...], tuple[str, ...]]]] = {
    "ascend_direct": {
        "engine.so": (("libtransfer_engine.so", "libmooncake_common.so"), ()),
        "libtransfer_engine.so": (
            ("ascend_transport.so",),
            ("AscendDirectTransport", "RdmaTransport", "TcpTransport", "EtcdStoragePlugin",
             "HTTPStoragePlugin")),
        "ascend_transport.so": ((), ("AscendDirectTransport",)),
        "libmooncake_common.so": ((), ()),
    },
    "hccl": {
        "engine.so": (("libtransfer_engine.so", "libmooncake_common.so"), ()),
        "libtransfer_engine.so": (
            ("ascend_transport.so",),
            ("HcclTransport", "RdmaTransport", "TcpTransport", "EtcdStoragePlugin",
             "HTTPStoragePlugin")),
        "ascend_transport.so": ((), ("HcclTransport",)),
        "libmooncake_common.so": ((), ()),
    },
}

_SHSTRTAB = b"\0.dynstr\0.dynamic\0.rodata\0.shstrtab\0"


def shared_object(needed: tuple[str, ...], payload: bytes) -> bytes:
    """An ELF64 little-endian x86-64 ``ET_DYN`` with a ``.dynamic`` that lists
    ``needed`` and a ``.rodata`` that holds ``payload``; section headers only."""
    dynstr = b"\0"
    entries = b""
    for name in needed:
        entries += struct.pack("<qQ", 1, len(dynstr))  # DT_NEEDED
        dynstr += name.encode() + b"\0"
    entries += struct.pack("<qQ", 0, 0)  # DT_NULL
    blobs = (dynstr, entries, payload, _SHSTRTAB)
    offsets, at = [], 64
    for blob in blobs:
        offsets.append(at)
        at += len(blob)
    shoff = (at + 7) // 8 * 8
    header = struct.pack("<16sHHIQQQIHHHHHH", b"\x7fELF\x02\x01\x01" + bytes(9), 3, 62, 1, 0,
                         0, shoff, 0, 64, 0, 0, 64, 5, 4)
    names = [_SHSTRTAB.index(name) for name in (b".dynstr", b".dynamic", b".rodata",
                                                  b".shstrtab")]
    sections = bytes(64) + b"".join((
        struct.pack("<IIQQQQIIQQ", names[0], 3, 2, 0, offsets[0], len(dynstr), 0, 0, 1, 0),
        struct.pack("<IIQQQQIIQQ", names[1], 6, 3, 0, offsets[1], len(entries), 1, 0, 8, 16),
        struct.pack("<IIQQQQIIQQ", names[2], 1, 2, 0, offsets[2], len(payload), 0, 0, 1, 0),
        struct.pack("<IIQQQQIIQQ", names[3], 3, 0, 0, offsets[3], len(_SHSTRTAB), 0, 0, 1, 0),
    ))
    body = header + b"".join(blobs)
    return body + bytes(shoff - len(body)) + sections


def engine_stub(build: str) -> Path:
    """The simulated ``mooncake/engine.so`` of ``build``, with its libraries beside it
    (written once per layout into the temp folder)."""
    layout = LAYOUTS[build]
    digest = hashlib.sha256(repr(layout).encode()).hexdigest()[:12]
    folder = Path(tempfile.gettempdir()) / f"initorch-sim-mooncake-{build}-{digest}" / "mooncake"
    folder.mkdir(parents=True, exist_ok=True)
    for name, (needed, classes) in layout.items():
        target = folder / name
        if target.is_file():
            continue
        payload = b"SIMULATED stand-in, not loadable\0" + b"\0".join(c.encode() for c in classes)
        partial = folder / f".{name}.{os.getpid()}"
        partial.write_bytes(shared_object(needed, payload))
        partial.replace(target)
    return folder / "engine.so"
