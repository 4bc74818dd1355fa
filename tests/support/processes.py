"""Processes and listening ports as /proc shows them, and a bounded wait for a change."""

from __future__ import annotations

import time


def alive(pid: int) -> bool:
    """True while ``pid`` runs (a zombie waiting for its parent counts as gone)."""
    try:
        with open(f"/proc/{pid}/stat", encoding="ascii") as stat:
            return stat.read().rsplit(")", 1)[1].split()[0] != "Z"
    except FileNotFoundError:
        return False


def listening(port: int) -> bool:
    needle = f":{port:04X}"
    for table in ("/proc/net/tcp", "/proc/net/tcp6"):
        with open(table, encoding="ascii") as handle:
            next(handle)
            if any(f[1].endswith(needle) and f[3] == "0A" for f in map(str.split, handle)):
                return True
    return False


def wait_for(condition: object, deadline_s: float = 60.0) -> bool:
    """Poll ``condition()`` until true or the (generous) deadline passes."""
    end = time.monotonic() + deadline_s
    while time.monotonic() < end:
        if condition():  # type: ignore[operator]
            return True
        time.sleep(0.1)
    return bool(condition())  # type: ignore[operator]
