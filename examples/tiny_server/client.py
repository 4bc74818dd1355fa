"""A stdlib client for the tiny server: wait for it, talk to it, check it is gone.

Used by ``make demo`` and the tests; a script that starts the server under
torchrun needs exactly these.
"""

from __future__ import annotations

import json
import subprocess
import time
import urllib.error
import urllib.request
from pathlib import Path
from typing import Any


def wait_ready(proc: subprocess.Popen[str], ready_file: Path, timeout: float = 90.0
               ) -> dict[str, Any]:
    """The ready file's contents once rank 0 has written it; kills ``proc`` and raises
    with its output if it exits or does not get ready in time."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if ready_file.exists():
            return dict(json.loads(ready_file.read_text(encoding="utf-8")))
        if proc.poll() is not None:
            break
        time.sleep(0.2)
    proc.kill()
    out, err = proc.communicate()
    raise RuntimeError(f"the tiny server did not become ready (exit {proc.returncode}):\n"
                       f"{(out or '')[-2000:]}\n{(err or '')[-6000:]}")


def post(url: str, payload: dict[str, Any]) -> tuple[int, dict[str, Any]]:
    """POST JSON; the status and the JSON answer (also for 4xx answers)."""
    request = urllib.request.Request(url, data=json.dumps(payload).encode(), method="POST",
                                     headers={"Content-Type": "application/json"})
    try:
        with urllib.request.urlopen(request, timeout=60) as response:
            return int(response.status), dict(json.loads(response.read()))
    except urllib.error.HTTPError as error:
        return int(error.code), dict(json.loads(error.read()))


def get(url: str) -> dict[str, Any]:
    with urllib.request.urlopen(url, timeout=30) as response:
        return dict(json.loads(response.read()))


def listening(port: int) -> bool:
    """Whether a socket on this host listens on ``port`` (read from /proc, no connect)."""
    needle = f":{port:04X}"
    for table in ("/proc/net/tcp", "/proc/net/tcp6"):
        with open(table, encoding="ascii") as handle:
            if any(f[1].endswith(needle) and f[3] == "0A" for f in map(str.split, handle)):
                return True
    return False


def alive(pid: int) -> bool:
    """Whether ``pid`` runs (a zombie waiting to be reaped does not count)."""
    try:
        with open(f"/proc/{pid}/stat", encoding="ascii") as stat:
            return stat.read().rsplit(")", 1)[1].split()[0] != "Z"
    except FileNotFoundError:
        return False


def leftovers(ready: dict[str, Any]) -> list[str]:
    """What a stopped server left behind: rank processes, its HTTP port, Mooncake engine
    ports, the managed Mooncake master (and its watchdog) and the master's ports."""
    found = []
    http_port = int(ready["url"].rsplit(":", 1)[1])
    if listening(http_port):
        found.append(f"HTTP port {http_port} is still open")
    for rank, info in enumerate(ready["ranks"]):
        if alive(info["pid"]):
            found.append(f"rank {rank} (pid {info['pid']}) is still running")
        if info["mooncake_port"] and listening(info["mooncake_port"]):
            found.append(f"rank {rank}'s Mooncake port {info['mooncake_port']} is still open")
        master = info.get("master") or {"pids": [], "ports": []}
        found += [f"rank {rank}'s mooncake_master process {pid} is still running"
                  for pid in master["pids"] if alive(pid)]
        found += [f"rank {rank}'s mooncake_master port {port} is still open"
                  for port in master["ports"] if listening(port)]
    return found
