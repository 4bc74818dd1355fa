"""A SIMULATED host's file system, for hardware detection: device nodes and vendor
libraries as empty files under a root folder (``initorch detect --root ROOT``).

Paths are the ones the real stacks use: the Ascend driver's ``/dev/davinciN`` and
``/dev/davinci_manager`` and CANN's ``libascendcl.so`` under
``/usr/local/Ascend/ascend-toolkit/latest/lib64``; the NVIDIA driver's ``/dev/nvidiaN``,
``/dev/nvidiactl`` and ``libcuda.so.1``; Moore Threads' ``/dev/mtgpu.N`` and the MUSA
toolkit's ``libmusart.so`` under ``/usr/local/musa/lib``.  Nothing is a real device or
library: detection only looks whether they exist.
"""

from __future__ import annotations

from collections.abc import Iterable
from pathlib import Path

HOSTS: dict[str, tuple[str, ...]] = {
    "npu": ("dev/davinci0", "dev/davinci1", "dev/davinci_manager",
            "usr/local/Ascend/ascend-toolkit/latest/lib64/libascendcl.so"),
    "cuda": ("dev/nvidia0", "dev/nvidiactl", "usr/lib/x86_64-linux-gnu/libcuda.so.1"),
    "musa": ("dev/mtgpu.0", "usr/local/musa/lib/libmusart.so"),
}


def build_root(root: Path, devices: Iterable[str]) -> Path:
    """Make ``root`` look like a host with ``devices`` (keys of :data:`HOSTS`)."""
    for device in devices:
        for relative in HOSTS[device]:
            path = root / relative
            path.parent.mkdir(parents=True, exist_ok=True)
            path.touch()
    return root
