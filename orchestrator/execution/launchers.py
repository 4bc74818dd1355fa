"""Where this process stands in its job: rank, world size, and where the ranks meet.

Three launchers describe a job, read in this order:

1. **Arguments** in the style of SGLang's server (``--dist-init-addr HOST:PORT``,
   ``--nnodes``, ``--node-rank``; ``--nproc-per-node`` and ``--local-rank`` for
   several processes per node), from the command line or ``Run(...)``: a launcher
   that starts plain processes passes the rendezvous itself.
2. **torchrun** (and anything else that exports its variables): ``RANK``,
   ``WORLD_SIZE``, ``LOCAL_RANK``, ``LOCAL_WORLD_SIZE``, ``MASTER_ADDR``,
   ``MASTER_PORT``.
3. **SLURM**, for tasks started by ``srun``: ``SLURM_PROCID``, ``SLURM_LOCALID``,
   ``SLURM_NTASKS``, and the first node of ``SLURM_NODELIST`` hosts the rendezvous.

A launcher that describes the world only partly (``RANK`` without
``WORLD_SIZE``), a batch script that carries ``SLURM_NTASKS=4`` but is not one of
the four tasks, or two launchers that describe different worlds make the world
size *ambiguous*: :class:`LaunchError` (exit code 2) says which variables or
arguments disagree, instead of each process silently running as a world of one.
"""

from __future__ import annotations

import itertools
import math
import os
import re
from collections.abc import Mapping
from dataclasses import Field, field, fields, replace
from typing import Any

from initorch.addresses import host_port, split_host_port
from initorch.errors import LaunchError
from initorch.numbers import MAX_WORLD_SIZE, NumberError, parse_count
from initorch.records import record

TORCHRUN_HINT = "check the variables torchrun exports"
SLURM_HINT = "start one task per rank with srun (srun --ntasks-per-node=N initorch run ...)"
ARGS_HINT = "pass --dist-init-addr HOST:PORT --nnodes N --node-rank R"

# PyTorch Lightning's SLURMEnvironment.main_port: 15000 + the last 4 digits of the job id,
# so that every task of a job derives the same port without talking.
SLURM_PORT_BASE = 15000


@record
class RankInfo:
    """This process's place in the job.

    ``local_world_size`` is the number of ranks on this host (``None``: the
    launcher does not say).  ``rendezvous`` is ``HOST:PORT`` where the ranks
    meet (rank 0, or torchrun's agent, serves torch.distributed's store there);
    ``None`` leaves it to the profile's ``distributed.master_addr`` and
    ``distributed.master_port`` settings.  ``launcher`` names who described the
    job (``torchrun``, ``env``, ``slurm``, ``args``, ``code``, ``none``).
    """

    rank: int = 0
    local_rank: int = 0
    world_size: int = 1
    local_world_size: int | None = None
    rendezvous: str | None = None
    launcher: str = "code"

    def __post_init__(self) -> None:
        for name in ("rank", "local_rank", "world_size"):
            value = getattr(self, name)
            if not isinstance(value, int) or isinstance(value, bool) or value < 0:
                raise LaunchError(f"{name} must be a whole number >= 0, got {value!r}")
        if self.world_size < 1:
            raise LaunchError(f"the world size must be at least 1, got {self.world_size}")
        if self.rank >= self.world_size:
            raise LaunchError(f"rank {self.rank} is outside a world of {self.world_size}")
        if self.local_world_size is not None and not \
                self.local_rank < self.local_world_size <= self.world_size:
            raise LaunchError(f"local rank {self.local_rank} of {self.local_world_size} local "
                              f"ranks does not fit a world of {self.world_size}")
        if self.rendezvous is not None:
            try:
                split_host_port(self.rendezvous)
            except ValueError as exc:
                raise LaunchError(f"rendezvous: {exc}") from None

    @classmethod
    def from_env(cls, env: Mapping[str, str] | None = None) -> RankInfo:
        """The job as torchrun or SLURM describe it in ``env`` (default ``os.environ``);
        a world of one when neither does."""
        return detect_rank(os.environ if env is None else env)

    @property
    def spans_hosts(self) -> bool:
        """True unless every rank is known to run on this host."""
        return self.world_size > 1 and self.local_world_size != self.world_size

    def label(self) -> str:
        """``rank 1 of 4 (torchrun)``: for logs and messages."""
        return f"rank {self.rank} of {self.world_size} ({self.launcher})"


