"""``mooncake_master``: the Mooncake master the store clients talk to.

``mooncake.master: HOST:PORT`` names a running master; the step checks that it
answers an RPC within ``mooncake.master_connect_timeout_s`` and fails at once
otherwise (:func:`rpc_problem`: a bare connect also passes a process that accepts
and never answers, and then the store's setup waits 30 s per RPC, 20 times; the
whole answer, within one deadline, since a first byte also passes a peer that then
sends junk, hangs up or trickles).
(Mooncake's own client would retry for about 90 seconds, ``real_client.cpp``:
"Failed to create client after 20 retries".)

``mooncake.master: local`` starts one from the installed wheel (the CPU wheel
ships ``mooncake/mooncake_master``): global rank 0 starts it with free ports
and the embedded HTTP metadata server on, and tells the other ranks where it is
over the process group.  It listens on loopback when every rank runs on this
host, and otherwise on the address that reaches the rendezvous (``HOST_IP``
wins), so that the store clients on the other hosts reach it.  It is ready
when ``/health`` says ``service_ready`` and its RPC port accepts connections.
Teardown stops it (SIGTERM, SIGKILL after ``mooncake.master_stop_grace_s``);
:mod:`initorch.steps._master_watchdog` stops it too when initorch dies without
a teardown, even by SIGKILL.

The master is a process that needs no torch, and it takes about a second to
become ready; ``launch_mooncake_master`` therefore starts it on rank 0 before
``import_backend``, so that it boots while torch imports, and ``mooncake_master``
then adopts it and waits until it is ready.  Without the launch step in the
plan, ``mooncake_master`` starts the master itself.
"""

from __future__ import annotations

import contextlib
import importlib.util
import os
import socket
import struct
import sys
import threading
import time
from collections.abc import Iterator
from dataclasses import field
from pathlib import Path
from typing import IO, TYPE_CHECKING, Any

from initorch.plugin import MAX_TIMEOUT_S, StepContext, StepError, record, setting, step
from initorch.steps.engine_hostname import local_host, rendezvous_host
from initorch.steps.listeners import warn_if_exposed
from initorch.steps.mooncake_build import WHEEL_CHOICE
from initorch.steps.mooncake_env import read_master
from initorch.steps.network import free_port, host_port, split_host_port
from initorch.steps.rendezvous import MASTER_ADDR
from initorch.steps.shared_settings import HICACHE_ENABLED, MOONCAKE_ENABLED, STORAGE_BACKEND

if TYPE_CHECKING:  # process and HTTP modules load when a master is needed, not for a plan
    import subprocess

MASTER = setting(
    "mooncake.master", str, default="local", pattern=r"\S+", from_environment=read_master,
    description="local: a managed mooncake_master on loopback for this run; else HOST:PORT "
                "of a running master ([v6]:PORT for IPv6) (SGLang: MOONCAKE_MASTER)")
CONNECT_TIMEOUT_S = setting(
    "mooncake.master_connect_timeout_s", float, default=5, exclusive_minimum=0,
    maximum=MAX_TIMEOUT_S, description="how long a given master may take to accept a connection")
START_TIMEOUT_S = setting(
    "mooncake.master_start_timeout_s", float, default=60, exclusive_minimum=0,
    maximum=MAX_TIMEOUT_S, description="how long a managed master may take to become ready")
STOP_GRACE_S = setting(
    "mooncake.master_stop_grace_s", float, default=5, minimum=0, maximum=3600,
    description="seconds between SIGTERM and SIGKILL when a managed master is stopped")

LOOPBACK = "127.0.0.1"
WATCHDOG = Path(__file__).with_name("_master_watchdog.py")


