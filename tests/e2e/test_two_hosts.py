"""Two hosts, for real: two network namespaces joined by a veth pair, each with its own
address, and ``torchrun --nnodes 2`` with one node in each.

Off loopback is where default host names, advertised addresses and session ids go
wrong: here the job's store (torchrun's agent on host A), the gloo group, the
Mooncake engines (each must advertise its own host's address), the managed Mooncake
master (on host A, reached from host B) and the store clients all work across the
two addresses, and bytes are read from the other host engine to engine and through
the Mooncake Store, byte-checked.

The namespaces, their addresses (a private range, 10.231.7.0/24, that exists only
inside them) and the veth pair are created for the test and removed afterwards,
also when it fails.  It skips, saying why, only where namespaces cannot be created
(not root, or no ``ip``); CI runs as root and ``.ci/run`` installs iproute2.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import uuid
from collections.abc import Iterator
from dataclasses import dataclass

import pytest

from tests.support.ranks import BIN, clean_env, wait_all

SUBNET = "10.231.7"
MASTER_PORT = 29500  # a fresh namespace: nothing else listens there


@dataclass(frozen=True)
class Host:
    namespace: str
    address: str

    @property
    def prefix(self) -> list[str]:
        return ["ip", "netns", "exec", self.namespace]


def ip(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(["ip", *args], capture_output=True, text=True, timeout=30,
                          check=False)


def cannot_create_namespaces() -> str | None:
    if os.geteuid() != 0:
        return "creating network namespaces needs root (CI runs as root)"
    if shutil.which("ip") is None:
        return "the ip command is missing (apt-get install iproute2; .ci/run does)"
    return None


@pytest.fixture
def two_hosts() -> Iterator[tuple[Host, Host]]:
    reason = cannot_create_namespaces()
    if reason:
        pytest.skip(reason)
    tag = uuid.uuid4().hex[:8]
    hosts = (Host(f"initorch-a-{tag}", f"{SUBNET}.1"), Host(f"initorch-b-{tag}", f"{SUBNET}.2"))
    veth = (f"ita{tag}", f"itb{tag}")  # interface names: 15 characters at most
    created: list[str] = []
    try:
        for host in hosts:
            result = ip("netns", "add", host.namespace)
            if result.returncode != 0:
                pytest.skip(f"cannot create a network namespace: {result.stderr.strip()}")
            created.append(host.namespace)
        steps = [("link", "add", veth[0], "type", "veth", "peer", "name", veth[1])]
        for host, link in zip(hosts, veth, strict=True):
            steps += [("link", "set", link, "netns", host.namespace),
                      ("-n", host.namespace, "addr", "add", f"{host.address}/24", "dev", link),
                      ("-n", host.namespace, "link", "set", link, "up"),
                      ("-n", host.namespace, "link", "set", "lo", "up")]
        for step in steps:
            result = ip(*step)
            assert result.returncode == 0, f"ip {' '.join(step)}: {result.stderr}"
        yield hosts
    finally:
        for namespace in created:  # our processes first, then the namespace (and its veth)
            pids = ip("netns", "pids", namespace).stdout.split()
            for pid in pids:
                subprocess.run(["kill", "-9", pid], check=False, capture_output=True)
            ip("netns", "del", namespace)
        listed = ip("netns", "list").stdout
        assert not any(namespace in listed for namespace in created), listed


def test_a_job_on_two_hosts_works_across_their_addresses(two_hosts):
    host_a, host_b = two_hosts
    procs = []
    for node, host in enumerate((host_a, host_b)):
        procs.append(subprocess.Popen(
            [*host.prefix, str(BIN / "torchrun"), "--nnodes", "2", "--node-rank", str(node),
             "--nproc-per-node", "1", "--master-addr", host_a.address,
             "--master-port", str(MASTER_PORT), "--no-python", str(BIN / "initorch"), "run",
             "--profile", "cpu", "--plugin", "tests.support.job_plugin",
             "--set", "checks.verify_transfer=true", "--set", "hicache.host_pool_mb=4",
             "--log-format", "json"],
            env=clean_env(), cwd=str(BIN.parent.parent), text=True,
            stdout=subprocess.PIPE, stderr=subprocess.PIPE))
    ended = wait_all(procs)
    for result in ended:
        assert result.returncode == 0, result.stderr[-6000:]
    a, b = ended
    addresses = {0: host_a.address, 1: host_b.address}

    for rank, result in enumerate(ended):
        [agreed] = result.named("plan_agreed")
        assert agreed["store"] == f"{host_a.address}:{MASTER_PORT}"  # torchrun's agent store
        [gloo] = result.named("gloo_interface_chosen")
        assert gloo["interface"].startswith("it")  # the veth, not lo
        [engine] = result.named("transfer_engine_ready")
        assert engine["session_id"].startswith(f"{addresses[rank]}:")  # its own host
        [master] = result.named("mooncake_master_ready")
        assert master["address"].startswith(f"{host_a.address}:")
        assert master["managed"] is (rank == 0)
        [moved] = result.named("engine_transfer_verified")
        assert moved["peer_session_id"].startswith(f"{addresses[1 - rank]}:")
        [pages] = result.named("transfer_verified")
        assert pages["received_from"] == 1 - rank
        assert "127.0.0.1" not in " ".join(str(e) for e in (engine, master, moved))
    assert [e["rank"] for e in a.named("mooncake_master_stopped")] == [0]
    assert not b.named("mooncake_master_stopped")
