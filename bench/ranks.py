"""Simulated ranks at scale: initorch's own peer code, N ranks, one real store.

    python bench/ranks.py [--sizes 8,32,128,512,1024] [--ranks-per-process 32] [--peer-timeout 15]

A **simulated rank** here is a thread that runs initorch's own
:class:`~initorch.execution.peers.JobPeers` -- the plan agreement, the heartbeat
thread, the watcher and the summary -- against torch's real ``TCPStore``, served by a
process of its own on loopback, as torchrun's agent serves it.  Only the rank's steps
are left out: it agrees on the real ``cpu`` plan, says it runs a step ``serve``, and
beats.  Many ranks per process, so that two cores hold 1,024 ranks; as many ranks in
each process at every size (32, in ``N / 32`` processes, at least four), so that what
the simulation itself costs per rank -- threads contending for one interpreter lock,
waking from one signal -- does not grow with the job and pass for initorch's cost.
A real job has a core per rank; here every rank shares two, so the harness sets what
keeps it from starving itself (:data:`PEER_TIMEOUT_S`, :data:`SWITCH_INTERVAL_S`,
:data:`WORKER_ENV`): none of it changes initorch's code or its guarantees.

Each rank's store client is wrapped in :class:`CountingStore`, which counts every call
initorch's code makes and its bytes (keys and values, both ways): the operation counts
are exact, not sampled.  Per size it measures:

* the store operations and bytes per beat of the whole job, at rest after the
  agreement (one beat: every rank but the watcher moved its heartbeat once; the
  watcher reads, and writes its own, twice per beat);
* the time for every rank to agree: from "go", sent to every process once every rank
  has joined (connected, heartbeat beating), until the last rank returned from
  ``agree``; each rank computes its manifest after "go", as a real rank does.  And
  from the last rank's plan published: what is left then is initorch's own wait, while
  the time before it holds N ranks' starts on this machine's two cores (that one the
  median of ``AGREEMENTS`` jobs: two more that only agree);
* the time for every other rank to name a rank killed mid-run (its heartbeat stops,
  as when its process is SIGKILLed), a whole simulation process killed (SIGKILL),
  and the watcher (rank 0) killed;
* in ``AGREEMENTS`` more jobs where one rank has another setting, the time for every
  rank to name the difference (its ``plan_disagreement`` line), from "go" and from the
  last plan, and until every rank had also left, as a run does (medians);
* the store process's CPU time (per beat at rest, and for the agreement).

:func:`rank_rows` gives the rows of ``bench/table.py``; :func:`measure` one size, for
tests.  The worker processes run this file with ``--worker``.
"""

from __future__ import annotations

import argparse
import json
import math
import os
import select
import signal
import statistics
import subprocess
import sys
import threading
import time
from collections import Counter
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

from initorch.execution.peers import AGREEMENT_KEY

HERE = Path(__file__).resolve()
SIZES = (8, 32, 128, 512, 1024)
RANKS_PER_PROCESS = 32
MIN_PROCESSES = 4  # so that killing one process kills a quarter of the ranks at most
# Beats every 2 s, a rank is lost after 11 s of silence.  A real rank has a core of its
# own; here 1,024 ranks' threads share two cores (and other work), and at 10 s (6.7 s of
# silence) the burst of CPU after "go" at 1,024 ranks left healthy ranks' heartbeat
# threads unscheduled that long: they were named lost, falsely (2026-12-04).
PEER_TIMEOUT_S = 15.0
# CPython's default (5 ms) has each of a process's 64 threads that wants the interpreter
# lock force a switch every 5 ms: with 32 ranks per process busy at once after "go", the
# workers spent 5.4 s of CPU to agree at 512 ranks, against 2.2 s at 50 ms (same load).
# A heartbeat thread waits for the lock a few switches at most: far below the timeout.
SWITCH_INTERVAL_S = 0.05
# torch's C++ warnings, which a worker would print for every store wait that times out
# (socket.cpp "waitForInput ... timed out": two lines per rank per beat while it waits)
# and every connection: thousands of lines at 1,024 ranks, CPU the ranks then lack.
WORKER_ENV = {"TORCH_CPP_LOG_LEVEL": "ERROR"}
SETTLE_BEATS = 2  # beats after the agreement before the traffic at rest is counted
# The store's traffic at rest is counted over this many beats (its CPU time too: a few ms
# per beat at 128 ranks).
COUNTED_BEATS = 12
# The times after the last plan are a few tens of ms at 128 ranks: one sample's jitter
# moved their growth exponent by up to 0.25 between runs (2026-12-05: 0.96 then 1.20 for
# the agreement, 1.22 then 1.00 for the mismatch).  Each is the median of this many jobs.
AGREEMENTS = 3
ODD_SETTING = ("hicache.host_pool_mb", 128)  # the mismatch: 64 in the cpu profile
SERVED_STEP = "serve"


