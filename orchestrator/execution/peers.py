"""Keeping the ranks of a job in step, through the job's own key-value store.

The store is torch.distributed's: the one torchrun's agent serves, or the
TCPStore behind the process group's init method (the ``rendezvous`` step
joins it; the core never imports torch).  Over it the run:

* **agrees on the plan** before any step can block on peers: every rank
  publishes its plan (:mod:`initorch.execution.agreement`), waits, within
  ``join_timeout_s``, for every other rank's, and stops with one
  :class:`~initorch.errors.PeerError` naming what differs and on which ranks;
* **publishes its progress** (the step it runs, and a heartbeat counter moved by a
  background thread), so that a rank that waits for its peers learns within
  ``peer_timeout_s`` that one of them failed, exited or died, and in which step
  it was last seen, instead of waiting for the full collective timeout;
* **holds barriers**: a step declared with ``barrier=True`` starts on no rank
  before every rank has finished the steps it depends on.

Liveness is judged on this rank's own clock (how long since a peer's heartbeat
last moved), never by comparing clocks across hosts.
"""

from __future__ import annotations

import contextlib
import json
import threading
import time
from collections.abc import Callable, Iterable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from typing import Any, Protocol, runtime_checkable

from initorch.errors import PeerError
from initorch.execution.agreement import Manifest, disagreement, manifest, rank_list
from initorch.execution.launchers import RankInfo
from initorch.execution.liveness import WAIT_LOG_S, beat_interval
from initorch.resolution.plan import Plan

POLL_START_S = 0.02
POLL_MAX_S = 0.5
DISAGREEMENT_LINGER_S = 4 * POLL_MAX_S  # a rank between two polls reads the store by then


@runtime_checkable
class KeyValueStore(Protocol):
    """The part of torch.distributed's ``Store`` the run uses (keys are text)."""

    def set(self, key: str, value: bytes) -> None: ...

    def get(self, key: str) -> bytes: ...

    def add(self, key: str, amount: int) -> int: ...

    def check(self, keys: list[str]) -> bool: ...


@dataclass(frozen=True, slots=True)
class PeerBounds:
    """How long a rank waits for its peers.

    ``join_s``: for every rank to publish its plan; ``peer_s``: for a peer's
    heartbeat to move before it counts as lost; ``barrier_s``: at a barrier, for
    peers that are alive but slow.
    """

    join_s: float
    peer_s: float
    barrier_s: float

    @property
    def beat_s(self) -> float:
        """How often a rank moves its heartbeat: several times per ``peer_s``
        (:mod:`initorch.execution.liveness`)."""
        return beat_interval(self.peer_s)


@runtime_checkable
class JobStore(Protocol):
    """What the step that joins the job (``@step(job_store=True)``) returns.

    ``peers`` is a connection of its own for the run's agreement, progress and
    barriers (keys already placed under this job's name); ``address`` says where
    the store is served, for messages; ``hosted_here`` is true in the process that
    serves it, which must therefore outlive the other ranks' use of it.
    """

    @property
    def peers(self) -> KeyValueStore: ...

    @property
    def address(self) -> str: ...

    @property
    def hosted_here(self) -> bool: ...

    @property
    def bounds(self) -> PeerBounds: ...


@dataclass(slots=True)
class _Seen:
    """What this rank last saw of a peer, and when (this rank's monotonic clock)."""

    progress: dict[str, Any] = field(default_factory=dict)
    since: float = 0.0


@dataclass(frozen=True, slots=True)
class PeerState:
    """A peer as this rank sees it: ``kind`` is ``alive``, ``absent`` (no progress
    published yet), ``failed`` (a step failed), ``exited`` (left the job) or ``lost``
    (heartbeat stopped); ``text`` says so in words."""

    rank: int
    kind: str
    text: str
    failed: bool = False  # it left the job after a step of its own failed

    @property
    def problem(self) -> bool:
        return self.kind in ("failed", "exited", "lost")

    @property
    def broke_off(self) -> bool:
        """The peer will not finish a collective it may have entered: it died, or a
        step of its own failed (a clean exit is not that: its part was done)."""
        return self.kind in ("failed", "lost") or self.failed