START_ATTEMPTS = 3  # free ports are picked, then bound by the master: another may win
MASTER_OWNER = 0  # the global rank that starts a managed master and shares its address
LAUNCH_STEP = "launch_mooncake_master"
CLIENTS_CLOSE_WAIT_S = 10.0  # how long the owner waits for other ranks' store clients
LOG_TAIL_BYTES = 64 * 1024  # what log_tail reads of the master's log, from its end
READY_POLL_S = 0.02
"""How often :func:`serves_within` asks a starting master whether it serves.  The store's
setup waits for the answer (the master boots in about 1 s, longer than torch imports on
a quiet machine), so the interval is start-up time on the critical path: half of it on
average.  A poll before the master listens is a refused connect, and after it one small
HTTP request and one RPC probe, so asking 50 times a second costs the booting master
nothing it notices."""


# Mooncake's RPC is yalantinglibs' coro_rpc (``include/ylt/coro_rpc/impl/protocol/
# coro_rpc_protocol.hpp``, ``req_header`` / ``resp_header``): a 20-byte little-endian request
# header (magic 21, version, serialize type, message type, sequence number, function id,
# body length, attachment length) and a 16-byte response header (magic 21, version, error
# code, message type, the request's sequence number, body length, attachment length)
# followed by the body and the attachment.  Function id 0 is no registered function, so a
# live master answers at once with error 11 and a 40-byte body holding "the rpc function
# not registered" (56 bytes in all, read from the CPU wheel's mooncake_master
# 0.3.13.post1).
CORO_RPC_MAGIC = 21
PROBE_SEQUENCE = 1
RPC_PROBE = struct.pack("<BBBBIIII", CORO_RPC_MAGIC, 0, 0, 0, PROBE_SEQUENCE, 0, 0, 0)
RPC_ANSWER_HEADER = struct.Struct("<BBBBIII")
MAX_PROBE_ANSWER = 64 * 1024  # a body past this is no answer to a probe


class MasterPortTaken(StepError):
    """The managed master lost a race for a port it was given (tried again, new ports)."""


@record(frozen=False)
class ManagedMaster:
    """A ``mooncake_master`` this rank started, behind its watchdog."""

    watchdog: subprocess.Popen[bytes]
    pid: int
    host: str
    ports: dict[str, int]
    log_path: str  # removed by the watchdog once the master writes to it
    log_fd: int  # this process's descriptor of that file, open until stop()
    grace: float
    status: int | None = None
    stopped: bool = False
    stopping: bool = False  # stop() was called: an exit from now on is not a death
    died: int | None = None  # the exit status, when it exited on its own during the run

    def log_tail(self, lines: int = 20) -> str:
        try:
            size = os.fstat(self.log_fd).st_size
            start = max(size - LOG_TAIL_BYTES, 0)
            text = os.pread(self.log_fd, size - start, start).decode("utf-8", "replace")
        except OSError:
            return ""
        return "\n".join(text.splitlines()[-lines:])

    def ask_to_stop(self) -> None:
        """Close the watchdog's pipe: it stops the master (SIGTERM, then SIGKILL after the
        grace period).  Returns at once; :meth:`stop` waits.  The master takes 0.4-1 s to
        exit, which the rest of a teardown need not wait for: nothing after the store's
        close talks to it."""
        self.stopping = True
        stdin: IO[bytes] | None = self.watchdog.stdin
        if stdin is not None and not stdin.closed:
            stdin.close()

    def stop(self) -> int | None:
        """:meth:`ask_to_stop`, then wait for the watchdog; returns its exit status.
        Stopping twice is harmless: the second call returns the first one's status."""
        import subprocess

        if self.stopped:
            return self.status
        self.ask_to_stop()
        try:
            code = self.watchdog.wait(self.grace + 10)
        except subprocess.TimeoutExpired:
            self.watchdog.kill()  # the master still has PR_SET_PDEATHSIG
            code = self.watchdog.wait()
        if self.watchdog.stdout is not None:
            self.watchdog.stdout.close()
        os.close(self.log_fd)
        self.status, self.stopped = code, True
        return code


