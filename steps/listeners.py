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

Linux only (``/proc`` and netlink); elsewhere nothing is found and nothing is warned.
"""

from __future__ import annotations

import ipaddress
import os
import socket
import struct
from collections.abc import Iterator

from initorch.plugin import StepContext, record

LISTEN_STATE = "0A"  # TCP_LISTEN in /proc/net/tcp
# sock_diag (linux/sock_diag.h, linux/inet_diag.h): one dump request per address family
# for the TCP sockets in state LISTEN (TCP_LISTEN = 10), each answer an inet_diag_msg.
NETLINK_SOCK_DIAG = 4
SOCK_DIAG_BY_FAMILY = 20
NLM_F_REQUEST, NLM_F_DUMP = 0x1, 0x300
NLMSG_ERROR, NLMSG_DONE = 2, 3
NLMSG_HEADER = struct.Struct("=IHHII")  # length, type, flags, sequence, port id
DIAG_REQUEST = struct.Struct("=BBBxI48x")  # family, protocol, ext, states, inet_diag_sockid
DIAG_MESSAGE = struct.Struct("=BBBB2s2x16s16x28xI")  # family, state, .., sport, src, .., inode
TCP_LISTEN_BIT = 1 << 10
WILDCARDS = frozenset({"0.0.0.0", "::"})
RESTRICT_HINT = (
    "Mooncake binds these ports on every interface whatever its hostname setting says; "
    "to keep them off the network, block them at the host firewall (e.g. iptables -A "
    "INPUT ! -i lo -p tcp --dport PORT -j DROP) or run the server in a network namespace "
    "or container without outside interfaces")


@record(order=True)
class Listener:
    """A listening TCP socket: its local address and port."""

    port: int
    address: str

    @property
    def on_every_interface(self) -> bool:
        return self.address in WILDCARDS


def listeners(pid: int | str = "self") -> set[Listener]:
    """The TCP sockets process ``pid`` listens on (empty where /proc cannot tell).

    The listening sockets of the network namespace come from the kernel's sock_diag
    (netlink), which walks only the listening ones; ``/proc/PID/net/tcp`` and ``tcp6``,
    read where netlink is refused, walk every bucket of the established-connection hash
    too, however few sockets there are: 4.5 ms a table here (262,144 buckets), 18 ms
    of the store step's 50 ms, which calls this twice, and more on a host with many
    connections.  Either way a socket counts when it is one of ``pid``'s descriptors;
    netlink answers for this process's network namespace, so another's is read from
    ``/proc``."""
    inodes = _socket_inodes(pid)
    if not inodes:
        return set()
    try:
        if os.readlink(f"/proc/{pid}/ns/net") == os.readlink("/proc/self/ns/net"):
            return {listener for inode, listener in _diag_listeners() if inode in inodes}
    except OSError:
        pass  # netlink refused, or the namespace unreadable: /proc tells
    return _proc_listeners(pid, inodes)


def _diag_listeners() -> Iterator[tuple[str, Listener]]:
    """Every listening TCP socket of this network namespace: its inode and address."""
    with socket.socket(socket.AF_NETLINK, socket.SOCK_RAW, NETLINK_SOCK_DIAG) as diag:
        for family in (socket.AF_INET, socket.AF_INET6):
            body = DIAG_REQUEST.pack(family, socket.IPPROTO_TCP, 0, TCP_LISTEN_BIT)
            diag.send(NLMSG_HEADER.pack(NLMSG_HEADER.size + len(body), SOCK_DIAG_BY_FAMILY,
                                        NLM_F_REQUEST | NLM_F_DUMP, family, 0) + body)
            yield from _diag_answers(diag)


def _diag_answers(diag: socket.socket) -> Iterator[tuple[str, Listener]]:
    """The answers to one dump request, until its end; OSError on a netlink error."""
    while True:
        data = diag.recv(65536)
        at = 0
        while at + NLMSG_HEADER.size <= len(data):
            length, kind, _, _, _ = NLMSG_HEADER.unpack_from(data, at)
            if kind == NLMSG_DONE:
                return
            if kind == NLMSG_ERROR or length < NLMSG_HEADER.size:
                raise OSError("sock_diag refused the request")
            family, _, _, _, port, source, inode = DIAG_MESSAGE.unpack_from(
                data, at + NLMSG_HEADER.size)
            size = 4 if family == socket.AF_INET else 16
            yield str(inode), Listener(int.from_bytes(port, "big"),
                                       str(ipaddress.ip_address(source[:size])))
            at += (length + 3) & ~3


def _proc_listeners(pid: int | str, inodes: set[str]) -> set[Listener]:
    """:func:`listeners` from ``/proc/PID/net/tcp`` and ``tcp6``."""
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
