"""``rendezvous``: join the job's torch.distributed store, where the ranks agree on the plan.

The store is torch.distributed's own ``TCPStore``, made as the ``tcp://`` init
method makes it (``_create_c10d_store`` in ``torch/distributed/rendezvous.py``,
torch 2.13): under torchrun a client of the agent's store
(``TORCHELASTIC_USE_AGENT_STORE``); otherwise the store that rank 0 serves at the
rendezvous address (multi-tenant), for SLURM, plain processes and a world of one
alike.  One difference: rank 0 does not block in the constructor until as many
ranks as *it* believes the world holds have connected (``wait_for_workers``).
The plan agreement right after waits for them instead, within
``distributed.join_timeout_s``, and can say what is wrong: a rank 0 started with
``--nnodes 3`` in a job of two would otherwise wait out the bound and be named by
the others as never having joined.  ``init_torch_distributed`` hands this same
store to ``init_process_group``, so the job meets exactly once, and never at a
rendezvous of initorch's own.

Where the ranks meet comes from the launcher (:class:`~initorch.RankInfo`'s
``rendezvous``: ``--dist-init-addr``, ``MASTER_ADDR:MASTER_PORT``, SLURM's first
node), else from ``distributed.master_addr``/``distributed.master_port``; a world
of one without either gets a free loopback port.  The run (the core) then keeps
a heartbeat there and agrees on the plan with every rank before any step that
waits for peers (:mod:`initorch.execution.peers`).

When the job spans hosts, gloo must be told which interface to use: left alone,
``ProcessGroupGloo`` resolves the host name, and where that does not name a
local address (containers, network namespaces, a bare ``/etc/hosts``) it falls
back to loopback, advertises ``127.0.0.1`` to the other hosts and fails with
``Gloo connectFullMesh failed ... Connection refused, remote=[127.0.0.1]``.  So
unless ``GLOO_SOCKET_IFNAME`` is set, this step sets it to the interface that
holds the address reaching the rendezvous (``HOST_IP`` wins), until teardown.

The store holds two connections per rank (the client ``init_process_group`` uses,
and its clone for the run's heartbeat and agreement): 2,048 sockets for 1,024
ranks, against a common default of 1,024 open files.  The process that serves it
raises its own soft ``RLIMIT_NOFILE`` as far as needed (up to the hard limit), and
refuses to start a job the hard limit cannot hold, naming what to raise; under
torchrun the agent serves it, so rank 0 only warns, since its limits are the
agent's (inherited) and only the launching shell can raise them.
"""

from __future__ import annotations

import datetime
import os
import time
from typing import TYPE_CHECKING, Any

from initorch.plugin import (
    MAX_TIMEOUT_S,
    MIN_PEER_TIMEOUT_S,
    WAIT_LOG_S,
    LaunchError,
    StepContext,
    StepError,
    host_port,
    record,
    setting,
    split_host_port,
    step,
)
from initorch.steps.engine_hostname import local_host
from initorch.steps.network import can_connect, free_port, interface_with

if TYPE_CHECKING:
    from initorch.plugin import JobStore, PeerBounds

GLOO_INTERFACE = "GLOO_SOCKET_IFNAME"  # read by ProcessGroupGloo when a gloo group forms

MASTER_ADDR = setting(
    "distributed.master_addr", str, default="127.0.0.1", pattern=r"\S+",
    description="rendezvous host when no launcher gives one (--dist-init-addr, torchrun, "
                "SLURM)")
MASTER_PORT = setting(
    "distributed.master_port", int, default=0, minimum=0, maximum=65535,
    description="rendezvous port when no launcher gives one; 0 picks a free one (a world "
                "of one only)")
# datetime.timedelta overflows long before 1e999 (which YAML reads as infinity).
TIMEOUT_S = setting(
    "distributed.timeout_s", float, default=120, exclusive_minimum=0, maximum=MAX_TIMEOUT_S,
    description="process-group timeout in seconds (collectives, and how long a barrier "
                "step waits for ranks that are alive but slow)")
JOIN_TIMEOUT_S = setting(
    "distributed.join_timeout_s", float, default=300, exclusive_minimum=0,
    maximum=MAX_TIMEOUT_S,
    description="how long the ranks wait for each other to join the job's store and "
                "publish their plans")
