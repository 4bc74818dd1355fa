"""When this process started, and the moments its start-up passed: what the timeline
of ``initorch run`` is made of before the first step.

The process's start is read from the operating system (``/proc/self/stat``'s
``starttime``, in clock ticks since boot, against ``CLOCK_BOOTTIME``): it is known
to one clock tick (10 ms on Linux) and never guessed; where ``/proc`` is missing it
is ``None`` and the timeline says "not measured".  The other moments are recorded
by the code that passes them (:func:`mark`; ``imports_began`` as this module is
imported, which ``initorch/__init__.py`` does first), as wall-clock seconds (``time.time``),
the clock every process on a host shares, so that the timelines of several
processes line up, with the file:line that recorded them.
"""

from __future__ import annotations

import os
import threading
import time

from initorch.location import SourceLocation, caller_location
from initorch.records import record

PROC_STAT = "/proc/{pid}/stat"


@record
class ProcessStart:
    """A process's start as the kernel recorded it: wall-clock seconds, and how
    precisely (one clock tick)."""

    at: float
    resolution: float


def process_start(pid: int | str = "self") -> ProcessStart | None:
    """When process ``pid`` started (``None`` where ``/proc`` or ``CLOCK_BOOTTIME`` is
    not available: not Linux, or a process that has gone)."""
    boottime = getattr(time, "CLOCK_BOOTTIME", None)
    if boottime is None:
        return None
    try:
        with open(PROC_STAT.format(pid=pid), encoding="ascii", errors="replace") as stat:
            text = stat.read()
        ticks_per_second = os.sysconf("SC_CLK_TCK")
    except (OSError, ValueError):
        return None
    # The command name (field 2) may hold spaces and parentheses: fields after the last ')'.
    fields = text[text.rfind(")") + 2:].split()
    try:
        start_ticks = int(fields[19])  # field 22 of proc(5), the 20th after the name
    except (IndexError, ValueError):
        return None
    now_wall, now_boot = time.time(), time.clock_gettime(boottime)
    age = now_boot - start_ticks / ticks_per_second
    return ProcessStart(now_wall - age, 1.0 / ticks_per_second)


@record
class Moment:
    """A moment a process passed: when (wall-clock seconds) and the code that said so."""

    at: float
    where: SourceLocation


class Marks:
    """Named moments of this process's start-up, each recorded once (the first time),
    thread-safe; :data:`MARKS` is the process's."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._moments: dict[str, Moment] = {}

    def mark(self, name: str, at: float | None = None, *, depth: int = 2) -> None:
        """Record ``name`` now (or ``at``), located ``depth`` frames up."""
        moment = Moment(time.time() if at is None else at, caller_location(depth))
        with self._lock:
            self._moments.setdefault(name, moment)

    def snapshot(self) -> dict[str, Moment]:
        with self._lock:
            return dict(self._moments)


MARKS = Marks()


def mark(name: str, at: float | None = None) -> None:
    """Record that this process reached ``name`` now (or at ``at``), once, with the
    caller's file:line."""
    MARKS.mark(name, at, depth=3)


mark("imports_began")