def _option(metavar: str, help_text: str, minimum: int | None = None) -> dict[str, Any]:
    """A :class:`LaunchArguments` field's command-line option: its ``metavar``, its help,
    and for a number the least value it takes."""
    return {"metavar": metavar, "help": help_text, "minimum": minimum}


@record
class LaunchArguments:
    """SGLang-style arguments; ``None`` for what was not given.

    ``rank = node_rank * nproc_per_node + local_rank`` and ``world_size =
    nnodes * nproc_per_node``, as torchrun numbers ranks.  This is their one
    declaration: ``Run(launch=...)`` and ``start(launch=...)`` take it, and each field
    is the ``initorch run`` option of its name (``--dist-init-addr``), declared from
    the field's metadata (:func:`option_name`).
    """

    dist_init_addr: str | None = field(default=None, metadata=_option(
        "HOST:PORT", "where the ranks meet: rank 0 serves torch.distributed's store there "
                     "([v6]:PORT for IPv6)"))
    nnodes: int | None = field(default=None, metadata=_option(
        "N", "number of nodes (default 1)", minimum=1))
    node_rank: int | None = field(default=None, metadata=_option(
        "R", "this node's rank, from 0 (default 0)", minimum=0))
    nproc_per_node: int | None = field(default=None, metadata=_option(
        "K", "processes (ranks) per node (default 1)", minimum=1))
    local_rank: int | None = field(default=None, metadata=_option(
        "L", "this process's rank on its node, from 0 (default 0); its rank is "
             "node-rank * nproc-per-node + local-rank", minimum=0))

    @property
    def given(self) -> bool:
        return any(getattr(self, spec.name) is not None for spec in fields(self))


def option_name(spec: Field[Any]) -> str:
    """The command-line option of a :class:`LaunchArguments` field: ``--node-rank``."""
    return "--" + spec.name.replace("_", "-")


def detect_rank(env: Mapping[str, str], arguments: LaunchArguments | None = None) -> RankInfo:
    """This process's :class:`RankInfo` from ``arguments`` and the launchers in ``env``.

    Raises :class:`LaunchError` when the description is malformed or ambiguous.
    """
    from_env = _torchrun(env) or _slurm(env)
    if arguments is None or not arguments.given:
        # A world of one still meets where MASTER_ADDR:MASTER_PORT say, as torch's env://
        # would: set and silently ignored, they would leave the user looking for a port.
        return from_env or RankInfo(rendezvous=_env_rendezvous(env), launcher="none")
    from_args = _from_arguments(arguments, described=from_env is not None)
    if from_env is None:
        return from_args
    _check_agreement(from_args, from_env)
    rendezvous = from_args.rendezvous or from_env.rendezvous
    local_world = from_args.local_world_size or from_env.local_world_size
    return replace(from_args, rendezvous=rendezvous, local_world_size=local_world)


# -- torchrun ------------------------------------------------------------------------------

def _torchrun(env: Mapping[str, str]) -> RankInfo | None:
    rank, world, local_rank, local_world = (
        _number(env, name, TORCHRUN_HINT)
        for name in ("RANK", "WORLD_SIZE", "LOCAL_RANK", "LOCAL_WORLD_SIZE"))
    if rank is None and world is None:
        if local_rank:
            raise LaunchError(f"LOCAL_RANK={local_rank} is set but RANK and WORLD_SIZE are not",
                              hint=TORCHRUN_HINT)
        return None
    if world is None or (rank is None and world > 1):
        given, missing = ("RANK", "WORLD_SIZE") if world is None else ("WORLD_SIZE", "RANK")
        raise LaunchError(f"the world size is ambiguous: {given} is set but {missing} is not",
                          hint=f"{TORCHRUN_HINT}, or unset {given} to run a world of one")
    _check_inside(world, "WORLD_SIZE", {"RANK": rank or 0, "LOCAL_RANK": local_rank or 0},
                  TORCHRUN_HINT)
    return RankInfo(rank or 0, local_rank or 0, world, local_world, _env_rendezvous(env),
                    "torchrun" if env.get("TORCHELASTIC_RUN_ID") else "env")


def _env_rendezvous(env: Mapping[str, str]) -> str | None:
    """``MASTER_ADDR:MASTER_PORT`` when both are set (as torch's ``env://`` reads them)."""
    address = env.get("MASTER_ADDR", "").strip()
    port = _number(env, "MASTER_PORT", TORCHRUN_HINT)
    return host_port(address, port) if address and port else None


