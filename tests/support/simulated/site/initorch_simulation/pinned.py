"""SIMULATED pinned host allocator: a record of host buffers "pinned" by the simulation.

A CPU-only torch cannot page-lock memory for an out-of-tree device, so the simulated
vendor plugins hand out plain CPU memory for ``pin_memory=True`` and note it here.
Tests then assert that a host KV pool really went through the ``pin_memory`` path
(and not, say, ``cudaHostRegister``) by looking its pointer up in this registry.
"""

from __future__ import annotations

import itertools
import threading
from collections.abc import Callable
from dataclasses import dataclass


@dataclass(frozen=True)
class PinnedBlock:
    """One simulated pinned allocation (the whole storage, not a view of it)."""

    serial: int
    ptr: int
    nbytes: int
    backend: str
    thread_name: str

    def contains(self, ptr: int) -> bool:
        """Whether ``ptr`` points into this block."""
        return self.ptr <= ptr < self.ptr + max(self.nbytes, 1)


class SimulatedPinnedHostAllocator:
    """Thread-safe registry of live and released simulated pinned blocks."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._serials = itertools.count(1)
        self._live: dict[int, PinnedBlock] = {}
        self._history: list[PinnedBlock] = []
        self._listeners: list[Callable[[PinnedBlock], None]] = []

    def listen(self, listener: Callable[[PinnedBlock], None]) -> None:
        """Call ``listener`` with each new block, on the thread that pinned it (a test
        vehicle announces blocks pinned in a server it cannot look into)."""
        with self._lock:
            self._listeners.append(listener)

    def record(self, ptr: int, nbytes: int, backend: str) -> PinnedBlock:
        """Note a new pinned block; call ``release(block.serial)`` when it is freed."""
        block = PinnedBlock(
            serial=next(self._serials),
            ptr=ptr,
            nbytes=nbytes,
            backend=backend,
            thread_name=threading.current_thread().name,
        )
        with self._lock:
            self._live[block.serial] = block
            self._history.append(block)
            listeners = list(self._listeners)
        for listener in listeners:
            listener(block)
        return block

    def release(self, serial: int) -> None:
        """Forget a block whose memory was freed (its address may be reused)."""
        with self._lock:
            self._live.pop(serial, None)

    def is_pinned(self, ptr: int) -> bool:
        """Whether ``ptr`` lies inside a live simulated pinned block."""
        with self._lock:
            return any(block.contains(ptr) for block in self._live.values())

    def live_blocks(self) -> list[PinnedBlock]:
        """Blocks not yet freed, in allocation order."""
        with self._lock:
            return sorted(self._live.values(), key=lambda block: block.serial)

    def history(self) -> list[PinnedBlock]:
        """Every block ever pinned in this process, freed or not."""
        with self._lock:
            return list(self._history)

    def live_bytes(self) -> int:
        """Total bytes currently pinned by the simulation."""
        with self._lock:
            return sum(block.nbytes for block in self._live.values())


PINNED = SimulatedPinnedHostAllocator()
"""Process-wide simulated pinned host allocator record."""
