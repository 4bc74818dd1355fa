"""Two hosts on one machine: two network namespaces joined by a veth pair, each with its own
address, for the tests that run a job across two hosts (``tests/e2e/test_two_hosts.py``,
``tests/vllm/test_two_nodes.py``).

Off loopback is where default host names, advertised addresses and session ids go wrong,
and a namespace has no address but its own: nothing in it can fall back to the machine's.
The namespaces, their addresses (a private range, 10.231.7.0/24, that exists only inside
them) and the veth pair are created for the test and removed afterwards, with every
process still in them, also when the test fails.  ``two_hosts`` skips, saying why, only
where namespaces cannot be created (not root, or no ``ip``); CI runs as root and
``.ci/run`` installs iproute2.

A test module uses the fixture by naming it (pytest finds fixtures by name in the
module): ``two_hosts = netns.two_hosts``.
"""

from __future__ import annotations

import os
import shutil
import socket
import subprocess
import uuid
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest

__all__ = ["SUBNET", "Connection", "Host", "cannot_create_namespaces", "ip", "two_hosts"]

SUBNET = "10.231.7"

_ESTABLISHED = "01"  # the st column of /proc/net/tcp (include/net/tcp_states.h)


@dataclass(frozen=True)
class Connection:
    """One established TCP connection, as the kernel lists it, and its process."""

    pid: int
    process: str  # /proc/<pid>/comm: vLLM names its processes (VLLM::Worker_TP...)
    local: tuple[str, int]
    remote: tuple[str, int]


@dataclass(frozen=True)
class Host:
    """One namespace: its name, its address and the veth end that carries it."""

    namespace: str
    address: str
    interface: str

    @property
    def prefix(self) -> list[str]:
        """The command prefix that runs a command inside this host."""
        return ["ip", "netns", "exec", self.namespace]

    def pids(self) -> list[int]:
        """Every process in this host's network namespace."""
        return [int(pid) for pid in ip("netns", "pids", self.namespace).stdout.split()]

    def connections(self) -> list[Connection]:
        """The established TCP connections (IPv4 and IPv4-mapped IPv6) of the processes in
        this host, from the kernel's socket tables of its namespace and each process's
        open sockets."""
        pids = self.pids()
        if not pids:
            return []
        owners: dict[str, int] = {}
        for pid in pids:
            for fd in Path(f"/proc/{pid}/fd").glob("*"):
                try:
                    target = os.readlink(fd)
                except OSError:  # closed since the listing
                    continue
                if target.startswith("socket:["):
                    owners[target[8:-1]] = pid
        found = []
        for table in ("tcp", "tcp6"):
            lines = Path(f"/proc/{pids[0]}/net/{table}").read_text().splitlines()[1:]
            for fields in map(str.split, lines):
                owner = owners.get(fields[9])  # the inode column
                if fields[3] != _ESTABLISHED or owner is None:
                    continue
                comm = Path(f"/proc/{owner}/comm").read_text().strip()
                found.append(Connection(owner, comm, _endpoint(fields[1]),
                                        _endpoint(fields[2])))
        return found


def _endpoint(text: str) -> tuple[str, int]:
    """``ADDRESS:PORT`` of /proc/net/tcp{,6} (hex, the address in host byte order by
    32-bit word) as a dotted IPv4 address and a port; an IPv4-mapped IPv6 address as its
    IPv4 address."""
    address, port = text.split(":")
    raw = b"".join(bytes.fromhex(address[i:i + 8])[::-1] for i in range(0, len(address), 8))
    if len(raw) == 16:
        raw = raw[12:] if raw[:12] == bytes(10) + b"\xff\xff" else raw
    family = socket.AF_INET if len(raw) == 4 else socket.AF_INET6
    return socket.inet_ntop(family, raw), int(port, 16)


def ip(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(["ip", *args], capture_output=True, text=True, timeout=30,
                          check=False)


def cannot_create_namespaces() -> str | None:
    """Why this machine cannot give a test two namespaces; ``None`` when it can."""
    if os.geteuid() != 0:
        return "creating network namespaces needs root (CI runs as root)"
    if shutil.which("ip") is None:
        return "the ip command is missing (apt-get install iproute2; .ci/run does)"
    return None


@pytest.fixture
def two_hosts() -> Iterator[tuple[Host, Host]]:
    """Hosts A (``10.231.7.1``) and B (``10.231.7.2``), loopback up in each; afterwards
    every process left in them is killed, the namespaces (and their veth) are removed, and
    that they are gone is asserted."""
    reason = cannot_create_namespaces()
    if reason:
        pytest.skip(reason)
    tag = uuid.uuid4().hex[:8]
    hosts = (Host(f"initorch-a-{tag}", f"{SUBNET}.1", f"ita{tag}"),  # interface names:
             Host(f"initorch-b-{tag}", f"{SUBNET}.2", f"itb{tag}"))  # 15 characters at most
    created: list[Host] = []
    try:
        for host in hosts:
            result = ip("netns", "add", host.namespace)
            if result.returncode != 0:
                pytest.skip(f"cannot create a network namespace: {result.stderr.strip()}")
            created.append(host)
        pair = ("link", "add", hosts[0].interface, "type", "veth", "peer", "name",
                hosts[1].interface)
        steps: list[tuple[str, ...]] = [pair]
        for host in hosts:
            steps += [("link", "set", host.interface, "netns", host.namespace),
                      ("-n", host.namespace, "addr", "add", f"{host.address}/24", "dev",
                       host.interface),
                      ("-n", host.namespace, "link", "set", host.interface, "up"),
                      ("-n", host.namespace, "link", "set", "lo", "up")]
        for step in steps:
            result = ip(*step)
            assert result.returncode == 0, f"ip {' '.join(step)}: {result.stderr}"
        yield hosts
    finally:
        for host in created:  # their processes first, then the namespace (and its veth)
            for pid in host.pids():
                subprocess.run(["kill", "-9", str(pid)], check=False, capture_output=True)
            ip("netns", "del", host.namespace)
        listed = ip("netns", "list").stdout
        assert not any(host.namespace in listed for host in created), listed