@record(frozen=False)
class MasterEndpoint:
    """Where the master is; ``managed`` when this rank started it."""

    address: str
    metadata_url: str | None
    managed: ManagedMaster | None = None
    owner_rank: int | None = None
    details: dict[str, Any] = field(default_factory=dict)


def master_binary() -> str:
    """``mooncake/mooncake_master`` of the installed wheel, found without importing it."""
    spec = importlib.util.find_spec("mooncake")
    if spec is None:
        raise StepError("Mooncake is not installed (no mooncake package), so there is no "
                        "mooncake_master to start",
                        hint=f"pip install {WHEEL_CHOICE} (initorch's extras: "
                             "initorch[mooncake-cpu], [mooncake], [mooncake-cuda13], "
                             "[mooncake-rocm], [mooncake-npu]); or set mooncake.master to a "
                             "running master's address, or mooncake.enabled=false")
    for folder in spec.submodule_search_locations or []:
        candidate = Path(folder) / "mooncake_master"
        if candidate.is_file():
            return str(candidate)
    raise StepError("no mooncake_master binary in the installed mooncake package",
                    hint="install a Mooncake wheel that ships the store (e.g. "
                         "mooncake-transfer-engine-non-cuda), or set mooncake.master to the "
                         "address of a running master")


def master_command(binary: str, ports: dict[str, int], host: str) -> list[str]:
    """RPC, the HTTP metadata server and the metrics/admin server, all on ``host``."""
    return [binary, f"--rpc_address={host}", f"--rpc_port={ports['rpc']}",
            "--enable_http_metadata_server=true", f"--http_metadata_server_host={host}",
            f"--http_metadata_server_port={ports['metadata']}",
            f"--metrics_host={host}", f"--metrics_port={ports['metrics']}"]


def master_host(ctx: StepContext) -> str:
    """Loopback when every rank runs here; else the address the other hosts reach."""
    if not ctx.rank.spans_hosts:
        return LOOPBACK
    return local_host("auto", rendezvous_host(ctx))


def health(host: str, port: int) -> dict[str, Any] | None:
    """The master's ``/health`` answer, or None while it does not answer."""
    import json
    import urllib.error
    import urllib.request

    try:
        url = f"http://{host_port(host, port)}/health"
        with urllib.request.urlopen(url, timeout=1) as reply:
            answer: dict[str, Any] = json.loads(reply.read())
            return answer
    except (OSError, ValueError, urllib.error.URLError):
        return None


def rpc_problem(host: str, port: int, timeout: float) -> str | None:
    """None when a coro_rpc server answers a probe at ``host:port`` in full within
    ``timeout`` (one deadline for the connect and the whole answer); else what the peer
    did.  A request, not a connect: a process that accepts and never answers (a hung
    master, a proxy with nothing behind it) passes a connect, and the store's setup
    would then wait 30 s per RPC, 20 times.  The whole answer, not its first byte: a
    peer that answers the magic byte and then junk, or hangs up, is not a master (the
    store would fail later with a wrong "the master is not running"), and one that
    trickles a byte at a time would hold the store's setup until the watchdog's
    SIGKILL."""
    deadline = time.monotonic() + timeout
    try:
        with socket.create_connection((host.strip("[]"), port), timeout=timeout) as sock:
            sock.sendall(RPC_PROBE)
            return _answer_problem(sock, deadline, timeout)
    except TimeoutError:
        return f"it did not accept the connection within {timeout:g}s"
    except OSError as exc:
        return str(exc)