def _check_inside(world: int, world_name: str, ranks: Mapping[str, int], hint: str) -> None:
    """Refuse an empty world or a rank outside it, naming the launcher's variables."""
    if world < 1:
        raise LaunchError(f"{world_name}={world} must be at least 1", hint=hint)
    for name, value in ranks.items():
        if value >= world:
            raise LaunchError(f"{name}={value} is outside {world_name}={world}", hint=hint)


# -- SLURM -----------------------------------------------------------------------------------

def _slurm(env: Mapping[str, str]) -> RankInfo | None:
    procid = _number(env, "SLURM_PROCID", SLURM_HINT)
    if procid is None:
        return None
    ntasks = _number(env, "SLURM_NTASKS", SLURM_HINT)
    step_tasks = _number(env, "SLURM_STEP_NUM_TASKS", SLURM_HINT)
    if ntasks is None and step_tasks is None:
        raise LaunchError(f"the world size is ambiguous: SLURM_PROCID={procid} is set but "
                          "neither SLURM_NTASKS nor SLURM_STEP_NUM_TASKS", hint=SLURM_HINT)
    if ntasks is not None and step_tasks is not None and ntasks != step_tasks:
        raise LaunchError(f"the world size is ambiguous: SLURM_NTASKS={ntasks} but "
                          f"SLURM_STEP_NUM_TASKS={step_tasks}", hint=SLURM_HINT)
    world = step_tasks if step_tasks is not None else ntasks
    assert world is not None
    # srun exports SLURM_STEP_ID to the tasks of a step (srun(1), OUTPUT ENVIRONMENT
    # VARIABLES); a batch script has the job's SLURM_NTASKS but is one process.
    if world > 1 and not env.get("SLURM_STEP_ID", env.get("SLURM_STEPID", "")).strip():
        raise LaunchError(f"the world size is ambiguous: SLURM_NTASKS={world}, but this process "
                          "is not an srun task (no SLURM_STEP_ID): it would wait for "
                          f"{world - 1} rank(s) that never start", hint=SLURM_HINT)
    local_rank = _number(env, "SLURM_LOCALID", SLURM_HINT) or 0
    _check_inside(world, "SLURM_NTASKS", {"SLURM_PROCID": procid, "SLURM_LOCALID": local_rank},
                  SLURM_HINT)
    local_world = _slurm_local_world(env)
    if local_world is not None and local_rank >= local_world:
        raise LaunchError(f"SLURM_LOCALID={local_rank} is outside the {local_world} task(s) "
                          "SLURM places on this node", hint=SLURM_HINT)
    return RankInfo(procid, local_rank, world, local_world, _slurm_rendezvous(env), "slurm")


def _slurm_local_world(env: Mapping[str, str]) -> int | None:
    """Tasks on this node, from ``SLURM_STEP_TASKS_PER_NODE`` (``2(x3),1``) and
    ``SLURM_NODEID``; ``None`` when SLURM does not say.  A malformed layout is refused:
    ignored, it would leave the local world unknown without a word."""
    name = next((name for name in ("SLURM_STEP_TASKS_PER_NODE", "SLURM_TASKS_PER_NODE")
                 if env.get(name)), None)
    node = _number(env, "SLURM_NODEID", SLURM_HINT)
    if name is None or node is None:
        return None
    try:
        return tasks_on_node(env[name], node)
    except ValueError as exc:
        raise LaunchError(f"{name}={env[name][:80]!r}: {exc}", hint=SLURM_HINT) from None


def tasks_on_node(layout: str, node: int) -> int | None:
    """How many tasks Slurm's ``layout`` (``2(x3),1``: 2, 2, 2, then 1) puts on node
    ``node``, read without expanding the repeats (``1(x999999999)`` costs nothing);
    ``None`` when the layout has fewer nodes.  Raises ValueError when malformed."""
    found: int | None = None
    seen = 0
    for item in layout.split(","):
        match = re.fullmatch(r"\s*(\d+)(?:\(x(\d+)\))?\s*", item)
        if match is None:
            raise ValueError("not a tasks-per-node layout such as 2(x3),1")
        repeat = int(match.group(2) or 1)
        if found is None and seen <= node < seen + repeat:
            found = int(match.group(1))
        seen += repeat
    return found


