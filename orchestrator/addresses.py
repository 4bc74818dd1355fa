"""``HOST:PORT`` as torch.distributed, Mooncake and SGLang write it, IPv6 included.

Mooncake writes IPv6 endpoints as ``[addr]:port`` (``maybeWrapIpV6`` in
``mooncake-transfer-engine/include/common.h``), and SGLang's
``NetworkAddress.to_host_port_str`` does the same.  :func:`host_port` is the one
place that joins a host and a port, :func:`split_host_port` the one that splits
them: the launchers' ``--dist-init-addr`` and the built-in steps both use them.
"""

from __future__ import annotations

import ipaddress


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