class JobPeers:
    """This rank's view of the job: agreement, progress, barriers, leaving.

    Created when the job's store is joined: :meth:`start` the heartbeat first,
    then :meth:`agree`; :meth:`leave` when done.  ``clock`` and ``sleep`` are
    injectable so that tests need not wait in real time.
    """

    def __init__(self, job: JobStore, rank: RankInfo, log: Any, *,
                 clock: Callable[[], float] = time.monotonic,
                 sleep: Callable[[float], None] = time.sleep) -> None:
        self.job = job
        self.rank = rank
        self.log = log
        self._clock, self._sleep = clock, sleep
        self._store = job.peers
        self._lock = threading.Lock()
        self._progress: dict[str, Any] = {"beat": 0, "step": None, "state": "joined",
                                          "serving": bool(job.hosted_here)}
        self._seen: dict[int, _Seen] = {}
        self._lost: dict[int, str] = {}  # peers whose heartbeat stopped, as peer_lost said
        self._broken: list[PeerState] = []  # peers that broke off, as the heartbeat last saw
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        self.manifests: dict[int, Manifest] = {}

    @property
    def others(self) -> list[int]:
        return [r for r in range(self.rank.world_size) if r != self.rank.rank]

    # -- agreement ----------------------------------------------------------------------

    def agree(self, plan: Plan) -> None:
        """Publish this rank's plan and compare it with every other rank's.

        Raises :class:`PeerError` when two processes claim this rank, when the
        plans differ (every rank raises the same differences), or when a rank has
        not published its plan within ``join_s`` (naming it and where it was last
        seen).  Agreeing ranks return together; a world of one returns at once.
        """
        if self.rank.world_size == 1:
            return
        with self._store_calls():
            self._agree(plan)

    def _agree(self, plan: Plan) -> None:
        own = manifest(plan, self.rank)
        if self._store.add(f"claim/{self.rank.rank}", 1) > 1:
            raise PeerError(f"rank {self.rank.rank} is claimed by more than one process "
                            f"(this one is pid {own['pid']} on {own['host']})",
                            ranks=[self.rank.rank],
                            hint="give each process its own rank: check --node-rank, "
                                 "--local-rank, RANK or SLURM_PROCID")
        self._store.set(f"plan/{self.rank.rank}", json.dumps(own).encode())
        self.manifests = {self.rank.rank: own}

        def unpublished() -> list[int]:
            return [r for r in range(self.rank.world_size) if r not in self.manifests]

        self._wait(self._collect_plans, unpublished, "publish its plan", self.job.bounds.join_s,
                   joining=True)
        error = disagreement(self.manifests)
        if error is not None:
            self.log.error("plan_disagreement", ranks=list(error.ranks),
                           differences=list(error.details))
            self._linger_until_named()
            raise error
        self.log.info("plan_agreed", world_size=self.rank.world_size,
                      fingerprint=plan.fingerprint, store=self.job.address,
                      hosts=sorted({m["host"] for m in self.manifests.values()}))
        self.states(self.others)  # seen once at least: who serves the store, if it goes

    def _linger_until_named(self) -> None:
        """Before this rank fails on a disagreement, wait (``DISAGREEMENT_LINGER_S`` at
        most) until every other rank has read the plans and said so too.  A launcher
        ends the whole job when its first rank fails (torchrun's agent sends SIGTERM): a
        rank still between two polls of the store would be ended before it read the
        last plan, and its last line would not name what differs.  Only the ranks whose
        plans were read are waited for, and not one that is gone or failed."""
        self._store.set(f"disagreed/{self.rank.rank}", b"1")

        def silent() -> list[int]:
            return [r for r in sorted(self.manifests) if r != self.rank.rank
                    and not self._store.check([f"disagreed/{r}"])]

        with contextlib.suppress(PeerError):
            self._wait(lambda: not silent(), silent, "name the disagreement",
                       DISAGREEMENT_LINGER_S, joining=True)

    def _collect_plans(self) -> bool:
        """Read the plans published so far; True once all are in, or once one of them
        shows a different world (then waiting for the rest is pointless)."""
        for rank in range(self.rank.world_size):
            key = f"plan/{rank}"
            if rank not in self.manifests and self._store.check([key]):
                self.manifests[rank] = json.loads(self._store.get(key))
        if any(m["world_size"] != self.rank.world_size for m in self.manifests.values()):
            return True
        return len(self.manifests) == self.rank.world_size

    # -- progress -----------------------------------------------------------------------

    def start(self) -> None:
        """Publish this rank's progress and keep its heartbeat moving (a daemon thread)
        until :meth:`stop`: before the agreement, so that ranks that wait for a late
        one do not take each other for dead."""
        self._publish()
        if self._thread is not None or self.rank.world_size == 1:
            return
        self._thread = threading.Thread(target=self._beat, name="initorch-peers", daemon=True)
        self._thread.start()

    def stop(self) -> None:
        self._stop.set()
        thread = self._thread
        if thread is not None and thread is not threading.current_thread():
            thread.join(timeout=5)

    def step_started(self, step: str) -> None:
        self._tell(step=step, state="running")

    def step_finished(self, step: str, status: str) -> None:
        self._tell(step=step, state=status)

    def _tell(self, **changes: Any) -> None:
        """Publish progress; a store that went away is logged, never a step's failure
        (the steps that need the peers find out themselves)."""
        try:
            self._publish(**changes)
        except Exception as exc:
            self.log.warning("job_store_unreachable", store=self.job.address,
                             error=f"{type(exc).__name__}: {exc}")

    def _publish(self, **changes: Any) -> None:
        with self._lock:
            self._progress.update(changes)
            self._progress["beat"] += 1
            value = json.dumps(self._progress).encode()
        self._store.set(f"progress/{self.rank.rank}", value)

    def _beat(self) -> None:
        """Move the heartbeat; log ``peer_lost`` once per peer that stops, so that it is
        said even while this rank is busy in a step of its own, and keep it for
        :meth:`lost`: a run whose own steps all succeeded still lost part of its job."""
        interval = self.job.bounds.beat_s
        while not self._stop.wait(interval):
            try:
                self._publish()
                states = self.states(self.others)
            except Exception as exc:  # the store went away: say so once, then stop
                self.log.warning("job_store_unreachable", store=self.job.address,
                                 error=f"{type(exc).__name__}: {exc}")
                return
            lost = [s for s in states if s.kind == "lost" and s.rank not in self._lost]
            with self._lock:
                self._broken = [s for s in states if s.broke_off]
            for state in lost:
                with self._lock:
                    self._lost[state.rank] = state.text
                self.log.error("peer_lost", lost_rank=state.rank, problem=state.text)

    def broken_off(self) -> PeerError | None:
        """The error for the peers that broke off (died, or failed), as the heartbeat
        thread last saw them, or ``None``: costs no store call, so a rank waiting in
        native code (a process group forming) can ask it often and stop waiting for a
        peer that will never come, instead of waiting for the collective timeout."""
        with self._lock:
            broken = list(self._broken)
        return _stopped_peers(broken, self.rank.rank) if broken else None

    def lost(self) -> dict[int, str]:
        """The peers found lost so far (their heartbeat stopped), each with what this
        rank saw when it logged ``peer_lost``."""
        with self._lock:
            return dict(self._lost)

    # -- watching peers -----------------------------------------------------------------

    def states(self, ranks: Iterable[int]) -> list[PeerState]:
        """How each of ``ranks`` looks from here now."""
        now = self._clock()
        states = []
        for rank in ranks:
            key = f"progress/{rank}"
            if not self._store.check([key]):
                states.append(PeerState(rank, "absent", f"rank {rank} never joined the job"))
                continue
            progress = json.loads(self._store.get(key))
            with self._lock:
                seen = self._seen.get(rank)
                if seen is None or seen.progress.get("beat") != progress.get("beat"):
                    self._seen[rank] = seen = _Seen(progress, now)
            states.append(_state_of(rank, progress, now - seen.since, self.job.bounds.peer_s))
        return states

    def gone(self, ranks: Iterable[int]) -> dict[int, str]:
        """Those of ``ranks`` that will not take part in the job any more -- they left
        it, or their heartbeat stopped -- each with what this rank saw, in words; a
        store that no longer answers says nothing of them (``{}``).  Teardown uses it
        to stop waiting for a rank that cannot answer."""
        try:
            states = self.states(ranks)
        except Exception:  # the store went away: nobody is known to be gone
            return {}
        return {s.rank: s.text for s in states if s.kind in ("exited", "lost")}

    def _wait(self, ready: Callable[[], bool], missing: Callable[[], list[int]],
              waiting_for: str, bound: float, *, joining: bool = False) -> None:
        """Poll ``ready`` until it holds; fail at once when a peer failed, left or was
        lost (an absent one too, unless ``joining``), or after ``bound`` seconds,
        naming the ranks that are still ``missing`` and where each was last seen."""
        deadline = self._clock() + bound
        said = self._clock()
        interval = POLL_START_S
        while not ready():
            problems = [s for s in self.states(self.others)
                        if s.problem or (s.kind == "absent" and not joining)]
            if problems:
                raise _stopped_peers(problems, self.rank.rank)
            now = self._clock()
            if now >= deadline:
                late = missing()
                raise PeerError(
                    f"{rank_list(late)} did not {waiting_for} within {bound:g}s",
                    ranks=late, details=[self._last_seen(rank) for rank in late],
                    hint="read those ranks' logs; raise distributed.join_timeout_s or "
                         "distributed.timeout_s for a slow start")
            if now - said >= WAIT_LOG_S:
                said = now
                self._say_waiting(waiting_for, missing(), deadline - now)
            self._sleep(interval)
            interval = min(interval * 2, POLL_MAX_S)

    def _say_waiting(self, waiting_for: str, late: list[int], left: float) -> None:
        self.log.info("waiting_for_ranks", waiting_for=f"{rank_list(late)} to {waiting_for}",
                      missing=late, store=self.job.address, time_left_s=round(left, 1),
                      last_seen=[self._last_seen(rank) for rank in late])

    def _last_seen(self, rank: int) -> str:
        seen = self._seen.get(rank)
        if seen is None:
            return f"rank {rank}: never joined the job store at {self.job.address}"
        return f"rank {rank}: last seen {_where(seen.progress)}"

    # -- barriers -------------------------------------------------------------------------

    def barrier(self, step: str) -> None:
        """Return once every rank has reached ``step`` (finished what it depends on)."""
        if self.rank.world_size == 1:
            return
        keys = {rank: f"barrier/{step}/{rank}" for rank in self.others}

        def not_arrived() -> list[int]:
            return [rank for rank, key in keys.items() if not self._store.check([key])]

        with self._store_calls():
            self._store.set(f"barrier/{step}/{self.rank.rank}", b"1")
            self._wait(lambda: not not_arrived(), not_arrived, f"reach step {step}",
                       self.job.bounds.barrier_s)

    @contextmanager
    def _store_calls(self) -> Iterator[None]:
        """While this rank waits for its peers, a store that stops answering means that
        the process serving it is gone: one :class:`PeerError` that names that rank and
        where it was last seen, instead of the store client's connection error."""
        try:
            yield
        except PeerError:
            raise
        except Exception as exc:
            raise self._store_lost(exc) from exc

    def _store_lost(self, exc: Exception) -> PeerError:
        said = [f"the store client said: {type(exc).__name__}: {exc}"]
        hint = "the first error in the log of the process that serves the store is the cause"
        with self._lock:
            servers = [(rank, seen.progress) for rank, seen in sorted(self._seen.items())
                       if seen.progress.get("serving")]
        if not servers:
            return PeerError(f"the job's store at {self.job.address} stopped answering: the "
                             "process that serves it (rank 0, or the launcher's agent) has "
                             f"likely exited; rank {self.rank.rank} stops too",
                             details=said, hint=hint)
        rank, progress = servers[0]
        return PeerError(f"rank {rank}, which serves the job's store at {self.job.address}, "
                         f"stopped answering: it has likely died; it was last seen "
                         f"{_where(progress)}; rank {self.rank.rank} stops too",
                         ranks=[rank], details=said, hint=hint)

    # -- leaving --------------------------------------------------------------------------

    def leave(self, failed_step: str | None) -> None:
        """Say that this rank is done with the job.  The process that serves the store
        then waits (within ``peer_s``) until every other rank has left or is gone, so
        that none of them loses the store while still reading it."""
        self.stop()
        try:
            self._publish(state="exited", failed=failed_step)
            if not self.job.hosted_here:
                return
            deadline = self._clock() + self.job.bounds.peer_s
            interval = POLL_START_S
            while any(s.kind in ("alive", "failed") for s in self.states(self.others)):
                if self._clock() >= deadline:
                    self.log.warning("job_store_closing_early",
                                     why="not every rank said it was done with the job store")
                    return
                self._sleep(interval)
                interval = min(interval * 2, POLL_MAX_S)
        except Exception as exc:  # leaving must never hide why the run ended
            self.log.warning("job_store_unreachable", store=self.job.address,
                             error=f"{type(exc).__name__}: {exc}")