# The heartbeat cannot move faster than every MIN_BEAT_S, several beats per timeout: a
# shorter peer timeout would name healthy ranks as dead.
PEER_TIMEOUT_S = setting(
    "distributed.peer_timeout_s", float, default=30, minimum=MIN_PEER_TIMEOUT_S,
    maximum=MAX_TIMEOUT_S,
    description="a rank whose heartbeat has not moved for this long counts as lost: the "
                "others stop, naming it, instead of waiting for the collective timeout")


OPEN_FILES_SPARE = 128  # what a process holds besides the store's sockets (libraries, logs)


def open_files_needed(world_size: int) -> int:
    """Open files the process that serves the job's store needs: a socket per
    connection, two connections per rank, and a spare for everything else."""
    return 2 * world_size + OPEN_FILES_SPARE


def ensure_open_files(ctx: StepContext, hosted_here: bool) -> None:
    """Check, before the job meets, that its store can accept every rank: raise this
    process's soft limit if it serves the store and the hard limit allows, refuse if
    it does not; warn on rank 0 when torchrun's agent serves it with too low a limit."""
    import resource  # POSIX only, as fcntl in steps/network.py

    needed = open_files_needed(ctx.rank.world_size)
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    if soft == resource.RLIM_INFINITY or soft >= needed:
        return
    fix = (f"raise it before the job starts: ulimit -n {needed} in the shell that starts "
           "the ranks (the hard limit too: 'nofile' in /etc/security/limits.conf, "
           "LimitNOFILE= for a systemd unit, --ulimit nofile= for docker)")
    if not hosted_here:
        if agent_store() and ctx.rank.rank == 0:
            ctx.log.warning("open_files_low", needed=needed, limit=soft,
                            why=f"torchrun's agent serves the job's store for "
                                f"{ctx.rank.world_size} ranks with this process's limits; "
                                f"{fix}")
        return
    if hard == resource.RLIM_INFINITY or hard >= needed:
        resource.setrlimit(resource.RLIMIT_NOFILE, (needed, hard))
        ctx.log.info("open_files_raised", limit=needed, was=soft, hard_limit=hard)
        return
    raise StepError(f"serving the job's store for {ctx.rank.world_size} ranks takes about "
                    f"{needed} open files (two connections per rank), but this process may "
                    f"open only {hard} (the hard RLIMIT_NOFILE)", hint=fix)


@record
class TorchJobStore:
    """The job's store: ``store`` for ``init_process_group``, ``peers`` (a clone: its own
    connection, keys under this job's name) for the run's agreement and heartbeat."""

    store: Any
    peers: Any
    address: str
    hosted_here: bool
    bounds: PeerBounds
    gloo_interface: str | None = None  # GLOO_SOCKET_IFNAME as this step set it


def agent_store() -> bool:
    """torchrun's agent serves the store; every worker is a client of it."""
    return os.environ.get("TORCHELASTIC_USE_AGENT_STORE") == "True"


def namespace() -> str:
    """Keys of this job (and attempt: torchrun's store outlives a restart)."""
    run_id = os.environ.get("TORCHELASTIC_RUN_ID")
    if run_id and agent_store():
        return f"initorch/{run_id}/{os.environ.get('TORCHELASTIC_RESTART_COUNT', '0')}"
    return "initorch/job"


def endpoint(ctx: StepContext) -> tuple[str, int]:
    """Where the ranks meet: the launcher's rendezvous, else the settings."""
    if ctx.rank.rendezvous is not None:
        return split_host_port(ctx.rank.rendezvous)
    host = str(ctx.setting("distributed.master_addr"))
    port = int(ctx.setting("distributed.master_port"))
    if port:
        return host, port
    if ctx.rank.world_size > 1:  # how the job was started is wrong: a usage error (exit 2)
        raise LaunchError(
            f"rank {ctx.rank.rank} of {ctx.rank.world_size}: no launcher says where the ranks "
            "meet, and distributed.master_port is 0",
            hint="pass --dist-init-addr HOST:PORT (in code: launch=LaunchArguments(...)), "
                 "start the ranks with torchrun or srun, or set distributed.master_addr and "
                 "distributed.master_port")
    return host, free_port(host)