def _answer_problem(sock: socket.socket, deadline: float, timeout: float) -> str | None:
    """What is wrong with the answer ``sock`` delivers by ``deadline``; None if nothing."""
    received = bytearray()
    wanted = RPC_ANSWER_HEADER.size  # then the header's body and attachment lengths too
    while len(received) < wanted:
        left = deadline - time.monotonic()
        try:
            if left <= 0:
                raise TimeoutError
            sock.settimeout(left)
            chunk = sock.recv(wanted - len(received))
        except TimeoutError:
            if not received:
                return ("it accepted the connection but did not answer an RPC within "
                        f"{timeout:g}s")
            return (f"it answered too slowly: {len(received)} of the {wanted} bytes of its "
                    f"RPC answer within {timeout:g}s")
        if not chunk:
            if not received:
                return "it closed the connection without answering an RPC"
            return (f"it hung up after {len(received)} of the {wanted} bytes of its RPC "
                    "answer")
        received += chunk
        if received[0] != CORO_RPC_MAGIC:
            return _junk(received)
        if wanted == len(received) == RPC_ANSWER_HEADER.size:
            _, version, _, _, sequence, body, attachment = RPC_ANSWER_HEADER.unpack(received)
            if version != 0 or sequence != PROBE_SEQUENCE or \
                    body + attachment > MAX_PROBE_ANSWER:
                return _junk(received)
            wanted += body + attachment
    return None


def _junk(received: bytes | bytearray) -> str:
    return ("it answered, but not as Mooncake's RPC (coro_rpc): its answer began "
            f"{bytes(received[:RPC_ANSWER_HEADER.size]).hex(' ')}")


def start_managed_master(ctx: StepContext, launched: ManagedMaster | None = None
                         ) -> ManagedMaster:
    """The master ready: ``launched`` (started by ``launch_mooncake_master``) or one
    started here, picking new ports when another process took one first."""
    for attempt in range(1, START_ATTEMPTS):
        try:
            return ready_master(ctx, spawn_master(ctx) if launched is None else launched)
        except MasterPortTaken as exc:
            ctx.log.warning("mooncake_master_port_taken", attempt=attempt, error=str(exc))
        launched = None
    return ready_master(ctx, spawn_master(ctx))


def spawn_master(ctx: StepContext) -> ManagedMaster:
    """Start the watchdog and the master behind it on free ports; do not wait for it."""
    host = master_host(ctx)
    ports = {"rpc": 0, "metadata": 0, "metrics": 0}
    while len(set(ports.values())) < len(ports):
        ports = {name: free_port(host) for name in ports}
    master = spawn_on(host, ports, float(ctx.setting("mooncake.master_stop_grace_s")))
    ctx.log.info("mooncake_master_starting", pid=master.pid, host=host,
                 **{f"{k}_port": v for k, v in ports.items()})
    return master


def spawn_on(host: str, ports: dict[str, int], grace: float) -> ManagedMaster:
    """The watchdog and a master behind it on ``host`` and ``ports``, not waited for."""
    import subprocess
    import tempfile

    command = master_command(master_binary(), ports, host)  # may raise: before the log
    log_fd, log_path = tempfile.mkstemp(prefix="initorch-mooncake-master-", suffix=".log")
    # A session of its own: a signal sent to this rank's process group (torchrun ending
    # its workers, a terminal's ^C) must not stop the master before the store clients
    # have closed; the rank's teardown stops it in order, and its watchdog when the rank
    # dies however it dies.  -S: the watchdog needs only the standard library, and the
    # master starts once it has started (5 ms of its 22 ms were site's .pth files).
    watchdog = subprocess.Popen(
        [sys.executable, "-I", "-S", str(WATCHDOG), str(grace), log_path, "--", *command],
        stdin=subprocess.PIPE, stdout=subprocess.PIPE, start_new_session=True)
    line = watchdog.stdout.readline().decode() if watchdog.stdout else ""
    pid = int(line.split()[1]) if line.startswith("pid ") else -1
    return ManagedMaster(watchdog, pid, host, ports, log_path, log_fd, grace)


def ready_master(ctx: StepContext, master: ManagedMaster) -> ManagedMaster:
    """``master`` once it serves; stopped, and the error raised, when it cannot."""
    try:
        wait_until_ready(ctx, master)
    except StepError:
        master.stop()
        raise
    warn_if_exposed(ctx, "mooncake_master", LOOPBACK, set(), pid=master.pid)
    watch_master(ctx, master)
    return master