def _slurm_rendezvous(env: Mapping[str, str]) -> str | None:
    """The first node of the step (``scontrol show hostnames | head -1``) and
    ``MASTER_PORT``, else a port derived from the job id; ``MASTER_ADDR`` wins."""
    nodes = next((env[name] for name in ("SLURM_STEP_NODELIST", "SLURM_JOB_NODELIST",
                                         "SLURM_NODELIST") if env.get(name, "").strip()), "")
    host = env.get("MASTER_ADDR", "").strip()
    if not host and nodes:
        try:
            host = first_host(nodes)
        except ValueError as exc:
            raise LaunchError(f"cannot tell where the ranks meet: {exc}",
                              hint="export MASTER_ADDR (the address of the job's first "
                                   "node)") from None
    port = _number(env, "MASTER_PORT", SLURM_HINT)
    job = env.get("SLURM_JOB_ID", env.get("SLURM_JOBID", "")).strip()
    if port is None and job.isdigit():
        port = SLURM_PORT_BASE + int(job[-4:])
    return host_port(host, port) if host and port else None


_HOSTLIST_ITEM = re.compile(r"([^,\[]*(?:\[[^\]]*\][^,\[]*)*)(?:,|$)")

MAX_HOSTS = 1 << 20
"""The most hosts :func:`expand_hostlist` lists; :func:`first_host` expands nothing, so
that ``n[1-999999999]`` costs no more than ``n1``."""

_Ranges = tuple[tuple[int, int, int], ...]  # (first, last, zero-padded width) per part
_Segment = str | _Ranges


def expand_hostlist(hostlist: str) -> list[str]:
    """Slurm's compressed host list: ``node[01-03,07],gpu5`` -> ``node01 ... gpu5``.

    Zero padding is kept; several bracket groups in one name expand as a product
    (``rack[1-2]n[1-2]``).  Raises ValueError when malformed, or when it names more
    than :data:`MAX_HOSTS` hosts.
    """
    items = _parse_hostlist(hostlist)
    count = sum(math.prod(sum(last - first + 1 for first, last, _ in segment)
                          for segment in item if not isinstance(segment, str))
                for item in items)
    if count > MAX_HOSTS:
        raise ValueError(f"host list {hostlist[:80]!r} names {count} hosts, more than "
                         f"{MAX_HOSTS}")
    return ["".join(parts) for item in items
            for parts in itertools.product(*(_choices(segment) for segment in item))]


def first_host(hostlist: str) -> str:
    """The first host of a Slurm host list (the one that hosts the rendezvous), read
    without expanding the list; the whole list is still checked."""
    first_item = _parse_hostlist(hostlist)[0]
    return "".join(segment if isinstance(segment, str)
                   else str(segment[0][0]).zfill(segment[0][2]) for segment in first_item)


def _choices(segment: _Segment) -> list[str]:
    if isinstance(segment, str):
        return [segment]
    return [str(number).zfill(width) for first, last, width in segment
            for number in range(first, last + 1)]


def _parse_hostlist(hostlist: str) -> list[list[_Segment]]:
    """Each name of the list as its text and bracket groups, checked, nothing expanded."""
    text = hostlist.strip()
    items: list[list[_Segment]] = []
    position = 0
    while position < len(text):
        match = _HOSTLIST_ITEM.match(text, position)
        if match is None or not match.group(1):
            raise ValueError(f"malformed host list {hostlist!r}")
        items.append(_parse_name(match.group(1), hostlist))
        position = match.end()
    if not items:
        raise ValueError(f"empty host list {hostlist!r}")
    return items


def _parse_name(name: str, hostlist: str) -> list[_Segment]:
    segments: list[_Segment] = []
    while True:
        head, bracket, rest = name.partition("[")
        if not bracket:
            if "]" in name:
                raise ValueError(f"malformed host list {hostlist!r}")
            return [*segments, name]
        body, closing, name = rest.partition("]")
        if not closing or not body:
            raise ValueError(f"malformed host list {hostlist!r}")
        segments += [head, tuple(_parse_range(part, hostlist) for part in body.split(","))]