# -- the counting store client ------------------------------------------------------------

class CountingStore:
    """The store client initorch's code is given, counting each call and its bytes
    (keys and values sent, values received).  Thread-safe: a rank's heartbeat thread
    and its main thread share it."""

    def __init__(self, store: Any) -> None:
        self._store = store
        self._lock = threading.Lock()
        self.ops: Counter[str] = Counter()
        self.bytes = 0
        self.beats = 0  # progress writes: one per heartbeat (and per step said)
        self.plan_at = math.nan  # when this rank published its plan (monotonic)
        self.verdict_at = math.nan  # when it wrote the verdict (the watcher) ...
        self.read_verdict_at = math.nan  # ... or first read it

    def _count(self, op: str, size: int) -> None:
        with self._lock:
            self.ops[op] += 1
            self.bytes += size

    def set(self, key: str, value: bytes) -> None:
        self._count("set", len(key) + len(value))
        if key.startswith("progress/"):
            with self._lock:
                self.beats += 1
        self._store.set(key, value)
        if key.startswith("plan/"):
            self.plan_at = time.monotonic()
        elif key == AGREEMENT_KEY:
            self.verdict_at = time.monotonic()

    def get(self, key: str) -> bytes:
        value: bytes = self._store.get(key)
        self._count("get", len(key) + len(value))
        if key == AGREEMENT_KEY and math.isnan(self.read_verdict_at):
            self.read_verdict_at = time.monotonic()
        return value

    def add(self, key: str, amount: int) -> int:
        self._count("add", len(key) + 8)
        return int(self._store.add(key, amount))

    def check(self, keys: list[str]) -> bool:
        self._count("check", sum(map(len, keys)))
        return bool(self._store.check(keys))

    def multi_get(self, keys: list[str]) -> list[bytes]:
        values: list[bytes] = self._store.multi_get(keys)
        self._count("multi_get", sum(map(len, keys)) + sum(map(len, values)))
        return values

    def append(self, key: str, value: bytes) -> None:
        self._count("append", len(key) + len(value))
        self._store.append(key, value)

    def wait(self, keys: list[str], timeout: Any) -> None:
        self._count("wait", sum(map(len, keys)))
        self._store.wait(keys, timeout)


# -- a worker process: many simulated ranks -----------------------------------------------

class _Log:
    """A rank's logger: keeps each event with the time it was said (monotonic, which
    every process of one machine shares)."""

    def __init__(self) -> None:
        self.events: list[tuple[str, dict[str, Any], float]] = []

    def _say(self, event: str, **fields: Any) -> None:
        self.events.append((event, fields, time.monotonic()))

    info = warning = error = _say


@dataclass
class _Rank:
    peers: Any
    store: CountingStore
    log: _Log
    outcome: dict[str, Any] = field(default_factory=dict)


def _worker(spec: dict[str, Any]) -> None:
    """Run the simulated ranks ``spec["ranks"]``; obey one JSON command per stdin line,
    answer one JSON line each on stdout."""
    import datetime

    from torch.distributed import PrefixStore, TCPStore

    from initorch import RankInfo, load_plan
    from initorch.execution.peers import JobPeers, PeerBounds

    sys.setswitchinterval(SWITCH_INTERVAL_S)
    world, peer_s = spec["world"], spec["peer_s"]
    plan = load_plan(["cpu"])
    odd = load_plan(["cpu"], settings={ODD_SETTING[0]: ODD_SETTING[1]})
    bounds = PeerBounds(join_s=600, peer_s=peer_s, barrier_s=600)
    ranks: dict[int, _Rank] = {}
    go = threading.Event()
    lock = threading.Lock()

    @dataclass(frozen=True)
    class Job:  # a JobStore: served elsewhere, as torchrun's agent serves it
        peers: Any
        address: str
        hosted_here: bool
        bounds: PeerBounds

    def rank_body(rank: int, joined: threading.Barrier) -> None:
        client = TCPStore("127.0.0.1", spec["port"], world, False,
                          timeout=datetime.timedelta(seconds=600), wait_for_workers=False)
        store = CountingStore(PrefixStore(spec["namespace"], client))
        log = _Log()
        peers = JobPeers(Job(store, f"127.0.0.1:{spec['port']}", False, bounds),
                         RankInfo(rank, rank % 8, world), log)
        peers.start()
        with lock:
            ranks[rank] = _Rank(peers, store, log)
        joined.wait()
        go.wait()
        began = time.monotonic()
        try:
            peers.agree(odd if rank == spec.get("odd_rank") else plan)
            peers.step_started(SERVED_STEP)
            said: dict[str, Any] = {}
        except Exception as exc:
            said = {"error": str(exc), "details": list(getattr(exc, "details", ()))}
            peers.leave(failed_step="rendezvous")  # what a run does when its agreement fails
        ranks[rank].outcome = {"t": time.monotonic(), "began": began,
                               "plan_at": store.plan_at, "verdict_at": store.verdict_at,
                               "read_verdict_at": store.read_verdict_at,
                               "named_at": _named_at(log), **said}

    joined = threading.Barrier(len(spec["ranks"]) + 1)
    threads = [threading.Thread(target=rank_body, args=(rank, joined), daemon=True)
               for rank in spec["ranks"]]
    for thread in threads:
        thread.start()
    joined.wait()
    _answer({"ready": True})
    _obey(ranks, threads, go)