def watch_master(ctx: StepContext, master: ManagedMaster) -> None:
    """Say at once, as an error with its last log lines, when the master exits on its own
    (its watchdog exits with its status, ``128+N`` for a signal): the store clients lose
    it silently otherwise, and a server keeps serving without its store.  The death is
    kept in ``master.died``, for the teardown to fail on."""
    def wait() -> None:
        code = master.watchdog.wait()
        if master.stopping:
            return
        master.died = code
        ctx.log.error("mooncake_master_died", pid=master.pid, status=code,
                      log_tail=master.log_tail(),
                      why="the store clients can no longer reach it; the run is broken")

    threading.Thread(target=wait, name=f"initorch-watch-mooncake-master-{master.pid}",
                     daemon=True).start()


def wait_until_ready(ctx: StepContext, master: ManagedMaster) -> None:
    serves_within(master, float(ctx.setting("mooncake.master_start_timeout_s")))


def serves_within(master: ManagedMaster, timeout: float) -> None:
    """Return once ``master`` serves; :class:`StepError` if it exits or ``timeout`` passes."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        code = master.watchdog.poll()
        if code is not None:
            tail = master.log_tail()
            error = MasterPortTaken if "Address already in use" in tail else StepError
            raise error(f"the managed mooncake_master exited with status {code} before it "
                        "was ready", native_log=tail,
                        hint="read its log lines above; ports are picked anew on retry")
        answer = health(master.host, master.ports["metrics"])
        if answer and answer.get("service_ready") and \
                rpc_problem(master.host, master.ports["rpc"], 1.0) is None:
            return
        time.sleep(READY_POLL_S)
    raise StepError(f"the managed mooncake_master did not become ready within {timeout:g}s",
                    native_log=master.log_tail(),
                    hint="raise mooncake.master_start_timeout_s on a slow machine")


def share_from_rank0(ctx: StepContext, value: dict[str, Any] | None) -> dict[str, Any]:
    """Rank 0's ``value`` on every rank (over the default process group)."""
    if ctx.rank.world_size == 1:
        assert value is not None
        return value
    import torch.distributed as dist

    box: list[Any] = [value]
    dist.broadcast_object_list(box, src=0)
    shared: dict[str, Any] = box[0]
    return shared


def local_master(ctx: StepContext) -> MasterEndpoint:
    managed = None
    announcement: dict[str, Any] | None = None
    if ctx.rank.rank == MASTER_OWNER:
        try:
            managed = start_managed_master(ctx, _launched_here(ctx))
            announcement = {"host": managed.host, "rpc": managed.ports["rpc"],
                            "metadata": managed.ports["metadata"]}
        except StepError as exc:
            announcement = {"error": str(exc)}
            share_from_rank0(ctx, announcement)
            raise
    announcement = share_from_rank0(ctx, announcement)
    if "error" in announcement:
        raise StepError(f"rank 0 could not start the managed mooncake_master: "
                        f"{announcement['error']}", hint="read rank 0's log")
    host = announcement["host"]
    return MasterEndpoint(
        host_port(host, announcement["rpc"]),
        f"http://{host_port(host, announcement['metadata'])}/metadata",
        managed, owner_rank=MASTER_OWNER,
        details={"pid": managed.pid if managed else None})


def given_master(ctx: StepContext, address: str) -> MasterEndpoint:
    try:
        host, port = split_host_port(address)
    except ValueError as exc:
        raise StepError(f"mooncake.master: {exc}",
                        hint="write HOST:PORT ([v6]:PORT for IPv6), or local") from None
    timeout = float(ctx.setting("mooncake.master_connect_timeout_s"))
    error = rpc_problem(host, port, timeout)
    if error is not None:
        raise StepError(f"cannot reach the Mooncake master at {address}: {error}",
                        hint="start mooncake_master there (or set mooncake.master: local on "
                             "one machine), and check the address, the firewall and that "
                             "the port is the master's --rpc_port")
    return MasterEndpoint(host_port(host, port), None)