def _parse_range(part: str, hostlist: str) -> tuple[int, int, int]:
    first, dash, last = part.partition("-")
    if not first.isdigit() or (dash and not last.isdigit()):
        raise ValueError(f"malformed range {part!r} in host list {hostlist!r}")
    low, high = int(first), int(last) if dash else int(first)
    if high < low:
        raise ValueError(f"descending range {part!r} in host list {hostlist!r}")
    return low, high, len(first) if first.startswith("0") else 0


# -- arguments --------------------------------------------------------------------------------

def _from_arguments(arguments: LaunchArguments, *, described: bool) -> RankInfo:
    """The job as the arguments describe it.  Unless a launcher's variables say it too
    (``described``), several nodes need ``--node-rank`` and several processes per node
    ``--local-rank``: assuming 0 would make every process rank 0, each waiting the whole
    join timeout for ranks that never come."""
    nnodes, nproc, node_rank, local_rank = (
        _at_least(arguments, name) for name in ("nnodes", "nproc_per_node", "node_rank",
                                                "local_rank"))
    for count, option, given, needed in (
            (nnodes, "--nnodes", arguments.node_rank, "--node-rank"),
            (nproc, "--nproc-per-node", arguments.local_rank, "--local-rank")):
        if count > 1 and given is None and not described:
            raise LaunchError(f"{option} {count} needs {needed}: which one of the {count} is "
                              "this process?",
                              hint=f"pass {needed} N (0 to {count - 1}), a different one to "
                                   "each process")
    if node_rank >= nnodes:
        raise LaunchError(f"--node-rank {node_rank} is outside --nnodes {nnodes}",
                          hint="node ranks count from 0")
    if local_rank >= nproc:
        raise LaunchError(f"--local-rank {local_rank} is outside --nproc-per-node {nproc}",
                          hint="local ranks count from 0")
    rendezvous = None
    if arguments.dist_init_addr is not None:
        try:
            host, port = split_host_port(arguments.dist_init_addr.strip())
        except ValueError as exc:
            raise LaunchError(f"--dist-init-addr: {exc}", hint=ARGS_HINT) from None
        rendezvous = host_port(host, port)
    return RankInfo(node_rank * nproc + local_rank, local_rank, nnodes * nproc, nproc,
                    rendezvous, "args")


def _at_least(arguments: LaunchArguments, name: str) -> int:
    """The number ``arguments`` give for the field ``name``, at least its minimum (which
    it is when not given)."""
    spec = next(spec for spec in fields(arguments) if spec.name == name)
    minimum: int = spec.metadata["minimum"]
    value = getattr(arguments, name)
    if value is None:
        return minimum
    if not isinstance(value, int) or isinstance(value, bool) or value < minimum:
        raise LaunchError(f"{option_name(spec)} must be a whole number >= {minimum}, "
                          f"got {value!r}", hint=ARGS_HINT)
    return value


def _check_agreement(from_args: RankInfo, from_env: RankInfo) -> None:
    """Arguments may restate what the launcher says, never contradict it."""
    source = {"torchrun": "torchrun's RANK/WORLD_SIZE", "env": "RANK/WORLD_SIZE",
              "slurm": "SLURM_PROCID/SLURM_NTASKS"}[from_env.launcher]
    if (from_args.rank, from_args.world_size) != (from_env.rank, from_env.world_size):
        raise LaunchError(
            f"the world size is ambiguous: the arguments make this rank {from_args.rank} of "
            f"{from_args.world_size}, but {source} make it rank {from_env.rank} of "
            f"{from_env.world_size}",
            hint="drop --nnodes/--node-rank/--nproc-per-node/--local-rank, or start each "
                 "process without the launcher")
    if from_args.rendezvous and from_env.rendezvous and from_env.launcher != "slurm" \
            and from_args.rendezvous != from_env.rendezvous:
        raise LaunchError(
            f"--dist-init-addr {from_args.rendezvous} differs from MASTER_ADDR:MASTER_PORT "
            f"{from_env.rendezvous}, where {from_env.launcher} serves the rendezvous",
            hint="drop --dist-init-addr under torchrun")


# -- numbers ------------------------------------------------------------------------------------

def _number(env: Mapping[str, str], name: str, hint: str) -> int | None:
    raw = env.get(name, "").strip()
    if not raw:
        return None
    try:  # ASCII digits only: refuses -1 ("not distributed"), 1_0 and WORLD_SIZE=²
        return parse_count(raw, f"environment variable {name}", maximum=MAX_WORLD_SIZE)
    except NumberError as error:
        raise LaunchError(str(error), hint=hint) from None

