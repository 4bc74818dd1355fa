"""What an integration costs inside one engine process, measured where it is spent.

The promise is a share: initorch's own time in a rank is at most 1% of that rank's time
from process start to *up* (the engine's per-rank worker built).  Timing the whole server from
outside cannot show it: two launches of the same line differ by seconds on a shared
machine.  So each phase that runs initorch's code in the process adds its own
``perf_counter`` span here (plugin load, the plan and hooks when the rank's start-up
begins, the bookkeeping of each recorded call, the report), and the
rank's report states the sum beside the process's age when it came up (from
``/proc/self/stat``, so the interpreter's own start counts too).
"""

from __future__ import annotations

import os
import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import field
from typing import Any

from initorch.records import record

__all__ = ["COST", "Cost", "process_age"]


@record(frozen=False)
class Cost:
    """Seconds of initorch's own work in this process, by phase."""

    phases: dict[str, float] = field(default_factory=dict)

    def add(self, phase: str, seconds: float) -> None:
        self.phases[phase] = self.phases.get(phase, 0.0) + seconds

    @contextmanager
    def timed(self, phase: str) -> Iterator[None]:
        start = time.perf_counter()
        try:
            yield
        finally:
            self.add(phase, time.perf_counter() - start)

    @property
    def total(self) -> float:
        return sum(self.phases.values())

    def to_dict(self, up_s: float | None) -> dict[str, Any]:
        """The phases, their total, and the total's share of ``up_s`` (the process's
        seconds from its start to up)."""
        share = None if not up_s else self.total / up_s
        return {"phases_s": {name: round(value, 6) for name, value in self.phases.items()},
                "total_s": round(self.total, 6),
                "process_up_s": None if up_s is None else round(up_s, 3),
                "share": None if share is None else round(share, 6)}

    def line(self, up_s: float | None) -> str:
        """One line for the rank's log."""
        spent = ", ".join(f"{name} {value:.3f} s" for name, value in self.phases.items())
        if not up_s:
            return f"initorch's own time in this process: {self.total:.3f} s ({spent})"
        return (f"initorch's own time in this process: {self.total:.3f} s of {up_s:.1f} s from "
                f"process start to up ({self.total / up_s:.2%}; {spent})")


COST = Cost()
"""This process's account (an engine starts one rank per process)."""


def process_age() -> float | None:
    """Seconds since this process started, by the kernel's clock (``None`` off Linux)."""
    try:
        with open("/proc/self/stat") as stat:
            fields = stat.read().rsplit(")", 1)[1].split()
        with open("/proc/uptime") as uptime:
            now = float(uptime.read().split()[0])
    except (OSError, ValueError, IndexError):
        return None
    started = int(fields[19]) / os.sysconf("SC_CLK_TCK")  # field 22: starttime, in ticks
    return max(now - started, 0.0)
