"""Addresses as Mooncake and torch.distributed want them, IPv6 included.

Two facts from upstream shape this module:

* SGLang gives its Mooncake engine the host's own address (``get_local_ip_auto``
  in ``srt/utils/network.py``, 0.5.23), never ``127.0.0.1``: peers on other
  hosts use that name to reach the engine.  :func:`local_address_towards` finds
  the address the kernel would use to reach a given peer (the rendezvous host,
  the Mooncake master), which is the address those peers can reach us on.  Only
  the first rule is SGLang's (``utils/network.py:391-431``): ``SGLANG_HOST_IP``
  then ``HOST_IP`` win.  After that SGLang takes the first address of a network
  interface (``SGLANG_LOCAL_IP_NIC`` picks it) and then the route to a public
  address; initorch takes the route to the peer, a deliberate difference (on a
  multi-homed host it is the address that peer can reach).
* Mooncake writes IPv6 endpoints as ``[addr]:port``; :mod:`initorch.addresses`
  joins and splits them (re-exported here for the steps).
"""

from __future__ import annotations

import ipaddress
import os
import socket
from pathlib import Path

from initorch.plugin import host_port, is_ipv6, non_ascii_problem, split_host_port

__all__ = ["HOST_IP_VARIABLES", "ascii_address", "can_connect", "family_of", "free_port",
           "host_port", "interface_with", "is_ipv6", "local_address_towards",
           "split_host_port"]

# What SGLang's get_local_ip_auto honours first (srt/utils/network.py, 0.5.23).
HOST_IP_VARIABLES = ("SGLANG_HOST_IP", "HOST_IP")


def ascii_address(text: str, what: str) -> str:
    """``text`` when it is plain ASCII, else ValueError naming the first other character.

    Host names, addresses and URL schemes reach Mooncake and the resolver as bytes:
    ``P2PHANDSHAKE`` whose P is a Cyrillic ER (U+0420) is not Mooncake's literal, so
    Mooncake takes it as an etcd host and the engine fails 15 s later with an unrelated
    error.  Refused where the value is read, naming the character and its position."""
    problem = non_ascii_problem(text, what)
    if problem is not None:
        raise ValueError(f"{what}={text!r}: " + problem.removeprefix(f"{what} {text!r} "))
    return text


def family_of(host: str) -> socket.AddressFamily:
    return socket.AF_INET6 if is_ipv6(host) else socket.AF_INET


def free_port(host: str) -> int:
    """A TCP port that is free on ``host`` right now (the OS picks it)."""
    with socket.socket(family_of(host), socket.SOCK_STREAM) as probe:
        probe.bind((host.strip("[]"), 0))
        port: int = probe.getsockname()[1]
        return port


def local_address_towards(peer: str) -> str:
    """The local address the kernel routes to ``peer`` from (no packet is sent).

    ``HOST_IP`` / ``SGLANG_HOST_IP`` win when set, as in SGLang.  A peer on
    loopback gives a loopback address; a name is resolved first.
    """
    for variable in HOST_IP_VARIABLES:
        value = os.environ.get(variable, "").strip()
        if value:
            return value
    infos = socket.getaddrinfo(peer.strip("[]"), 1, type=socket.SOCK_DGRAM)
    family, _, _, _, address = infos[0]
    with socket.socket(family, socket.SOCK_DGRAM) as probe:
        probe.connect(address)  # UDP connect only picks a route
        local: str = probe.getsockname()[0]
    return local.split("%", maxsplit=1)[0]  # drop an IPv6 zone id


def can_connect(host: str, port: int, timeout: float) -> OSError | None:
    """None if a TCP connection to ``host:port`` opens within ``timeout``, else the error."""
    try:
        with socket.create_connection((host.strip("[]"), port), timeout=timeout):
            return None
    except OSError as exc:
        return exc


SIOCGIFADDR = 0x8915  # linux/sockios.h: an interface's (primary) IPv4 address


def interface_with(address: str) -> str | None:
    """The name of the network interface that holds ``address`` (``eth0``), or None.

    IPv4 addresses are asked of the kernel per interface (``SIOCGIFADDR``), IPv6
    ones read from ``/proc/net/if_inet6``; Linux only, None elsewhere.
    """
    try:
        wanted = ipaddress.ip_address(address.strip("[]"))
    except ValueError:
        return None
    if wanted.version == 6:
        return _ipv6_interface(wanted)
    try:
        import fcntl
        import struct
    except ImportError:  # not a POSIX system
        return None
    with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as probe:
        for _, name in socket.if_nameindex():
            request = struct.pack("256s", name.encode()[:15])
            try:
                reply = fcntl.ioctl(probe.fileno(), SIOCGIFADDR, request)
            except OSError:  # down, or no IPv4 address
                continue
            if socket.inet_ntoa(reply[20:24]) == str(wanted):
                return name
    return None


def _ipv6_interface(wanted: ipaddress.IPv4Address | ipaddress.IPv6Address) -> str | None:
    try:
        lines = Path("/proc/net/if_inet6").read_text(encoding="ascii").splitlines()
    except OSError:
        return None
    for line in lines:
        fields = line.split()
        if len(fields) == 6 and ipaddress.ip_address(int(fields[0], 16)) == wanted:
            return fields[5]
    return None