def gloo_interface(ctx: StepContext, rendezvous_host: str) -> str | None:
    """The interface gloo should use, when the job spans hosts and nobody said."""
    if not ctx.rank.spans_hosts or GLOO_INTERFACE in os.environ:
        return None
    address = local_host("auto", rendezvous_host)
    name = interface_with(address)
    if name is None:
        ctx.log.warning("gloo_interface_unknown", address=address,
                        why=f"no interface holds it; set {GLOO_INTERFACE} if gloo groups fail")
    return name


def wait_for_store(ctx: StepContext, host: str, port: int, bound: float) -> float:
    """Wait, within ``bound`` seconds, until the job's store accepts connections, saying
    every ``WAIT_LOG_S`` what this rank waits for, where, and for how much longer;
    returns the seconds left of ``bound``.

    ``TCPStore``'s client would wait as long in native code, silently: a rank started
    before rank 0 (or after rank 0 failed) would look hung.  Only the connection is
    awaited here; the store client, made with the time left, says why it failed.  The
    connection is tried again after a twentieth of the time waited so far (5 ms to
    0.2 s): a rank that arrives a moment before rank 0 serves the store learns of it
    within milliseconds, and one that waits minutes tries five times a second."""
    address = host_port(host, port)
    began = said = time.monotonic()
    while can_connect(host, port, timeout=1.0) is not None:
        now = time.monotonic()
        left = bound - (now - began)
        if left <= 0:
            break
        if now - said >= WAIT_LOG_S:
            said = now
            ctx.log.info("waiting_for_ranks", waiting_for="rank 0 to serve the job's store",
                         missing=[0], store=address, time_left_s=round(left, 1))
        time.sleep(min(max((now - began) / 20, 0.005), 0.2, left))
    return max(bound - (time.monotonic() - began), 0.0)


@step(
    "rendezvous",
    description="Join the job's torch.distributed store (torchrun's, or the TCPStore behind "
                "the init method) and agree on the plan with every rank",
    requires=["import_backend"],
    job_store=True,
    settings=(MASTER_ADDR, MASTER_PORT, TIMEOUT_S, JOIN_TIMEOUT_S, PEER_TIMEOUT_S),
)
def rendezvous(ctx: StepContext) -> JobStore:
    from torch._C._distributed_c10d import TCPStore  # torch.distributed.TCPStore
    from torch.distributed.distributed_c10d import PrefixStore

    from initorch.plugin import PeerBounds

    host, port = endpoint(ctx)
    address = host_port(host, port)
    join = float(ctx.setting("distributed.join_timeout_s"))
    hosted_here = ctx.rank.rank == 0 and not agent_store()
    ensure_open_files(ctx, hosted_here)
    ctx.log.info("job_store_joining", address=address, serving=hosted_here,
                 world_size=ctx.rank.world_size, launcher=ctx.rank.launcher)
    url = f"tcp://{address}"
    left = join if hosted_here else wait_for_store(ctx, host, port, join)
    try:
        store: Any = TCPStore(host, port, world_size=ctx.rank.world_size,
                              is_master=hosted_here, multi_tenant=hosted_here,
                              timeout=datetime.timedelta(seconds=max(left, 1.0)),
                              wait_for_workers=False)
    except (RuntimeError, ValueError) as exc:
        doing = "serving" if hosted_here else "reaching"
        raise StepError(f"rendezvous {url}: {doing} the job's store failed: {exc}",
                        hint="check that every rank has the same rendezvous address and "
                             "that rank 0 is running") from exc
    store.set_timeout(datetime.timedelta(seconds=float(ctx.setting("distributed.timeout_s"))))
    bounds = PeerBounds(join, float(ctx.setting("distributed.peer_timeout_s")),
                        float(ctx.setting("distributed.timeout_s")))
    interface = gloo_interface(ctx, host)
    if interface is not None:
        os.environ[GLOO_INTERFACE] = interface
        ctx.log.info("gloo_interface_chosen", interface=interface, towards=host)
    return TorchJobStore(store, PrefixStore(namespace(), store.clone()), address,
                         hosted_here, bounds, interface)


@rendezvous.teardown
def leave_job_store(ctx: StepContext, job: TorchJobStore) -> None:
    """The run has already said goodbye on the store; undo what this step set."""
    if job.gloo_interface is not None and os.environ.get(GLOO_INTERFACE) == job.gloo_interface:
        del os.environ[GLOO_INTERFACE]


STEPS = (rendezvous,)
