"""Ports a test picks by number for a server that binds them seconds later.

A port the kernel picks (a bind to port 0) comes from its ephemeral range
(``/proc/sys/net/ipv4/ip_local_port_range``, 32768-60999 here), the range it also takes
every outgoing connection's local port from.  Between the pick and the server's bind
(16 s for SGLang's HTTP server) a connection of a test running beside it can take that
port: seen once in CI, SGLang's server failed to bind its ``--port`` ("address already
in use") and the test waited out its 420 s.  The kernel never hands out a port below
that range, so one picked at random there, and checked free, can only meet another
test's pick.
"""

from __future__ import annotations

import random
import socket
from pathlib import Path

from initorch.steps.network import free_port

LOWEST = 10_000  # above the ports system services commonly hold
HEADROOM = 2_000  # below the ephemeral range: servers derive more ports from theirs (+1..)
RANGE_FILE = Path("/proc/sys/net/ipv4/ip_local_port_range")


def unassigned_port(host: str = "127.0.0.1") -> int:
    """A free TCP port on ``host`` that the kernel does not assign to anything itself;
    a kernel-picked one where the ephemeral range leaves no room below it."""
    ceiling = _ephemeral_low() - HEADROOM
    for _ in range(200) if ceiling > LOWEST else ():
        port = random.randint(LOWEST, ceiling)
        with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as probe:
            try:
                probe.bind((host, port))
            except OSError:
                continue  # taken: another try
            return port
    return free_port(host)


def _ephemeral_low() -> int:
    try:
        return int(RANGE_FILE.read_text().split()[0])
    except (OSError, ValueError, IndexError):
        return 32_768  # Linux's default
