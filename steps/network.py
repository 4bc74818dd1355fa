"""Addresses as Mooncake and torch.distributed want them, IPv6 included.

Two facts from upstream shape this module:

* SGLang gives its Mooncake engine the host's own address (``get_local_ip_auto``
  in ``srt/utils/network.py``, 0.5.23), never ``127.0.0.1``: peers on other
  hosts use that name to reach the engine.  :func:`local_address_towards` finds
  the address the kernel would use to reach a given peer (the rendezvous host,
  the Mooncake master), which is the address those peers can reach us on.
* Mooncake writes IPv6 endpoints as ``[addr]:port`` (``maybeWrapIpV6`` in
  ``mooncake-transfer-engine/include/common.h``), and SGLang's
  ``NetworkAddress.to_host_port_str`` does the same.  :func:`host_port` is the
  one place that joins a host and a port.
"""

from __future__ import annotations

import ipaddress
import os
import socket

# What SGLang's get_local_ip_auto honours first (srt/utils/network.py, 0.5.23).
HOST_IP_VARIABLES = ("SGLANG_HOST_IP", "HOST_IP")


def is_ipv6(host: str) -> bool:
    try:
        return isinstance(ipaddress.ip_address(host.strip("[]")), ipaddress.IPv6Address)
    except ValueError:
        return False


def host_port(host: str, port: int) -> str:
    """``host:port``, with IPv6 literals bracketed: ``[fe80::1]:15001``."""
    bare = host.strip("[]")
    return f"[{bare}]:{port}" if is_ipv6(bare) else f"{bare}:{port}"


def split_host_port(text: str) -> tuple[str, int]:
    """``host:port`` or ``[v6]:port`` -> (host, port); raises ValueError when malformed."""
    if text.startswith("["):
        host, sep, rest = text[1:].partition("]")
        if not sep or not rest.startswith(":"):
            raise ValueError(f"{text!r} is not [IPv6]:PORT")
        port_text = rest[1:]
    else:
        host, sep, port_text = text.rpartition(":")
        if not sep or ":" in host:
            raise ValueError(f"{text!r} is not HOST:PORT (write IPv6 as [addr]:port)")
    if not host or not port_text.isdigit() or not 0 < int(port_text) < 65536:
        raise ValueError(f"{text!r} is not HOST:PORT with a port in 1-65535")
    return host, int(port_text)


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
