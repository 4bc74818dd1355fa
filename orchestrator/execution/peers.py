"""Keeping the ranks of a job in step, through the job's own key-value store.

The store is torch.distributed's: the one torchrun's agent serves, or the
TCPStore behind the process group's init method (the ``rendezvous`` step
joins it; the core never imports torch).  Over it the run:

* **agrees on the plan** before any step can block on peers: every rank
  publishes its plan and a digest of it (:mod:`initorch.execution.agreement`);
  the watcher compares the digests, within ``join_timeout_s``, and publishes one
  verdict; on a difference every rank stops with the same
  :class:`~initorch.errors.PeerError` naming what differs and on which ranks;
* **publishes its progress** (the step it runs, and a heartbeat counter moved by a
  background thread), so that a rank that waits for its peers learns within
  ``peer_timeout_s`` that one of them failed, exited or died, and in which step
  it was last seen, instead of waiting for the full collective timeout;
* **holds barriers**: a step declared with ``barrier=True`` starts on no rank
  before every rank has finished the steps it depends on.

Store traffic is linear in the ranks: rank 0 watches every heartbeat and publishes
a bounded summary that the others read (:mod:`initorch.execution.watch`), and a
barrier is one counter.  A rank that waits for its peers does not poll the store: it
waits for a key that the last of them writes (the verdict on the plans, a barrier's
"all arrived", every rank having read a disagreement; for the watcher, every rank's
"planned"), and its heartbeat thread waits for that key on the store between two
beats (the watcher checks it, often: one rank's bounded load).  The wait costs one
store call per beat, however long the slowest rank takes, and ends as soon as the key
is written.  ``docs/ranks.md`` counts the operations.
"""

from __future__ import annotations

import contextlib
import json
import socket
import threading
import time
from collections.abc import Callable, Iterable, Iterator
from contextlib import contextmanager
from datetime import timedelta
from typing import Any, Protocol, runtime_checkable

from initorch.errors import PeerError
from initorch.execution.agreement import (
    MAX_SHOWN,
    Manifest,
    compared_digest,
    disagreement,
    manifest,
    plan_key,
    rank_list,
    verdict,
    verdict_error,
)
from initorch.execution.launchers import RankInfo
from initorch.execution.liveness import READS_PER_BEAT, WAIT_LOG_S, beat_interval, silence_bound
from initorch.execution.peer_states import (
    PeerState,
    Seen,
    first_causes,
    state_of,
    stopped_peers,
    where,
)
from initorch.execution.watch import (
    LISTED,
    PLAN,
    SUMMARY_KEY,
    WATCHER,
    Behind,
    Summary,
    View,
    barrier_points,
    behind,
    progress_key,
    summary,
)
from initorch.records import record
from initorch.resolution.plan import Plan

POLL_START_S = 0.02
POLL_MAX_S = 0.5
DISAGREEMENT_LINGER_S = 4 * POLL_MAX_S  # a rank between two polls reads the store by then
AGREEMENT_KEY = "agreement"
ROSTER_KEY = "roster"  # "0,3,1,...": each rank adds itself once, when it starts beating
DISAGREED_KEY = "disagreed"  # counts the ranks that have read a disagreement
ALL_NAMED_KEY = "disagreed/all"  # written by the last of them
ALL_ARRIVED = "all"  # a barrier's counter key + "/" + this: written by the last rank
MIN_STORE_WAIT_S = 0.01  # a shorter wait for a key is left to the next beat
KEY_CHECK_S = 0.01  # how often the watcher checks the keys it awaits between two looks
PLANNED_KEY = "planned"  # counts the ranks but the watcher whose plan's digest is published
ALL_PLANNED_KEY = "planned/all"  # written by the last of them: the watcher awaits one key