def _obey(ranks: dict[int, _Rank], threads: list[threading.Thread], go: threading.Event
          ) -> None:
    """The harness's commands, one per stdin line, each answered on stdout."""
    for line in sys.stdin:
        command = json.loads(line)
        what = command["cmd"]
        if what == "go":
            cpu = time.process_time()
            go.set()
            for thread in threads:
                thread.join()
            _answer({"outcomes": {r: state.outcome for r, state in ranks.items()},
                     "cpu_s": time.process_time() - cpu})
        elif what == "counts":
            _answer(_rank_counts(ranks))
        elif what == "stop":
            ranks[command["rank"]].peers.stop()  # its heartbeat stops: SIGKILL, for it
            _answer({"stopped": time.monotonic()})
        elif what == "lost":
            _answer({"lost": {r: _first_lost(state.log) for r, state in ranks.items()}})
        elif what == "leave":
            for state in ranks.values():
                state.peers.leave(failed_step=None)
            _answer({"left": True})
            return


def _rank_counts(ranks: dict[int, _Rank]) -> dict[str, Any]:
    ops: Counter[str] = Counter()
    total_bytes = beats = 0
    for rank, state in ranks.items():
        with state.store._lock:
            ops.update(state.store.ops)
            total_bytes += state.store.bytes
            if rank != 0:  # the watcher writes its progress at each of its reads
                beats += state.store.beats
    return {"ops": dict(ops), "bytes": total_bytes, "beats": beats}


def _first_lost(log: _Log) -> dict[int, tuple[float, str]]:
    """When this rank first named each lost peer, and how."""
    found: dict[int, tuple[float, str]] = {}
    for event, fields, at in list(log.events):
        if event == "peer_lost" and fields["lost_rank"] not in found:
            found[fields["lost_rank"]] = (at, fields["problem"])
    return found


def _named_at(log: _Log) -> float | None:
    """When this rank named the plans' difference (its ``plan_disagreement`` line,
    said as soon as it read the verdict, before it waits for the others to have read
    it too and leaves); ``None`` when it named none."""
    return next((at for event, _, at in log.events if event == "plan_disagreement"), None)


def _answer(message: dict[str, Any]) -> None:
    sys.stdout.write(json.dumps(message) + "\n")
    sys.stdout.flush()


# -- the harness: a store process, worker processes, the scenarios ------------------------

class _Process:
    """A child process spoken to in JSON lines."""

    def __init__(self, command: list[str]) -> None:
        self.proc = subprocess.Popen(command, stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                                     text=True, bufsize=1, env={**os.environ, **WORKER_ENV})

    def ask(self, message: dict[str, Any] | None = None, timeout: float = 600) -> Any:
        assert self.proc.stdin is not None and self.proc.stdout is not None
        if message is not None:
            self.proc.stdin.write(json.dumps(message) + "\n")
            self.proc.stdin.flush()
        ready, _, _ = select.select([self.proc.stdout], [], [], timeout)
        if not ready:
            raise TimeoutError(f"no answer to {message} within {timeout:g}s")
        line = self.proc.stdout.readline()
        if not line:
            raise RuntimeError(f"the process ended (exit {self.proc.wait()}) before answering")
        return json.loads(line)

    def kill(self) -> None:
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGKILL)
        self.proc.wait()


SERVE = """\
import sys, time
from torch.distributed import TCPStore
store = TCPStore("127.0.0.1", 0, 1, True, wait_for_workers=False)
print(store.port, flush=True)
sys.stdin.read()
"""


