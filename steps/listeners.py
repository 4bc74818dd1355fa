"""Which TCP ports a process listens on, and on which interfaces.

Mooncake listens on every interface whatever host it is given: the transfer
engine's handshake daemon binds ``INADDR_ANY`` / ``IN6ADDR_ANY``
(``SocketHandShakePlugin::startDaemon``,
``mooncake-transfer-engine/src/transfer_metadata_plugin.cpp``, 0.3.13) and
its RPC server and the store's engine do the same; ``mooncake_master`` opens
one such port beside the loopback addresses it is given.  Measured on this
machine with ``mooncake.hostname: 127.0.0.1``: four wildcard listeners in the
run's process, one in the master.  A profile that says loopback therefore does
not keep Mooncake off the network; the steps warn when that happens
(:func:`warn_if_exposed`) and say how to restrict it.

Linux only (``/proc``); elsewhere nothing is found and nothing is warned.
"""

from __future__ import annotations

import ipaddress
import os
from dataclasses import dataclass

from initorch.plugin import StepContext

LISTEN_STATE = "0A"  # TCP_LISTEN in /proc/net/tcp
WILDCARDS = frozenset({"0.0.0.0", "::"})
RESTRICT_HINT = (
    "Mooncake binds these ports on every interface whatever its hostname setting says; "
    "to keep them off the network, block them at the host firewall (e.g. iptables -A "
    "INPUT ! -i lo -p tcp --dport PORT -j DROP) or run the server in a network namespace "
    "or container without outside interfaces")


@dataclass(frozen=True, slots=True, order=True)
class Listener:
    """A listening TCP socket: its local address and port."""

    port: int
    address: str

    @property
    def on_every_interface(self) -> bool:
        return self.address in WILDCARDS


def listeners(pid: int | str = "self") -> set[Listener]:
    """The TCP sockets process ``pid`` listens on (empty where /proc cannot tell)."""
    inodes = _socket_inodes(pid)
    found: set[Listener] = set()
    for table in ("tcp", "tcp6"):
        try:
            with open(f"/proc/{pid}/net/{table}", encoding="ascii") as rows:
                next(rows, None)
                for row in rows:
                    fields = row.split()
                    if len(fields) > 9 and fields[3] == LISTEN_STATE and fields[9] in inodes:
                        found.add(parse_proc_address(fields[1]))
        except OSError:
            continue
    return found


def _socket_inodes(pid: int | str) -> set[str]:
    folder = f"/proc/{pid}/fd"
    inodes = set()
    try:
        names = os.listdir(folder)
    except OSError:
        return set()
    for name in names:
        try:
            target = os.readlink(f"{folder}/{name}")
        except OSError:
            continue
        if target.startswith("socket:["):
            inodes.add(target[8:-1])
    return inodes


def parse_proc_address(local: str) -> Listener:
    """``0100007F:1F90`` (IPv4) or a 32-digit IPv6 address, as /proc writes them."""
    address_hex, port_hex = local.split(":")
    raw = bytes.fromhex(address_hex)
    # /proc writes each 32-bit word in host (little-endian) order.
    ordered = b"".join(raw[i:i + 4][::-1] for i in range(0, len(raw), 4))
    return Listener(int(port_hex, 16), str(ipaddress.ip_address(ordered)))


def is_loopback(host: str) -> bool:
    """True for a loopback address or ``localhost`` (a name is never resolved here)."""
    host = host.strip("[]")
    if host.lower() == "localhost":
        return True
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:
        return False


def warn_if_exposed(ctx: StepContext, who: str, host: str, before: set[Listener],
                    pid: int | str = "self") -> list[int]:
    """Say (``mooncake_listens_on_all_interfaces``) when ``host`` is loopback but
    process ``pid`` opened, since ``before``, listeners on every interface; returns
    their ports.  The engine, the master and the store each open some: the first is a
    warning with the way to restrict them, the others of the run only list their
    ports, at info level."""
    if not is_loopback(host):
        return []
    exposed = sorted({entry.port for entry in listeners(pid) - before
                      if entry.on_every_interface})
    if exposed:
        if ctx.first_time("mooncake_listens_on_all_interfaces"):
            ctx.log.warning("mooncake_listens_on_all_interfaces", component=who,
                            configured_host=host, ports=exposed, hint=RESTRICT_HINT)
        else:
            ctx.log.info("mooncake_listens_on_all_interfaces", component=who,
                         configured_host=host, ports=exposed)
    return exposed