@runtime_checkable
class KeyValueStore(Protocol):
    """The part of torch.distributed's ``Store`` the run uses (keys are text)."""

    def set(self, key: str, value: bytes) -> None: ...

    def get(self, key: str) -> bytes: ...

    def add(self, key: str, amount: int) -> int: ...

    def check(self, keys: list[str]) -> bool: ...

    def multi_get(self, keys: list[str]) -> list[bytes]: ...

    def append(self, key: str, value: bytes) -> None: ...

    def wait(self, keys: list[str], timeout: timedelta) -> None:
        """Return once every key exists; raise after ``timeout`` (torch: ``DistStoreError``).
        torch's client holds its connection meanwhile: no other call on it runs."""


@record
class PeerBounds:
    """How long a rank waits for its peers.

    ``join_s``: for every rank to publish its plan; ``peer_s``: within which every
    rank names a peer whose heartbeat stopped; ``barrier_s``: at a barrier, for
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


class JobPeers:
    """This rank's view of the job: agreement, progress, barriers, leaving.

    Created when the job's store is joined: :meth:`start` the heartbeat first,
    then :meth:`agree`; :meth:`leave` when done.  Rank 0 is the watcher (it reads
    every rank's progress); the others read its summary.  ``clock`` and ``sleep``
    are injectable so that tests need not wait in real time; the default sleep of a
    rank waiting for a key ends as soon as its heartbeat thread has seen the key.
    """

    def __init__(self, job: JobStore, rank: RankInfo, log: Any, *,
                 clock: Callable[[], float] = time.monotonic,
                 sleep: Callable[[float], None] | None = None) -> None:
        self.job = job
        self.rank = rank
        self.log = log
        self._clock, self._sleep = clock, sleep or time.sleep
        self._real_sleep = sleep is None
        self._store = job.peers
        self._lock = threading.Lock()  # what the heartbeat thread shares with the run
        self._reading = threading.Lock()  # one read of the job at a time, in order
        self._progress: dict[str, Any] = {
            "beat": 0, "step": None, "state": "joined", "serving": bool(job.hosted_here),
            "host": socket.gethostname(), "world": rank.world_size, "arrived": []}
        self._watching = rank.rank == WATCHER
        self._silence = silence_bound(job.bounds.peer_s)
        self._seen: dict[int, Seen] = {}
        self._states: dict[int, PeerState] = {}  # as last read, by rank
        self._joined: set[int] = set()  # the ranks the watcher knows have published
        self._summary_beat = 0
        self._summary_seen = False
        self._verdict: str | None = None  # the watcher's, once published
        self._latest: dict[int, dict[str, Any] | None] = {}  # the watcher's last read
        self._own: Manifest = {}
        self._lost: dict[int, str] = {}  # peers whose heartbeat stopped, as peer_lost said
        self._broken: list[PeerState] = []  # peers that broke off, as last read
        self._unlisted = 0  # peers that stopped, as last read, beyond the summary's list
        self._view = View()  # the heartbeat thread's last read
        self._awaited: tuple[str, ...] = ()  # the keys the heartbeat thread waits for
        self._arrivals: set[str] = set()  # the awaited keys it saw written
        self._arrived = threading.Event()  # wakes the rank waiting for the keys
        self._wake = threading.Event()  # wakes the heartbeat thread: a key, or stop
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None

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
        own = self._own = manifest(plan, self.rank)
        if self._store.add(f"claim/{self.rank.rank}", 1) > 1:
            raise PeerError(f"rank {self.rank.rank} is claimed by more than one process "
                            f"(this one is pid {own['pid']} on {own['host']})",
                            ranks=[self.rank.rank],
                            hint="give each process its own rank: check --node-rank, "
                                 "--local-rank, RANK or SLURM_PROCID")
        self._store.set(f"plan/{self.rank.rank}", json.dumps(own).encode())
        self._publish(**{PLAN: plan_key(own)})
        if self._watching:  # woken when the last rank's digest is on its progress
            self._wait(self._judged, PLAN, "publish its plan", self.job.bounds.join_s,
                       keys=(ALL_PLANNED_KEY,))
        else:
            # One counter and one key, not a key per rank: the watcher checks what it
            # awaits every KEY_CHECK_S, and a check of N keys costs the store O(N).
            if self._store.add(PLANNED_KEY, 1) >= self.rank.world_size - 1:
                self._store.set(ALL_PLANNED_KEY, b"")
            self._wait(self._verdict_published, PLAN, "publish its plan",
                       self.job.bounds.join_s, keys=(AGREEMENT_KEY,))
        if not self._watching and not self._summary_seen:
            # Agreed before its heartbeat read the summary: read it once, so that this
            # rank knows which rank serves the store should the store go away.
            self._refresh()
        published = json.loads(self._store.get(AGREEMENT_KEY))
        error = verdict_error(published) or self._outside_the_verdict(own, published)
        if error is not None:
            self.log.error("plan_disagreement", ranks=rank_list(error.ranks),
                           differences=list(error.details))
            self._linger_until_named(error)
            raise error
        self.log.info("plan_agreed", world_size=self.rank.world_size,
                      fingerprint=plan.fingerprint, store=self.job.address,
                      hosts=published["hosts"], host_count=published["host_count"])

    @staticmethod
    def _verdict_published(view: View, arrived: bool) -> bool:
        return arrived or view.verdict is not None

    def _judged(self, view: View, arrived: bool) -> bool:
        """The watcher: once every rank published its plan (or one showed a different
        world, when waiting for the rest is pointless), judge the plans and publish
        the verdict.  Where the ranks' plan keys differ, one manifest per key is read,
        not one per rank: a mismatch costs the watcher O(N) to group the ranks, not N
        manifests (3.5 KB each) to read, parse and compare."""
        progresses = self._latest
        published = {rank: p for rank, p in progresses.items() if p and p.get(PLAN)}
        world = self.rank.world_size
        other_world = any(p["world"] != world for p in published.values())
        if len(published) < world and not other_world:
            return False
        hosts = sorted({p["host"] for p in published.values()})
        keys: dict[str, list[int]] = {}
        for rank in sorted(published):
            keys.setdefault(published[rank][PLAN], []).append(rank)
        if len(keys) == 1 and not other_world:
            error = None
        else:
            sharing = {ranks[0]: ranks for ranks in keys.values()}
            raw = self._store.multi_get([f"plan/{rank}" for rank in sharing])
            error = disagreement({rank: json.loads(value)
                                  for rank, value in zip(sharing, raw, strict=True)}, sharing)
        self._store.set(AGREEMENT_KEY, json.dumps(verdict(error, self._own, hosts)).encode())
        self._verdict = "differ" if error is not None else "agreed"
        self._refresh()  # the summary says so
        return True

    def _outside_the_verdict(self, own: Manifest, published: dict[str, Any]
                             ) -> PeerError | None:
        """A rank the watcher did not count (its world is larger than the watcher's)
        agrees with nobody: compare its plan with the watcher's, to say why."""
        if published["digest"] == compared_digest(own):
            return None
        theirs = json.loads(self._store.get(f"plan/{WATCHER}"))
        return disagreement({WATCHER: theirs, self.rank.rank: own})

    def _linger_until_named(self, error: PeerError) -> None:
        """Before this rank fails on a disagreement, wait (``DISAGREEMENT_LINGER_S`` at
        most) until every rank the verdict names has read it too.  A launcher ends the
        whole job when its first rank fails (torchrun's agent sends SIGTERM): a rank
        still between two polls of the store would be ended before it read the
        verdict, and its last line would not name what differs.  One counter: each
        rank adds itself, the last one writes ``ALL_NAMED_KEY``, which the others await."""
        deadline = self._clock() + DISAGREEMENT_LINGER_S
        with contextlib.suppress(Exception):  # a store gone meanwhile: nobody to wait for
            if self._store.add(DISAGREED_KEY, 1) >= len(error.ranks):
                self._store.set(ALL_NAMED_KEY, b"")
                return
            with self._awaiting((ALL_NAMED_KEY,)) as beating:
                interval = POLL_START_S
                while self._clock() < deadline and not (
                        self._all_arrived((ALL_NAMED_KEY,)) if beating
                        else self._store.check([ALL_NAMED_KEY])):
                    self._nap(interval, beating)
                    interval = min(interval * 2, POLL_MAX_S)

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
        """Stop the heartbeat: at once, or within a beat when its thread is waiting on
        the store for a key nobody wrote (torch's wait cannot be cut short)."""
        self._stop.set()
        self._wake.set()
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
        """Write this rank's progress; the first write also puts it on the roster."""
        with self._lock:
            self._progress.update(changes)
            self._progress["beat"] += 1
            first = self._progress["beat"] == 1
            value = json.dumps(self._progress, separators=(",", ":")).encode()
        self._store.set(progress_key(self.rank.rank), value)
        if first and self.rank.world_size > 1:
            self._store.append(ROSTER_KEY, f"{self.rank.rank},".encode())

    def _beat(self) -> None:
        """Move the heartbeat and read the job; log ``peer_lost`` once per peer that
        stops, so that it is said even while this rank is busy in a step of its own,
        and keep it for :meth:`lost`: a run whose own steps all succeeded still lost
        part of its job.  The watcher reads ``READS_PER_BEAT`` times per beat."""
        interval = self.job.bounds.beat_s / (READS_PER_BEAT if self._watching else 1)
        while not self._between_beats(interval):
            try:
                self._publish()
                view = self._refresh()
            except Exception as exc:  # the store went away: say so once, then stop
                self.log.warning("job_store_unreachable", store=self.job.address,
                                 error=f"{type(exc).__name__}: {exc}")
                return
            for state in view.stopped:
                if state.kind == "lost" and state.rank not in self._lost:
                    with self._lock:
                        self._lost[state.rank] = state.text
                    self.log.error("peer_lost", lost_rank=state.rank, problem=state.text)

    def _between_beats(self, seconds: float) -> bool:
        """Wait out the time to the next beat; true once the heartbeat is to stop.  While
        the run awaits keys, the wait is on the store, for those keys: the rank learns
        that they are all written as soon as the last one is, at one store call per beat
        (a wait that the store's client holds until the next beat at most, so that beat
        is never late)."""
        end = time.monotonic() + seconds
        while not self._stop.is_set():
            self._wake.clear()
            keys, left = self._awaited, end - time.monotonic()
            if left <= 0:
                return False
            if not keys or self._all_arrived(keys) or left < MIN_STORE_WAIT_S:
                self._wake.wait(left)
                continue
            try:
                self._store.wait(list(keys), timedelta(seconds=left))
            except Exception:  # not written by the next beat (torch's DistStoreError), or
                return False   # the store went away, which the beat's write then says
            self._arrivals.update(keys)
            self._arrived.set()
        return True

    def _all_arrived(self, keys: tuple[str, ...]) -> bool:
        return all(key in self._arrivals for key in keys)

    def _beating(self) -> bool:
        thread = self._thread
        return thread is not None and thread.is_alive() and not self._stop.is_set()

    @contextmanager
    def _awaiting(self, keys: tuple[str, ...]) -> Iterator[bool]:
        """Have the heartbeat thread wait for ``keys`` while the body runs; yields whether
        it does (the watcher, and a rank whose heartbeat is not beating, read the store
        themselves)."""
        beating = bool(keys) and not self._watching and self._beating()
        if beating:
            self._arrived.clear()
            self._awaited = keys
            self._wake.set()
        try:
            yield beating
        finally:
            if beating:
                self._awaited = ()

    def _nap(self, seconds: float, beating: bool, keys: tuple[str, ...] = ()) -> None:
        """Sleep between two looks; a real sleep ends early when the awaited keys came:
        the heartbeat thread's wait for them, or, where this thread reads the store
        itself (the watcher), its own ``check`` of them every ``KEY_CHECK_S``.  A check
        rather than a wait: torch's client warns twice on stderr for every wait that
        times out, and between two looks the keys usually do not come; one rank's
        checks are a bounded load on the store whatever the size of the job."""
        if not self._real_sleep:
            self._sleep(seconds)
        elif beating:
            self._arrived.wait(seconds)
        elif keys:
            end = time.monotonic() + seconds
            while not self._store.check(list(keys)):
                left = end - time.monotonic()
                if left <= 0:
                    return
                time.sleep(min(KEY_CHECK_S, left))
        else:
            time.sleep(seconds)

    def broken_off(self) -> PeerError | None:
        """The error for the peers that broke off (died, or failed), as this rank last
        read them, or ``None``: costs no store call, so a rank waiting in native code
        (a process group forming) can ask it often and stop waiting for a peer that
        will never come, instead of waiting for the collective timeout."""
        with self._lock:
            broken, unlisted = first_causes(self._broken), self._unlisted
        return stopped_peers(broken[:LISTED], self.rank.rank,
                             len(broken[LISTED:]) + unlisted) if broken else None

    def lost(self) -> dict[int, str]:
        """The peers found lost so far (their heartbeat stopped), each with what this
        rank saw when it logged ``peer_lost``: every one on the watcher, the first
        :data:`~initorch.execution.watch.LISTED` on the other ranks."""
        with self._lock:
            return dict(self._lost)

    # -- reading the job ----------------------------------------------------------------

    def _refresh(self) -> View:
        """Read the job once: the watcher reads every rank and publishes its summary,
        the others read that summary."""
        with self._reading:
            view = self._scan() if self._watching else self._read_summary()
        with self._lock:
            self._broken = [s for s in view.stopped if s.broke_off]
            self._unlisted = view.unlisted
            self._view = view
        return view

    def _scan(self) -> View:
        """The watcher's read: every rank's progress in one ``multi_get``, judged here,
        and the summary published.  ``multi_get`` would wait for a key that does not
        exist yet, so until every rank has joined the roster says which ones do."""
        world = self.rank.world_size
        if len(self._joined) < world - 1 and self._store.check([ROSTER_KEY]):
            roster = self._store.get(ROSTER_KEY).decode().split(",")
            self._joined = {int(r) for r in roster if r and int(r) < world} - {self.rank.rank}
        ranks = sorted(self._joined)
        values = self._store.multi_get([progress_key(rank) for rank in ranks]) if ranks else []
        with self._lock:
            own = dict(self._progress)
        progresses: dict[int, dict[str, Any] | None] = dict.fromkeys(range(world))
        progresses.update({rank: json.loads(value) for rank, value in zip(ranks, values,
                                                                          strict=True)})
        progresses[self.rank.rank] = own
        self._latest = progresses
        states = self._judge({r: p for r, p in progresses.items() if r != self.rank.rank})
        stopped = first_causes([s for s in states.values() if s.problem])
        points = [*([] if self._verdict else [PLAN]), *barrier_points(progresses.values())]
        late = behind(progresses, points)
        self._summary_beat += 1
        self._store.set(SUMMARY_KEY, summary(self._summary_beat, own, stopped, late,
                                             self._verdict))
        return View(self._summary_beat, tuple(stopped), len(stopped), late, self._verdict)

    def _read_summary(self) -> View:
        """Another rank's read: the watcher's summary, one key; the watcher itself is
        judged by whether its summary still moves."""
        if not self._summary_seen:
            if not self._store.check([SUMMARY_KEY]):
                return View()
            self._summary_seen = True
        read = Summary.decode(self._store.get(SUMMARY_KEY))
        watcher = self._judge({WATCHER: read.watcher}, beat=read.beat)[WATCHER]
        stopped = [s for s in read.stopped if s.rank != self.rank.rank]
        count = read.stopped_count - (len(read.stopped) - len(stopped))
        if watcher.problem:
            stopped, count = [watcher, *stopped], count + 1
        return View(read.beat, tuple(stopped), count, read.behind, read.verdict)

    def _judge(self, progresses: dict[int, dict[str, Any] | None], beat: Any = None
               ) -> dict[int, PeerState]:
        """Each rank's state from its progress (``None``: never published), its
        heartbeat judged on this rank's clock; ``beat`` stands for the heartbeat of a
        rank judged by its summary."""
        now = self._clock()
        states = {}
        with self._lock:
            for rank, progress in progresses.items():
                if progress is None:
                    states[rank] = PeerState(rank, "absent", f"rank {rank} never joined the job")
                    continue
                seen = self._seen.setdefault(rank, Seen(since=now))
                seen.saw(progress, progress.get("beat") if beat is None else beat, now)
                states[rank] = state_of(rank, progress, now - seen.since, self._silence)
            self._states.update(states)
        return states

    def gone(self, ranks: Iterable[int]) -> dict[int, str]:
        """Those of ``ranks`` that will not take part in the job any more -- they left
        it, or their heartbeat stopped -- each with what this rank saw, in words; a
        store that no longer answers says nothing of them (``{}``).  Teardown uses it
        to stop waiting for a rank that cannot answer: their own progress is read, in
        one ``multi_get``, with what the watcher said of them."""
        ranks = [rank for rank in ranks if rank != self.rank.rank]
        try:
            states = self._read(ranks)
            said = {s.rank: s for s in self._refresh().stopped}
        except Exception:  # the store went away: nobody is known to be gone
            return {}
        return {rank: state.text for rank in ranks
                if (state := said.get(rank, states[rank])).kind in ("exited", "lost")}

    def _read(self, ranks: list[int]) -> dict[int, PeerState]:
        """``ranks`` as their own progress says, judged here (two store calls)."""
        keys = [progress_key(rank) for rank in ranks]
        if not keys or not self._store.check(keys):
            return self._judge(dict.fromkeys(ranks))
        values = self._store.multi_get(keys)
        return self._judge({rank: json.loads(value) if value else None
                            for rank, value in zip(ranks, values, strict=True)})

    # -- waiting for peers --------------------------------------------------------------

    def _wait(self, ready: Callable[[View, bool], bool], point: str, waiting_for: str,
              bound: float, keys: tuple[str, ...] = ()) -> None:
        """Read the job until ``ready(view, arrived)`` holds (``arrived``: every one of
        ``keys`` is written); fail at once when a peer failed, left or was lost, or
        after ``bound`` seconds, naming the ranks not yet at ``point`` and where each
        was last seen.  A rank other than the watcher reads no store here while its
        heartbeat thread awaits ``keys`` (that thread holds the client): it takes the
        job as that thread last read it (once per beat), and ``ready`` is asked again
        as soon as the keys are written.  The watcher, which judges from what it reads
        (and whose reads the others' summary is), reads the job at every look, and
        between two looks checks ``keys`` often instead of sleeping."""
        with self._awaiting(keys) as beating:
            self._wait_reading(ready, point, waiting_for, bound, keys, beating)

    def _wait_reading(self, ready: Callable[[View, bool], bool], point: str,
                      waiting_for: str, bound: float, keys: tuple[str, ...],
                      beating: bool) -> None:
        deadline = self._clock() + bound
        said = self._clock()
        interval = POLL_START_S
        while True:
            if beating and not self._beating():
                beating = False  # the heartbeat stopped (the store went away): read it here
            if beating:
                arrived = self._all_arrived(keys)
                with self._lock:
                    view = self._view
            else:
                view = self._refresh()
                arrived = bool(keys) and self._store.check(list(keys))
            if ready(view, arrived):  # a summary that says a peer stopped
                return  # after ``ready`` held says that it held too
            if view.stopped:
                raise stopped_peers(list(view.stopped[:LISTED]), self.rank.rank,
                                    view.unlisted + max(len(view.stopped) - LISTED, 0))
            now = self._clock()
            late = self._behind(view, point)
            if now >= deadline:
                ranks = list(late.ranks)
                raise PeerError(
                    f"{self._ranks_text(late)} did not {waiting_for} within {bound:g}s",
                    ranks=ranks, details=self._last_seen(late),
                    hint="read those ranks' logs; raise distributed.join_timeout_s or "
                         "distributed.timeout_s for a slow start")
            if now - said >= WAIT_LOG_S:
                said = now
                self.log.info("waiting_for_ranks",
                              waiting_for=f"{self._ranks_text(late)} to {waiting_for}",
                              missing=list(late.ranks[:MAX_SHOWN]), store=self.job.address,
                              time_left_s=round(deadline - now, 1),
                              last_seen=self._last_seen(late))
            self._nap(interval, beating, () if arrived else keys)
            interval = min(interval * 2, POLL_MAX_S)

    def _behind(self, view: View, point: str) -> Behind:
        """Who is not yet at ``point``, as last read; before any summary, the watcher
        (which publishes it) is what this rank waits for."""
        if view.beat is None:
            with self._lock:
                seen = self._seen.get(WATCHER)
            return Behind((WATCHER,), (None if seen is None else where(seen.progress),), 1)
        return view.behind.get(point, Behind((), (), 0))

    @staticmethod
    def _ranks_text(late: Behind) -> str:
        if not late.ranks:
            return "some ranks"
        unlisted = late.count - len(late.ranks)
        return rank_list(late.ranks) + (f" and {unlisted} more" if unlisted else "")

    def _last_seen(self, late: Behind) -> list[str]:
        lines = [f"rank {rank}: never joined the job store at {self.job.address}"
                 if seen is None else f"rank {rank}: last seen {seen}"
                 for rank, seen in zip(late.ranks, late.seen, strict=True)]
        return lines[:MAX_SHOWN] + ([f"... and {len(lines) - MAX_SHOWN} more"]
                                    if len(lines) > MAX_SHOWN else [])

    # -- barriers -------------------------------------------------------------------------

    def barrier(self, step: str) -> None:
        """Return once every rank has reached ``step`` (finished what it depends on):
        one counter, added to once per rank (a retried step arrives once)."""
        if self.rank.world_size == 1:
            return
        key = f"barrier/{step}"
        everyone = f"{key}/{ALL_ARRIVED}"
        with self._store_calls():
            with self._lock:
                first = step not in self._progress["arrived"]
            if first:
                self._publish(arrived=[*self._progress["arrived"], step])
                if self._store.add(key, 1) >= self.rank.world_size:
                    self._store.set(everyone, b"")  # the last rank: the others wake
                    return
            self._wait(lambda view, arrived: arrived, step, f"reach step {step}",
                       self.job.bounds.barrier_s, keys=(everyone,))

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
                         f"{where(progress)}; rank {self.rank.rank} stops too",
                         ranks=[rank], details=said, hint=hint)

    # -- leaving --------------------------------------------------------------------------

    def leave(self, failed_step: str | None) -> None:
        """Say that this rank is done with the job.  The process that serves the store
        then waits (within ``peer_s``) until every other rank has left or is gone, so
        that none of them loses the store while still reading it."""
        self.stop()
        try:
            self._publish(state="exited", failed=failed_step)
            if self._watching:
                self._refresh()  # the others read that the watcher left, not that it died
            if not self.job.hosted_here:
                return
            deadline = self._clock() + self.job.bounds.peer_s
            interval = POLL_START_S
            while any(s.kind in ("alive", "failed") for s in self._staying().values()):
                if self._clock() >= deadline:
                    self.log.warning("job_store_closing_early",
                                     why="not every rank said it was done with the job store")
                    return
                self._sleep(interval)
                interval = min(interval * 2, POLL_MAX_S)
        except Exception as exc:  # leaving must never hide why the run ended
            self.log.warning("job_store_unreachable", store=self.job.address,
                             error=f"{type(exc).__name__}: {exc}")

    def _staying(self) -> dict[int, PeerState]:
        """Every other rank as it is now: the watcher reads them all at once anyway."""
        if self._watching:
            self._refresh()
            return {rank: self._states[rank] for rank in self.others}
        return self._read(self.others)