class StoreServer:
    """torch's TCPStore, served by a process of its own (as torchrun's agent serves it),
    so that its CPU time is its own."""

    def __init__(self) -> None:
        # stderr: torch's server warns, once per connection, that it cannot name a
        # loopback client's host (socket.cpp, "cannot be retrieved"): 1,024 lines of noise.
        self.proc = subprocess.Popen([sys.executable, "-c", SERVE], stdin=subprocess.PIPE,
                                     stdout=subprocess.PIPE, stderr=subprocess.DEVNULL,
                                     text=True)
        assert self.proc.stdout is not None
        self.port = int(self.proc.stdout.readline())

    def cpu_s(self) -> float:
        """CPU seconds the store has used so far, to the nanosecond: the run time the
        scheduler keeps for each of its threads (``/proc/PID/task/*/schedstat``).
        ``/proc/PID/stat`` counts ticks of 10 ms, a quarter of what the store spends on
        12 beats at 128 ranks: its growth exponent read 1.15 one run and 1.08 the next."""
        tasks = Path(f"/proc/{self.proc.pid}/task").iterdir()
        return sum(int((task / "schedstat").read_text().split()[0]) for task in tasks) / 1e9

    def close(self) -> None:
        assert self.proc.stdin is not None
        self.proc.stdin.close()
        self.proc.wait(30)