@step(
    LAUNCH_STEP,
    description="Start the managed mooncake_master on rank 0 without waiting for it, so "
                "that it boots while torch imports (mooncake_master waits for it)",
    before=["import_backend"],
    when="hicache.enabled and mooncake.enabled and hicache.storage_backend == 'mooncake' "
         "and mooncake.master == 'local'",
    settings=(HICACHE_ENABLED, MOONCAKE_ENABLED, STORAGE_BACKEND, MASTER, STOP_GRACE_S,
              MASTER_ADDR),
)
def launch_mooncake_master(ctx: StepContext) -> ManagedMaster | None:
    """The master this rank launched; ``None`` on the ranks that do not own it."""
    return spawn_master(ctx) if ctx.rank.rank == MASTER_OWNER else None


@launch_mooncake_master.teardown
def stop_launched_master(ctx: StepContext, launched: ManagedMaster | None) -> None:
    """The step that launched the master reaps it, last of all teardowns: it waits for
    the master that ``mooncake_master``'s teardown asked to stop, while the process group
    and the transfer engine were released meanwhile; and stops one that ``mooncake_master``
    never took over (the run failed, or was interrupted, between the two steps)."""
    if launched is not None and not launched.stopped:
        stop_master(ctx, launched)


@step(
    "mooncake_master",
    description="Start a managed mooncake_master on loopback (mooncake.master: local), or "
                "wait for the launched one, or check that the configured one answers",
    requires=["init_torch_distributed"],
    after=[LAUNCH_STEP],
    when="hicache.enabled and mooncake.enabled and hicache.storage_backend == 'mooncake'",
    settings=(HICACHE_ENABLED, MOONCAKE_ENABLED, STORAGE_BACKEND, MASTER, CONNECT_TIMEOUT_S,
              START_TIMEOUT_S, STOP_GRACE_S, MASTER_ADDR),
)
def mooncake_master(ctx: StepContext) -> MasterEndpoint:
    address = str(ctx.setting("mooncake.master"))
    endpoint = local_master(ctx) if address == "local" else given_master(ctx, address)
    ctx.log.info("mooncake_master_ready", address=endpoint.address,
                 managed=endpoint.managed is not None, metadata_url=endpoint.metadata_url)
    return endpoint


def clients_still_open(ctx: StepContext, endpoint: MasterEndpoint) -> dict[int, str]:
    """Tell the master's owner that this rank's store client is closed (teardown runs in
    reverse order, so it is); on the owner, wait until every other rank said so, or is
    known to be gone, and return those that did not say so, each with why.

    Stopping the master under a client still closing makes that client log "Failed to
    unmount segment from master: RPC_FAIL".  Each rank says so under a key of its own in
    the process group's key-value store rather than at a barrier, so that a rank that
    died cannot hang teardown; a rank that left the job or stopped answering is not
    waited for, and the whole wait is bounded by ``CLIENTS_CLOSE_WAIT_S``, well within
    the 30 s that torchrun and Kubernetes allow between SIGTERM and SIGKILL."""
    if ctx.rank.world_size == 1 or endpoint.owner_rank is None:
        return {}
    import torch.distributed as dist

    if not dist.is_initialized():
        return {r: "the process group was gone before the master stopped"
                for r in range(ctx.rank.world_size) if r != ctx.rank.rank}
    store = dist.distributed_c10d._get_default_store()
    key = f"initorch/mooncake_master/{endpoint.address}/closed"
    store.set(f"{key}/{ctx.rank.rank}", "1")
    if ctx.rank.rank != endpoint.owner_rank:
        return {}
    deadline = time.monotonic() + CLIENTS_CLOSE_WAIT_S
    while True:
        unreported = [r for r in range(ctx.rank.world_size) if not store.check([f"{key}/{r}"])]
        gone = ctx.peers_gone(unreported)
        if all(r in gone for r in unreported):
            return gone
        if time.monotonic() >= deadline:
            return {r: gone.get(r, f"rank {r} did not report its store client closed within "
                                   f"{CLIENTS_CLOSE_WAIT_S:g}s") for r in unreported}
        time.sleep(0.1)


