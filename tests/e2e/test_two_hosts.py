"""Two hosts, for real: two network namespaces joined by a veth pair, each with its own
address, and ``torchrun --nnodes 2`` with one node in each.

Off loopback is where default host names, advertised addresses and session ids go
wrong: here the job's store (torchrun's agent on host A), the gloo group, the
Mooncake engines (each must advertise its own host's address), the managed Mooncake
master (on host A, reached from host B) and the store clients all work across the
two addresses, and bytes are read from the other host engine to engine and through
the Mooncake Store, byte-checked.

The namespaces, their addresses and the veth pair are ``tests.support.netns``'s
``two_hosts``: created for the test and removed afterwards, also when it fails; it
skips, saying why, only where namespaces cannot be created.
"""

from __future__ import annotations

import subprocess

from tests.support import netns
from tests.support.ranks import BIN, clean_env, wait_all

two_hosts = netns.two_hosts  # the fixture: pytest finds it by its name in this module
MASTER_PORT = 29500  # a fresh namespace: nothing else listens there


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