def processes_for(world: int, ranks_per_process: int = RANKS_PER_PROCESS) -> int:
    """How many worker processes hold ``world`` ranks: ``ranks_per_process`` each, at
    least :data:`MIN_PROCESSES`, and never fewer than two ranks in one."""
    return max(1, min(max(MIN_PROCESSES, math.ceil(world / ranks_per_process)), world // 2))


@contextmanager
def _job(world: int, ranks_per_process: int, peer_s: float, namespace: str,
         odd_rank: int | None = None) -> Iterator[tuple[StoreServer, list[_Process],
                                                        list[list[int]]]]:
    """A store and workers holding ``world`` ranks between them (``ranks_per_process``
    each), all joined (connected, heartbeat started) when this yields."""
    server = StoreServer()
    count = processes_for(world, ranks_per_process)
    chunks = [list(range(world))[i::count] for i in range(count)]
    chunks = [sorted(chunk) for chunk in chunks]
    workers: list[_Process] = []
    try:
        for chunk in chunks:
            spec = {"world": world, "ranks": chunk, "port": server.port, "peer_s": peer_s,
                    "namespace": namespace, "odd_rank": odd_rank}
            workers.append(_Process([sys.executable, str(HERE), "--worker", json.dumps(spec)]))
        for worker in workers:
            assert worker.ask()["ready"]
        yield server, workers, chunks
    finally:
        for worker in workers:
            worker.kill()
        server.close()


def _agree(workers: list[_Process]) -> tuple[float, dict[int, dict[str, Any]], float]:
    """Send "go" to every worker: when it was sent, each rank's outcome, and the CPU
    seconds the workers spent until their last rank returned."""
    began = time.monotonic()
    for worker in workers:
        assert worker.proc.stdin is not None
        worker.proc.stdin.write(json.dumps({"cmd": "go"}) + "\n")
        worker.proc.stdin.flush()
    outcomes: dict[int, dict[str, Any]] = {}
    cpu = 0.0
    for worker in workers:
        answer = worker.ask()
        outcomes.update({int(r): o for r, o in answer["outcomes"].items()})
        cpu += answer["cpu_s"]
    return began, outcomes, cpu


def _counts(workers: list[_Process]) -> dict[str, Any]:
    total: dict[str, Any] = {"ops": Counter(), "bytes": 0, "beats": 0}
    for worker in workers:
        counts = worker.ask({"cmd": "counts"})
        total["ops"].update(counts["ops"])
        total["bytes"] += counts["bytes"]
        total["beats"] += counts["beats"]
    return total


def _named(workers: list[_Process], lost: int, since: float, bound: float,
           silent: set[int]) -> tuple[float, list[str]]:
    """Seconds from ``since`` until every rank of ``workers`` (but ``lost``, and the
    ``silent`` ones, whose heartbeat was stopped before) named rank ``lost`` lost
    (``inf`` if one did not within ``bound``), and what each said."""
    deadline = since + bound
    while True:
        said: dict[int, tuple[float, str] | None] = {}
        for worker in workers:
            for rank, first in worker.ask({"cmd": "lost"})["lost"].items():
                if int(rank) != lost and int(rank) not in silent:
                    found = first.get(str(lost))
                    said[int(rank)] = None if found is None else (found[0], found[1])
        if all(said.values()):
            return (max(at for at, _ in said.values() if at) - since,  # type: ignore[misc]
                    [text for _, text in said.values()])  # type: ignore[misc]
        if time.monotonic() > deadline:
            return math.inf, [text for _, text in filter(None, said.values())]
        time.sleep(0.1)


@dataclass
class Measured:
    """One size's figures (seconds, counts, bytes) and what the ranks said."""

    ranks: int
    ops_per_beat: float
    bytes_per_beat: float
    ops_by_kind: dict[str, float]
    ops_per_s_per_rank: float
    agree_s: float  # from "go" until every rank agreed
    last_began_s: float  # from "go" until the last rank started agree(): the harness's wake-up
    last_plan_s: float  # from "go" until the last rank published its plan
    agree_after_last_plan_s: float  # from the last rank's plan published to every rank agreed
    verdict_after_last_plan_s: float  # ... to the watcher's verdict written: its part
    read_after_verdict_s: float  # from the verdict written until every rank had read it
    workers_cpu_agree_s: float  # the worker processes' CPU from "go" to every rank agreed
    agree_ops_per_rank: float  # every store call from "go" until every rank agreed, per rank
    agree_bytes_per_rank: float
    agreed: int
    agree_failures: list[str]  # what the first ranks that did not agree said
    store_cpu_agree_s: float
    store_cpu_per_beat_ms: float
    rank_lost_s: float
    rank_lost_texts: list[str]
    process_lost_s: float
    process_lost_texts: list[str]
    watcher_lost_s: float
    watcher_lost_texts: list[str]
    mismatch_s: float  # from "go" until every rank named the difference
    mismatch_after_last_plan_s: float  # from the last rank's plan published until then
    mismatch_left_after_last_plan_s: float  # ... until every rank had also left
    mismatch_details: list[list[str]]


def measure(world: int, ranks_per_process: int = RANKS_PER_PROCESS,
            peer_s: float = PEER_TIMEOUT_S, agreements: int = AGREEMENTS) -> Measured:
    """Every figure for a job of ``world`` simulated ranks; the times after the last plan
    (the agreement's and the mismatch's) are the median of ``agreements`` jobs each."""
    beat = min(max(peer_s / 6, 0.05), 2.0)
    bound = 3 * peer_s + 10
    with _job(world, ranks_per_process, peer_s, f"bench/{world}") as (server, workers, chunks):
        cpu, joined = server.cpu_s(), _counts(workers)
        began, outcomes, workers_cpu = _agree(workers)
        last = _last(outcomes)
        agree_s = last["t"] - began
        store_cpu_agree, agreeing = server.cpu_s() - cpu, _counts(workers)
        time.sleep(SETTLE_BEATS * beat)
        before, cpu, at = _counts(workers), server.cpu_s(), time.monotonic()
        time.sleep(COUNTED_BEATS * beat)
        after, cpu_after, now = _counts(workers), server.cpu_s(), time.monotonic()
        # nan when no rank beat: they all left, having failed to agree (agree_failures says why)
        beats = (after["beats"] - before["beats"]) / (world - 1) or math.nan
        ops = {op: (after["ops"][op] - before["ops"][op]) / beats for op in after["ops"]}
        ops = {op: count for op, count in ops.items() if count}
        victim = chunks[1 % len(chunks)][-1]  # a rank of another process than rank 0's
        stopped = _owner(workers, chunks, victim).ask({"cmd": "stop", "rank": victim})["stopped"]
        rank_lost_s, rank_texts = _named(workers, victim, stopped, bound, set())
        process_lost_s, process_texts = math.nan, list[str]()
        if len(workers) > 2:  # neither rank 0's process nor the killed rank's
            killed_at = time.monotonic()
            workers.pop().kill()
            process_lost_s, process_texts = _named(workers, chunks[-1][0], killed_at, bound,
                                                   {victim})
        stopped = workers[0].ask({"cmd": "stop", "rank": 0})["stopped"]
        watcher_lost_s, watcher_texts = _named(workers, 0, stopped, bound, {victim})
    agreed = [_after_last_plan(last)]
    agreed += [_agreement_after_last_plan(world, ranks_per_process, peer_s)
               for _ in range(agreements - 1)]
    agree_after, verdict_after, read_after = _medians(agreed)
    mismatches = [_mismatch(world, ranks_per_process, peer_s) for _ in range(agreements)]
    mismatch_s, mismatch_after_s, mismatch_left_s = _medians([m[:3] for m in mismatches])
    details = mismatches[0][3]
    total = sum(after["ops"].values()) - sum(before["ops"].values())
    return Measured(
        world, sum(ops.values()), (after["bytes"] - before["bytes"]) / beats, ops,
        total / (now - at) / world, agree_s, last["began"] - began, last["plan_at"] - began,
        agree_after, verdict_after, read_after, workers_cpu,
        (sum(agreeing["ops"].values()) - sum(joined["ops"].values())) / world,
        (agreeing["bytes"] - joined["bytes"]) / world,
        sum("error" not in o for o in outcomes.values()),
        [o["error"] for o in outcomes.values() if "error" in o][:3],
        store_cpu_agree, (cpu_after - cpu) / beats * 1000, rank_lost_s, rank_texts,
        process_lost_s, process_texts, watcher_lost_s, watcher_texts, mismatch_s, mismatch_after_s,
        mismatch_left_s, details)


def _last(outcomes: dict[int, dict[str, Any]]) -> dict[str, float]:
    """When the last rank got to each point of the agreement (returned, began, published
    its plan, saw the verdict written, read it)."""
    return {what: max(o[what] for o in outcomes.values() if not math.isnan(o[what]))
            for what in ("t", "began", "plan_at", "verdict_at", "read_verdict_at")}


def _agreement_after_last_plan(world: int, ranks_per_process: int, peer_s: float
                               ) -> tuple[float, float, float]:
    """Another job that only agrees: its :func:`_after_last_plan`."""
    with _job(world, ranks_per_process, peer_s, f"bench/{world}/again") as (_, workers, _c):
        _began, outcomes, _cpu = _agree(workers)
    return _after_last_plan(_last(outcomes))


def _after_last_plan(last: dict[str, float]) -> tuple[float, float, float]:
    """From the last plan published until every rank returned, until the verdict was
    written, and from it until every rank read it."""
    return (last["t"] - last["plan_at"], last["verdict_at"] - last["plan_at"],
            last["read_verdict_at"] - last["verdict_at"])


def _medians(samples: list[tuple[float, ...]]) -> tuple[float, ...]:
    """Each position's median over ``samples``."""
    return tuple(statistics.median(column) for column in zip(*samples, strict=True))


def _owner(workers: list[_Process], chunks: list[list[int]], rank: int) -> _Process:
    return next(w for w, chunk in zip(workers, chunks, strict=True) if rank in chunk)


def _mismatch(world: int, ranks_per_process: int, peer_s: float
              ) -> tuple[float, float, float, list[list[str]]]:
    """A job where the last rank has another setting: seconds from "go", and from the
    last rank's plan published, until every rank named the difference; from that plan
    until every rank had also left (each waits for the others to have read it, then
    leaves, as a run does); and the lines each named.  A rank that named nothing counts
    as never (``inf``), and ``broken()`` says so."""
    odd = world - 1
    with _job(world, ranks_per_process, peer_s, f"bench/{world}/mismatch", odd) as (
            _, workers, _c):
        began, outcomes, _cpu = _agree(workers)
    last_plan = max(o["plan_at"] for o in outcomes.values())
    named = max(math.inf if o["named_at"] is None else o["named_at"]
                for o in outcomes.values())
    left = max(o["t"] for o in outcomes.values())
    return (named - began, named - last_plan, left - last_plan,
            [o.get("details", []) for _, o in sorted(outcomes.items())])


def expected_mismatch(world: int) -> str:
    """The line every rank must name in :func:`measure`'s mismatched job."""
    from initorch.execution.agreement import rank_list

    return (f"{ODD_SETTING[0]}: 64 on {rank_list(range(world - 1))}; "
            f"{ODD_SETTING[1]} on rank {world - 1}")


# -- rows for bench/table.py ----------------------------------------------------------------

Fields = tuple[str, str, list[float], float, str]
"""A row of ``bench/table.py``: figure, goal, values, limit (the median must be at most
this), unit: ``Row(*fields)``."""


def growth(small: float, large: float, sizes: tuple[int, int]) -> float:
    """``k`` in ``figure ~ size ** k`` between two sizes (``inf`` where the small one
    measured nothing)."""
    if small <= 0 or large <= 0:
        return math.inf
    return math.log(large / small) / math.log(sizes[1] / sizes[0])


GOAL = 1.15
FIGURES: tuple[tuple[str, Callable[[Measured], float], str, float], ...] = (
    ("store operations per beat", lambda m: m.ops_per_beat, "", GOAL),
    ("store bytes per beat", lambda m: m.bytes_per_beat, " B", GOAL),
    ("store CPU per beat", lambda m: m.store_cpu_per_beat_ms, " ms", GOAL),
    ("store operations to agree", lambda m: m.agree_ops_per_rank * m.ranks, "", GOAL),
    ("store CPU to agree", lambda m: m.store_cpu_agree_s, " s", GOAL),
    # Once the last rank published its plan, what is left is initorch's: the watcher
    # wakes, judges N digests, writes the verdict (or the difference), and every rank
    # wakes from its wait and returns.
    ("time for every rank to agree, after the last plan is published",
     lambda m: m.agree_after_last_plan_s, " s", GOAL),
    ("time to name a mismatch on every rank, after the last plan is published",
     lambda m: m.mismatch_after_last_plan_s, " s", GOAL),
    ("time to name a killed rank on every rank", lambda m: m.rank_lost_s, " s", GOAL),
    ("time to name a killed process's ranks on every rank", lambda m: m.process_lost_s,
     " s", GOAL),
    # From "go" the times hold every simulated rank's start on this machine's two cores
    # (N threads woken, each computing its manifest and making its first store calls,
    # under one interpreter lock per process): what a real job, a core per rank, does
    # in parallel.  Reported, with the workers' CPU that explains them.
    ("time for every rank to agree, from go", lambda m: m.agree_s, " s", math.inf),
    ("time to name a mismatch on every rank, from go", lambda m: m.mismatch_s, " s",
     math.inf),
    # After naming it, each rank waits until every other one has read the difference
    # (so that a launcher's SIGTERM after the first failure cuts no rank short of
    # naming it), then leaves: a second wake-up of N threads on two cores.
    ("time for every rank to leave on a mismatch, after the last plan is published",
     lambda m: m.mismatch_left_after_last_plan_s, " s", math.inf),
    ("workers' CPU to agree", lambda m: m.workers_cpu_agree_s, " s", math.inf),
)


def rank_rows(sizes: tuple[int, ...] = SIZES, ranks_per_process: int = RANKS_PER_PROCESS,
              peer_s: float = PEER_TIMEOUT_S) -> list[Fields]:
    """The rows of ``make bench`` for simulated ranks: per size, every figure, against the
    guarantees (every rank agrees, names each loss within the peer timeout and names the
    mismatch); then each figure's growth exponent from 128 ranks (or the smallest size) to
    the largest: the store's traffic and the times that do not run every rank's own work
    machine's cores against 1.15; what the simulation itself costs reported."""
    return rows_for({size: measure(size, ranks_per_process, peer_s) for size in sizes}, peer_s)


def rows_for(measured: dict[int, Measured], peer_s: float) -> list[Fields]:
    """:func:`rank_rows` from figures measured already."""
    sizes = tuple(measured)
    rows: list[Fields] = []
    for size, m in measured.items():
        rows.append((f"simulated ranks, {size:,}: ops/beat {m.ops_per_beat:.0f}, "
                     f"bytes/beat {m.bytes_per_beat:,.0f}, agree {m.agree_s:.2f} s, "
                     f"killed rank named {m.rank_lost_s:.2f} s, node {m.process_lost_s:.2f} s, "
                     f"watcher {m.watcher_lost_s:.2f} s, mismatch {m.mismatch_s:.2f} s, "
                     f"store CPU {m.store_cpu_per_beat_ms:.1f} ms/beat",
                     f"all agree, every loss named <= {peer_s:g} s, the mismatch by all",
                     [_worst_loss(m)], peer_s, " s"))
    low = 128 if 128 in measured and sizes[-1] > 128 else sizes[0]
    pair = (low, sizes[-1])
    for name, read, unit, goal in FIGURES if low < pair[1] else ():  # one size: no growth
        k = growth(read(measured[pair[0]]), read(measured[pair[1]]), pair)
        rows.append((f"growth exponent of the {name}, simulated ranks {pair[0]:,} -> "
                     f"{pair[1]:,} ({read(measured[pair[1]]):.3g}{unit} at {pair[1]:,})",
                     f"<= {goal}" if goal < math.inf else "reported", [k], goal, ""))
    return rows


def _worst_loss(m: Measured) -> float:
    """The longest time to name a loss, or ``inf`` when a guarantee failed."""
    losses = [t for t in (m.rank_lost_s, m.process_lost_s, m.watcher_lost_s)
              if not math.isnan(t)]
    return max(losses) if not broken(m) else math.inf


LAST_SEEN = "it was last seen in step serve (running)"
STOPPED = "stopped answering: its heartbeat has not moved"


def broken(m: Measured) -> list[str]:
    """The guarantees that did not hold in ``m`` (empty: all held): every rank agreed;
    the killed rank was named on every other rank, with the step it was last seen in;
    the killed process's ranks, then the killed watcher, were named by every rank left;
    every rank named the mismatch key by key, with the ranks on each side.  (Whether
    each was named within the peer timeout is the row's limit.)"""
    failed = []
    if m.agreed != m.ranks:
        failed.append(f"{m.ranks - m.agreed} ranks did not agree: {m.agree_failures[:1]}")
    if len(m.rank_lost_texts) != m.ranks - 1 or not all(
            text.endswith(LAST_SEEN) for text in m.rank_lost_texts):
        failed.append(f"the killed rank named by {len(m.rank_lost_texts)} of "
                      f"{m.ranks - 1}: {m.rank_lost_texts[:1]}")
    for what, texts in (("process", m.process_lost_texts), ("watcher", m.watcher_lost_texts)):
        if not math.isnan(m.process_lost_s) and (not texts or not all(
                STOPPED in text and LAST_SEEN in text for text in texts)):
            failed.append(f"the killed {what} named as: {texts[:1]}")
    if m.mismatch_details != [[expected_mismatch(m.ranks)]] * m.ranks:
        wrong = [d for d in m.mismatch_details if d != [expected_mismatch(m.ranks)]]
        failed.append(f"the mismatch misnamed on {len(wrong)} ranks: {wrong[:1]}")
    return failed


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--sizes", default=",".join(map(str, SIZES)))
    parser.add_argument("--ranks-per-process", type=int, default=RANKS_PER_PROCESS)
    parser.add_argument("--peer-timeout", type=float, default=PEER_TIMEOUT_S)
    parser.add_argument("--worker", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.worker:
        _worker(json.loads(args.worker))
        return
    rows = []
    for size in (int(s) for s in args.sizes.split(",")):
        found = measure(size, args.ranks_per_process, args.peer_timeout)
        print(json.dumps({k: v for k, v in asdict(found).items()
                          if not k.endswith(("texts", "details"))}), flush=True)
        print(f"{size} ranks, guarantees: {broken(found) or 'all held'}; load average "
              f"{os.getloadavg()[0]:.1f}", flush=True)
        rows.append(found)
    print(markdown(rows))
    for name, goal, values, limit, unit in rows_for({m.ranks: m for m in rows},
                                                     args.peer_timeout):
        verdict = "ok" if values[0] <= limit else "MISSED"
        print(f"{verdict:6} {name}: {values[0]:.2f}{unit} (goal {goal})")


COLUMNS: tuple[tuple[str, str, str], ...] = (  # heading, field of Measured, format
    ("ranks", "ranks", "{:,}"),
    ("store ops per beat", "ops_per_beat", "{:,.0f}"),
    ("bytes per beat", "bytes_per_beat", "{:,.0f}"),
    ("store CPU per beat", "store_cpu_per_beat_ms", "{:.1f} ms"),
    ("ops/s per rank", "ops_per_s_per_rank", "{:.2f}"),
    ("all agreed in", "agree_s", "{:.2f} s"),
    ("last plan published", "last_plan_s", "{:.2f} s"),
    ("... then all agreed in", "agree_after_last_plan_s", "{:.2f} s"),
    ("... of which the verdict", "verdict_after_last_plan_s", "{:.2f} s"),
    ("... then all read it", "read_after_verdict_s", "{:.2f} s"),
    ("workers' CPU to agree", "workers_cpu_agree_s", "{:.2f} s"),
    ("ops per rank to agree", "agree_ops_per_rank", "{:.1f}"),
    ("store CPU to agree", "store_cpu_agree_s", "{:.2f} s"),
    ("killed rank named by all in", "rank_lost_s", "{:.1f} s"),
    ("killed process", "process_lost_s", "{:.1f} s"),
    ("killed watcher", "watcher_lost_s", "{:.1f} s"),
    ("mismatch named by all in", "mismatch_s", "{:.2f} s"),
    ("... after the last plan", "mismatch_after_last_plan_s", "{:.2f} s"),
    ("... and all left", "mismatch_left_after_last_plan_s", "{:.2f} s"),
)


def markdown(rows: list[Measured]) -> str:
    """The table of ``docs/ranks.md``."""
    lines = ["| " + " | ".join(name for name, _, _ in COLUMNS) + " |",
             "|" + "---|" * len(COLUMNS)]
    lines += ["| " + " | ".join(shown.format(getattr(m, name)) for _, name, shown in COLUMNS)
              + " |" for m in rows]
    return "\n".join(lines)


if __name__ == "__main__":
    main()