@mooncake_master.teardown
def stop_mooncake_master(ctx: StepContext, endpoint: MasterEndpoint) -> None:
    """Once every rank's store client closed: stop the managed master.  One that
    ``launch_mooncake_master`` launched is only asked to stop here (a dead one fails this
    teardown at once): the launch step's teardown, the last, waits for it, so that it
    exits while the process group and the transfer engine are released."""
    still_open = clients_still_open(ctx, endpoint)
    managed = endpoint.managed
    if managed is None:
        return
    if still_open:
        ctx.log.warning("mooncake_master_stopping_early", ranks=sorted(still_open),
                        why="; ".join(still_open[r] for r in sorted(still_open)))
    if managed.died is None and _launched_here(ctx) is managed:
        managed.ask_to_stop()
        ctx.log.info("mooncake_master_stopping", pid=managed.pid)
        return
    stop_master(ctx, managed)


def _launched_here(ctx: StepContext) -> ManagedMaster | None:
    """The master ``launch_mooncake_master`` started in this run, if it did."""
    return ctx.output(LAUNCH_STEP) if ctx.has_output(LAUNCH_STEP) else None


STAND_IN_READY_S = 5.0  # how long a stand-in may take to serve before the store closes anyway


@contextlib.contextmanager
def stand_in_if_died(log: Any, endpoint: MasterEndpoint) -> Iterator[None]:
    """While the body runs (a store client closing), a fresh master on the ports of the
    managed master that died, stopped afterwards; nothing when it did not die.

    A store client's close cannot skip the master: Mooncake 0.3.13's ``close`` holds
    the interpreter while it joins its ping and task threads and unmounts its segment
    (``Client::~Client``, ``mooncake-store/src/client_service.cpp``), each RPC to a dead
    master failing only after the client pool's reconnect waits -- about 15 s once the
    client has noticed the death, measured here (2 s right after it).  Against a master
    that answers, the same close takes about 3 s after a 1.4 s start, and unmounts
    cleanly.  If the ports are taken or it does not serve within
    ``STAND_IN_READY_S``, the store closes as before."""
    master = endpoint.managed
    if master is None or master.died is None:
        yield
        return
    fresh: ManagedMaster | None = None
    try:
        fresh = spawn_on(master.host, master.ports, master.grace)
        serves_within(fresh, STAND_IN_READY_S)
        log.info("mooncake_master_stand_in", pid=fresh.pid, died_pid=master.pid,
                 why="the managed master died; the store clients close against a fresh one "
                     "on its ports instead of waiting for Mooncake's RPC retries")
    except StepError as exc:
        log.warning("mooncake_master_stand_in_failed", error=str(exc))
        if fresh is not None:
            fresh.stop()
            fresh = None
    try:
        yield
    finally:
        if fresh is not None:
            fresh.stop()


def stop_master(ctx: StepContext, master: ManagedMaster) -> None:
    """Stop it; a master that died during the run fails the teardown, so that the run
    does not look healthy in its report and log (``mooncake_master_stopped`` is logged
    either way, with ``died`` when it did)."""
    died, tail = master.died, master.log_tail() if master.died is not None else ""
    code = master.stop()
    ctx.log.info("mooncake_master_stopped", pid=master.pid, status=code,
                 **({"died": died} if died is not None else {}))
    if died is not None:
        raise StepError(f"the managed mooncake_master (pid {master.pid}) died during the run "
                        f"with status {died}", native_log=tail,
                        hint="read its log lines (mooncake_master_died); a status of 137 "
                             "is SIGKILL, often the OOM killer")


STEPS = (mooncake_master, launch_mooncake_master)  # the first declares the shared settings