def _state_of(rank: int, progress: dict[str, Any], still_for: float, peer_s: float
              ) -> PeerState:
    state, step = progress.get("state"), progress.get("step")
    if state == "exited":
        failed = progress.get("failed")
        where = f" (its start-up failed in step {failed})" if failed else ""
        return PeerState(rank, "exited", f"rank {rank} has left the job{where}",
                         failed=bool(failed))
    if state == "failed":
        return PeerState(rank, "failed", f"rank {rank} failed in step {step}")
    if still_for > peer_s:
        return PeerState(rank, "lost", f"rank {rank} stopped answering: its heartbeat has not "
                                       f"moved for {still_for:.0f}s; it was last seen "
                                       f"{_where(progress)}")
    return PeerState(rank, "alive", f"rank {rank} is {_where(progress)}")


def _where(progress: dict[str, Any]) -> str:
    step, state = progress.get("step"), progress.get("state")
    if step is None:
        return "joining the job"
    return f"in step {step} ({state})"


CAUSE_FIRST = {"lost": 0, "exited": 1, "failed": 2, "absent": 3}


def _stopped_peers(problems: list[PeerState], rank: int) -> PeerError:
    """One error for the peers that stopped, the likeliest cause first (a rank that died
    before ranks that failed waiting for it)."""
    first, *rest = sorted(problems, key=lambda s: (CAUSE_FIRST[s.kind], s.rank))
    return PeerError(f"{first.text}; rank {rank} stops too",
                     ranks=sorted(s.rank for s in problems), details=[s.text for s in rest],
                     hint="the first error in that rank's log is the cause")
