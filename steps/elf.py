"""The ``DT_NEEDED`` entries of an ELF shared object, read without loading it.

Vendor wheels split their native code over several libraries in one folder (the
``mooncake-transfer-engine-npu`` 0.3.13.post1 wheel: ``engine.so`` needs
``libtransfer_engine.so``, which needs ``ascend_transport.so``).  What a build
contains is only visible by following those links; loading the libraries to ask
would run their constructors, which on Ascend need a device context.  Only what
the dynamic section says is read: no relocation, no symbol tables.
"""

from __future__ import annotations

import struct
from pathlib import Path

_SHT_STRTAB = 3
_SHT_DYNAMIC = 6
_DT_NULL = 0
_DT_NEEDED = 1


def needed(path: str | Path) -> tuple[str, ...]:
    """The libraries ``path`` names as ``DT_NEEDED``, in order; ``()`` for a file that
    is not a 64-bit ELF object or has no dynamic section (a stub, a script)."""
    data = Path(path).read_bytes()
    if data[:4] != b"\x7fELF" or data[4] != 2 or data[5] not in (1, 2):
        return ()
    order = "<" if data[5] == 1 else ">"
    shoff, = struct.unpack_from(f"{order}Q", data, 0x28)
    shentsize, shnum = struct.unpack_from(f"{order}HH", data, 0x3A)
    sections = [struct.unpack_from(f"{order}IIQQQQIIQQ", data, shoff + index * shentsize)
                for index in range(shnum)] if shoff and shentsize >= 64 else []
    names: list[str] = []
    for _, kind, _, _, offset, size, link, _, _, _ in sections:
        if kind != _SHT_DYNAMIC or link >= len(sections) or sections[link][1] != _SHT_STRTAB:
            continue
        strtab = sections[link][4]
        for entry in range(offset, offset + size - 15, 16):
            tag, value = struct.unpack_from(f"{order}qQ", data, entry)
            if tag == _DT_NULL:
                break
            if tag == _DT_NEEDED:
                end = data.index(b"\0", strtab + value)
                names.append(data[strtab + value:end].decode("utf-8", errors="replace"))
    return tuple(names)
