"""Ranks in step through the job's store: plan agreement, progress, barriers, leaving.

The store here is an in-memory one with torch's ``Store`` semantics, and each rank a
thread; ``tests/e2e/test_ranks.py`` does the same with real processes and torch's
TCPStore.  Waits are bounded by the peers' own bounds, never by asserting times.
"""

from __future__ import annotations

import json
import threading
from collections.abc import Callable
from dataclasses import dataclass, field
from datetime import timedelta
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from initorch import RankInfo, Registry, load_plan
from initorch.errors import PeerError
from initorch.execution import run as run_module
from initorch.execution.agreement import (
    compared_digest,
    differences,
    disagreement,
    manifest,
    plan_key,
    rank_list,
    verdict,
    verdict_error,
)
from initorch.execution.liveness import silence_bound
from initorch.execution.peers import JobPeers, KeyValueStore
from initorch.execution.run import Run
from initorch.plugin import JobStore, PeerBounds, StepContext, setting
from tests.support.runs import DIAGNOSES, WAIT, Recorder
from tests.support.synthetic import FLAG, define, synthetic_plan

QUICK = PeerBounds(join_s=WAIT, peer_s=WAIT, barrier_s=WAIT)


class MemoryStore:
    """torch.distributed ``Store`` semantics in memory: ``add`` counts, ``check`` says
    whether keys exist, ``wait`` blocks until they do (``TimeoutError`` after its
    timeout, where torch raises ``DistStoreError``), values are bytes.  Thread-safe."""

    def __init__(self) -> None:
        self.data: dict[str, bytes] = {}
        self._lock = threading.Condition()

    def set(self, key: str, value: bytes) -> None:
        with self._lock:
            self.data[key] = bytes(value)
            self._lock.notify_all()

    def get(self, key: str) -> bytes:
        with self._lock:
            return self.data[key]

    def add(self, key: str, amount: int) -> int:
        with self._lock:
            value = int(self.data.get(key, b"0")) + amount
            self.data[key] = str(value).encode()
            self._lock.notify_all()
            return value

    def check(self, keys: list[str]) -> bool:
        with self._lock:
            return all(key in self.data for key in keys)

    def multi_get(self, keys: list[str]) -> list[bytes]:
        with self._lock:  # torch's would wait for a missing key: here it is a bug
            return [self.data[key] for key in keys]

    def append(self, key: str, value: bytes) -> None:
        with self._lock:
            self.data[key] = self.data.get(key, b"") + bytes(value)
            self._lock.notify_all()

    def wait(self, keys: list[str], timeout: timedelta) -> None:
        with self._lock:
            if not self._lock.wait_for(lambda: all(key in self.data for key in keys),
                                       timeout.total_seconds()):
                raise TimeoutError(f"wait timeout after {timeout}, keys: {keys}")


@dataclass
class Job:
    """A :class:`JobStore` over a :class:`MemoryStore` (rank 0 'serves' it)."""

    peers: KeyValueStore
    address: str = "memory:0"
    hosted_here: bool = False
    bounds: PeerBounds = QUICK


@dataclass
class Clock:
    """A clock that moves only when the code under test sleeps; ``on_sleep`` runs at
    each sleep (a peer's heartbeat thread, say, in lockstep with this clock)."""

    now: float = 0.0
    slept: list[float] = field(default_factory=list)
    on_sleep: Callable[[], None] | None = None

    def __call__(self) -> float:
        return self.now

    def sleep(self, seconds: float) -> None:
        self.slept.append(seconds)
        self.now += seconds
        if self.on_sleep is not None:
            self.on_sleep()


def peers_of(store: MemoryStore, rank: int, world: int, *, bounds: PeerBounds = QUICK,
             clock: Clock | None = None) -> JobPeers:
    job = Job(store, hosted_here=rank == 0, bounds=bounds)
    if clock is None:
        return JobPeers(job, RankInfo(rank, 0, world), _Quiet())
    return JobPeers(job, RankInfo(rank, 0, world), _Quiet(), clock=clock, sleep=clock.sleep)


class _Quiet:
    """A logger that keeps what it is told."""

    def __init__(self) -> None:
        self.events: list[tuple[str, str, dict[str, Any]]] = []

    def _log(self, level: str) -> Callable[..., None]:
        def log(event: str, **fields: Any) -> None:
            self.events.append((level, event, fields))
        return log

    def __getattr__(self, level: str) -> Callable[..., None]:
        return self._log(level)


@pytest.fixture(autouse=True)
def ranks_as_threads(monkeypatch: pytest.MonkeyPatch) -> None:
    """The ranks of these tests are threads of one process, each with its own run.  A
    process normally holds one run at a time (``ActiveRunError``) because runs share the
    process group, the environment and fd 2; these synthetic steps touch none of that,
    so the one-run guard is lifted here and only here."""
    monkeypatch.setattr(run_module._ACTIVE, "claim", lambda run: None)


def in_threads(world: int, body: Callable[[int], Any]) -> dict[int, Any]:
    """``body(rank)`` on one thread per rank; each result or raised error by rank."""
    results: dict[int, Any] = {}

    def run(rank: int) -> None:
        try:
            results[rank] = body(rank)
        except Exception as exc:
            results[rank] = exc

    threads = [threading.Thread(target=run, args=(rank,)) for rank in range(world)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(WAIT * 2)
    assert not any(thread.is_alive() for thread in threads), "a rank hung"
    return results


def agree_all(plans: list[Any], store: MemoryStore | None = None) -> dict[int, Any]:
    store = MemoryStore() if store is None else store
    world = len(plans)

    def agree(rank: int) -> JobPeers:
        peers = peers_of(store, rank, world)
        peers.start()
        try:
            peers.agree(plans[rank])
        finally:
            peers.stop()
        return peers

    return in_threads(world, agree)


# -- agreement ------------------------------------------------------------------------------

@pytest.mark.parametrize("world", [2, 4])
def test_ranks_with_the_same_plan_agree(world):
    plan = load_plan(["cpu"])
    results = agree_all([plan] * world)
    for peers in results.values():
        assert isinstance(peers, JobPeers), peers
        [agreed] = [e for e in peers.log.events if e[1] == "plan_agreed"]
        assert agreed[2]["world_size"] == world and agreed[2]["fingerprint"] == plan.fingerprint


def test_one_rank_with_a_different_setting_is_named_on_every_rank():
    usual = load_plan(["cpu"])
    other = load_plan(["cpu"], settings={"hicache.host_pool_mb": 128})
    results = agree_all([usual, other, usual, usual])
    for error in results.values():
        assert isinstance(error, PeerError)
        assert error.details == ("hicache.host_pool_mb: 64 on ranks 0,2,3; 128 on rank 1",)
        assert tuple(error.ranks) == (0, 1, 2, 3)
        assert str(error).startswith(
            f"the ranks' plans differ (fingerprints: {usual.fingerprint[:12]} on ranks 0,2,3; "
            f"{other.fingerprint[:12]} on rank 1)")
        assert "initorch run --plan" in (error.hint or "")


def test_a_mismatch_costs_the_watcher_one_manifest_per_plan_not_one_per_rank():
    usual = load_plan(["cpu"])
    other = load_plan(["cpu"], settings={"hicache.host_pool_mb": 128})
    store = CountingMemoryStore()
    plans = [usual] * 12
    plans[3] = plans[9] = other
    results = agree_all(plans, store)
    assert [key for kind, key in store.calls if "plan/" in key and kind != "set"] == \
        ["plan/0,plan/3"]
    for error in results.values():
        assert isinstance(error, PeerError)
        assert error.details == (
            "hicache.host_pool_mb: 64 on ranks 0-2,4-8,10,11; 128 on ranks 3,9",)
        assert tuple(error.ranks) == tuple(range(12))
        assert str(error).startswith(
            f"the ranks' plans differ (fingerprints: {usual.fingerprint[:12]} on ranks "
            f"0-2,4-8,10,11; {other.fingerprint[:12]} on ranks 3,9)")


def test_device_type_steps_and_env_differences_are_each_named():
    cpu, mps = load_plan(["cpu"]), load_plan(["mps"])
    [first, second] = agree_all([cpu, mps]).values()
    assert first.details == second.details
    lines = first.details
    assert lines[0] == "device type: cpu on rank 0; mps on rank 1"
    assert "profiles: base -> cpu on rank 0; base -> mps on rank 1" in lines
    assert any(line.startswith("step mooncake_master: planned (declaration ") and
               line.endswith("on rank 0; skipped on rank 1") for line in lines)
    assert "env MC_FORCE_TCP: 1 on rank 0; (not set) on rank 1" in lines
    assert "mooncake.enabled: true on rank 0; false on rank 1" in lines


def test_a_different_device_index_is_the_same_job():
    results = agree_all([load_plan(["cpu"], device="cpu:0"), load_plan(["cpu"], device="cpu:1")])
    assert all(isinstance(peers, JobPeers) for peers in results.values()), results


def test_a_different_world_size_stops_both_sides_without_waiting_for_the_missing_rank():
    plan = load_plan(["cpu"])
    store = MemoryStore()

    def agree(rank: int) -> None:
        peers = JobPeers(Job(store), RankInfo(rank, 0, 2 if rank == 0 else 3), _Quiet())
        peers.agree(plan)

    results = in_threads(2, agree)
    for error in results.values():
        assert isinstance(error, PeerError)
        assert error.details[0] == "world size: 2 on rank 0; 3 on rank 1"


def test_the_rank_that_finds_the_disagreement_first_waits_until_every_rank_named_it():
    # Under torchrun the first rank to fail makes the agent SIGTERM the others: a rank
    # still sleeping between two polls of the store was ended before it had read the
    # last plan, and its last line said nothing of the setting that differs (issue 27).
    import time

    usual = load_plan(["cpu"])
    other = load_plan(["cpu"], settings={"checks.verify_transfer": True})
    store = MemoryStore()
    waiting = threading.Event()

    def slow_sleep(seconds: float) -> None:  # rank 1 between two polls, for real
        waiting.set()
        time.sleep(0.3)

    late = JobPeers(Job(store), RankInfo(1, 0, 2), _Quiet(), sleep=slow_sleep)
    outcome: dict[str, Any] = {}
    thread = threading.Thread(target=lambda: outcome.setdefault("late", _raised(late, other)))
    thread.start()
    assert waiting.wait(WAIT)  # rank 1 published its plan and sleeps between two polls
    first = peers_of(store, 0, 2)
    with pytest.raises(PeerError) as caught:
        first.agree(usual)
    named_by_rank_1 = [e for e in late.log.events if e[1] == "plan_disagreement"]
    thread.join(WAIT)
    assert named_by_rank_1, "rank 0 left before rank 1 had read its plan"
    for error in (caught.value, outcome["late"]):
        assert isinstance(error, PeerError)
        assert "checks.verify_transfer: false on rank 0; true on rank 1" in error.details


def _raised(peers: JobPeers, plan: Any) -> BaseException | None:
    try:
        peers.agree(plan)
    except PeerError as error:
        return error
    return None


def test_two_processes_claiming_one_rank_are_refused():
    store = MemoryStore()
    plan = load_plan(["cpu"])
    store.add("claim/0", 1)  # an earlier process took rank 0
    with pytest.raises(PeerError, match=r"^rank 0 is claimed by more than one process"):
        peers_of(store, 0, 2).agree(plan)


def test_a_rank_that_never_joins_is_named_after_the_join_bound():
    clock = Clock()
    bounds = PeerBounds(join_s=5, peer_s=60, barrier_s=60)
    store = MemoryStore()
    plan = load_plan(["cpu"])
    joined = peers_of(store, 1, 3)
    published = manifest(plan, RankInfo(1, 0, 3))
    store.set("plan/1", json.dumps(published).encode())
    joined._publish(plan=compared_digest(published))  # as rank 1's agree() does
    waiting = peers_of(store, 0, 3, bounds=bounds, clock=clock)  # rank 2 never starts
    with pytest.raises(PeerError) as caught:
        waiting.agree(plan)
    error = caught.value
    assert str(error) == "rank 2 did not publish its plan within 5s"
    assert error.details == ("rank 2: never joined the job store at memory:0",)
    assert error.ranks == (2,)
    assert clock.now >= 5 and max(clock.slept) <= 0.5  # it kept polling, within its bound


# -- progress, barriers and lost peers ------------------------------------------------------

def test_a_barrier_releases_no_rank_before_every_rank_arrived():
    store = MemoryStore()
    arrived = Recorder()
    gate = threading.Event()

    everyone = [peers_of(store, rank, 3) for rank in range(3)]
    for peers in everyone:
        peers.start()  # all have joined, as after the agreement

    def rank_body(rank: int) -> None:
        peers = everyone[rank]
        if rank == 2:
            gate.wait(WAIT)  # the last rank arrives late
        arrived.start(f"arrive-{rank}")
        arrived.finish(f"arrive-{rank}")
        if rank == 0:
            gate.set()
        peers.barrier("init_torch_distributed")
        arrived.start(f"leave-{rank}")
        arrived.finish(f"leave-{rank}")
        peers.stop()

    results = in_threads(3, rank_body)
    assert all(result is None for result in results.values()), results
    last_arrival = max(arrived.finishes[f"arrive-{rank}"][0] for rank in range(3))
    assert all(arrived.starts[f"leave-{rank}"][0] > last_arrival for rank in range(3))


def test_a_failed_peer_stops_a_barrier_at_once():
    clock = Clock()
    store = MemoryStore()
    waiting = peers_of(store, 0, 2, clock=clock)
    failing = peers_of(store, 1, 2)
    waiting.start()
    failing.start()
    failing.step_started("init_shared_mooncake_transfer_engine")
    failing.step_finished("init_shared_mooncake_transfer_engine", "failed")
    with pytest.raises(PeerError) as caught:
        waiting.barrier("init_torch_distributed")
    assert str(caught.value) == ("rank 1 failed in step init_shared_mooncake_transfer_engine; "
                                 "rank 0 stops too")
    assert caught.value.ranks == (1,)
    assert clock.now < QUICK.peer_s  # it did not wait for a heartbeat to go stale


def test_a_peer_whose_heartbeat_stops_is_lost_after_the_peer_bound_with_its_last_step():
    clock = Clock()
    store = MemoryStore()
    bounds = PeerBounds(join_s=60, peer_s=3, barrier_s=600)
    waiting = peers_of(store, 0, 2, bounds=bounds, clock=clock)
    dead = peers_of(store, 1, 2)
    dead.start()
    dead.stop()  # killed: its heartbeat never moves again
    dead.step_started("load_weights")
    with pytest.raises(PeerError) as caught:
        waiting.barrier("init_torch_distributed")
    message = str(caught.value)
    assert message.startswith("rank 1 stopped answering: its heartbeat has not moved for ")
    assert message.endswith("it was last seen in step load_weights (running); rank 0 stops too")
    assert silence_bound(bounds.peer_s) < clock.now <= bounds.peer_s  # named within peer_s


class DyingStore(MemoryStore):
    """A store whose serving process dies: every call fails once ``dead`` is set, as
    torch's TCPStore client fails when the rank that serves it is killed."""

    dead = False

    def __getattribute__(self, name: str) -> Any:
        if name in ("set", "get", "add", "check", "multi_get", "append", "wait") and \
                object.__getattribute__(self, "dead"):
            raise ConnectionResetError("Connection reset by peer")
        return object.__getattribute__(self, name)


def test_a_store_that_stops_answering_names_the_rank_serving_it_and_its_last_step():
    store = DyingStore()
    clock = Clock()
    waiting = peers_of(store, 1, 2, clock=clock)
    server = peers_of(store, 0, 2)  # hosted_here: it serves the store
    server.start()
    server.step_started("load_weights")

    def die() -> None:
        store.dead = True

    server._refresh()  # the watcher's summary, as its heartbeat thread publishes it
    waiting._refresh()  # read by rank 1's heartbeat thread meanwhile
    clock.on_sleep = die
    with pytest.raises(PeerError) as caught:
        waiting.barrier("init_torch_distributed")
    assert str(caught.value) == (
        "rank 0, which serves the job's store at memory:0, stopped answering: it has likely "
        "died; it was last seen in step load_weights (running); rank 1 stops too")
    assert caught.value.ranks == (0,)
    assert caught.value.details == (
        "the store client said: ConnectionResetError: Connection reset by peer",)
    assert clock.now < QUICK.peer_s  # at once, not after a heartbeat went stale


def test_a_store_lost_before_its_server_was_seen_says_so_without_naming_a_rank():
    store = DyingStore()
    store.dead = True
    with pytest.raises(PeerError) as caught:
        peers_of(store, 1, 2).agree(load_plan(["cpu"]))
    assert str(caught.value) == (
        "the job's store at memory:0 stopped answering: the process that serves it (rank 0, "
        "or the launcher's agent) has likely exited; rank 1 stops too")
    assert caught.value.ranks == ()


def test_a_slow_but_alive_peer_is_waited_for_until_the_barrier_bound():
    store = MemoryStore()
    bounds = PeerBounds(join_s=60, peer_s=3, barrier_s=20)
    slow = peers_of(store, 1, 2)
    slow.step_started("load_weights")
    clock = Clock(on_sleep=slow._publish)  # its heartbeat moves as our time passes
    waiting = peers_of(store, 0, 2, bounds=bounds, clock=clock)
    with pytest.raises(PeerError) as caught:
        waiting.barrier("init_torch_distributed")
    assert str(caught.value).startswith("rank 1 did not reach step init_torch_distributed "
                                        "within 20s")
    assert caught.value.details == ("rank 1: last seen in step load_weights (running)",)


def test_the_rank_that_serves_the_store_leaves_last():
    store = MemoryStore()
    host, other = peers_of(store, 0, 2), peers_of(store, 1, 2)
    host.start()
    other.start()
    left = Recorder()

    def leave_host() -> None:
        host.leave(failed_step=None)
        left.start("host")
        left.finish("host")

    thread = threading.Thread(target=leave_host)
    thread.start()
    left.start("other")
    left.finish("other")
    other.leave(failed_step="rendezvous")
    thread.join(WAIT)
    assert left.starts["host"][0] > left.starts["other"][0]
    assert json.loads(store.data["progress/1"])["failed"] == "rendezvous"


def test_peer_lost_is_logged_by_the_heartbeat_while_the_rank_is_busy():
    store = MemoryStore()
    bounds = PeerBounds(join_s=60, peer_s=0.2, barrier_s=60)
    busy = peers_of(store, 0, 2, bounds=bounds)
    dead = peers_of(store, 1, 2, bounds=bounds)
    dead.step_started("linger")  # published once, never again
    busy.start()
    pause = threading.Event()
    for _ in range(int(WAIT / 0.05)):
        if any(e[1] == "peer_lost" for e in busy.log.events):
            break
        pause.wait(0.05)
    busy.stop()
    [lost] = [e for e in busy.log.events if e[1] == "peer_lost"]
    assert lost[0] == "error" and lost[2]["lost_rank"] == 1
    assert "last seen in step linger (running)" in lost[2]["problem"]


# -- the run: job_store and barrier steps -----------------------------------------------------

def job_step(store: MemoryStore) -> Any:
    return define("join", lambda ctx: Job(store, hosted_here=ctx.rank.rank == 0),
                  job_store=True)


def test_runs_agree_then_hold_a_barrier_step_until_every_rank_finished_its_dependencies(
        tmp_path):
    store = MemoryStore()
    recorder = Recorder()

    def prepare(ctx: StepContext) -> None:
        recorder.start(f"prepare-{ctx.rank.rank}")
        recorder.finish(f"prepare-{ctx.rank.rank}")

    def use(ctx: StepContext) -> None:
        recorder.start(f"use-{ctx.rank.rank}")
        recorder.finish(f"use-{ctx.rank.rank}")

    plan = synthetic_plan([job_step(store), define("prepare", prepare, requires=["join"]),
                           define("use", use, requires=["prepare"], barrier=True)], tmp_path)

    def run_rank(rank: int) -> Run:
        run = Run(plan, rank=RankInfo(rank, 0, 3), heartbeat=None, diagnoses=DIAGNOSES)
        run.start()
        run.teardown()
        return run

    results = in_threads(3, run_rank)
    assert all(run.report.ok for run in results.values()), results
    prepared = max(recorder.finishes[f"prepare-{rank}"][0] for rank in range(3))
    assert min(recorder.starts[f"use-{rank}"][0] for rank in range(3)) > prepared
    assert all(json.loads(store.data[f"progress/{rank}"])["state"] == "exited"
               for rank in range(3))


def test_a_disagreement_fails_the_job_store_step_on_every_rank(tmp_path):
    store = MemoryStore()
    plans = [synthetic_plan([job_step(store), define("after", requires=["join"],
                                                    settings=(FLAG,))], tmp_path,
                            f"config:\n  flag: {str(rank == 1).lower()}\n")
             for rank in range(2)]

    def run_rank(rank: int) -> Run:
        run = Run(plans[rank], rank=RankInfo(rank, 0, 2), heartbeat=None, diagnoses=DIAGNOSES)
        run.start()
        return run

    results = in_threads(2, run_rank)
    for run in results.values():
        [failed] = run.report.failed
        assert failed.name == "join" and isinstance(failed.error, PeerError)
        assert run.report.outcomes["after"].reason == "upstream failed: join"


def test_a_job_store_step_must_return_a_job_store(tmp_path):
    plan = synthetic_plan([define("join", lambda ctx: "no store", job_store=True)], tmp_path)
    run = Run(plan, rank=RankInfo(0, 0, 1), heartbeat=None, diagnoses=DIAGNOSES)
    run.start()
    [failed] = run.report.failed
    assert isinstance(failed.error, TypeError) and "not a JobStore" in str(failed.error)


def test_a_barrier_before_the_job_store_is_joined_is_a_clear_failure(tmp_path):
    plan = synthetic_plan([define("early", barrier=True)], tmp_path)
    run = Run(plan, rank=RankInfo(0, 0, 2), heartbeat=None, diagnoses=DIAGNOSES)
    run.start()
    [failed] = run.report.failed
    assert "has not joined the job's store yet" in str(failed.error)
    alone = Run(plan, rank=RankInfo(0, 0, 1), heartbeat=None, diagnoses=DIAGNOSES)
    assert alone.start().ok  # a world of one has nobody to wait for


def test_a_job_store_step_cannot_also_be_a_barrier():
    from initorch.errors import StepDefinitionError

    with pytest.raises(StepDefinitionError, match="cannot be both job_store and barrier"):
        Registry().steps.add(define("join", job_store=True, barrier=True))


def test_job_store_is_a_protocol_the_memory_job_satisfies():
    assert isinstance(Job(MemoryStore()), JobStore)


# -- rendering ------------------------------------------------------------------------------------

@pytest.mark.parametrize(("ranks", "text"), [
    ([1], "rank 1"), ([0, 2, 3], "ranks 0,2,3"), ([0, 1, 2, 3, 4, 5, 7], "ranks 0-5,7"),
    ([3, 1, 2], "ranks 1-3"), ([0, 1, 4, 5], "ranks 0,1,4,5"), (range(1024), "ranks 0-1023"),
    (range(7, 8), "rank 7"), (range(4, 6), "ranks 4,5")])
def test_rank_lists(ranks, text):
    assert rank_list(ranks) == text


@given(st.sets(st.integers(0, 300), min_size=1))
def test_a_rank_list_names_exactly_its_ranks(ranks):
    named: set[int] = set()
    for part in rank_list(ranks).split(" ", 1)[1].split(","):
        first, _, last = part.partition("-")
        named.update(range(int(first), int(last or first) + 1))
    assert named == ranks
    assert rank_list(range(min(ranks), max(ranks) + 1)) == \
        rank_list(list(range(min(ranks), max(ranks) + 1)))


def test_a_verdict_naming_every_rank_is_read_without_listing_them():
    error = PeerError("the ranks' plans differ", ranks=range(4096), details=["a: 1 on rank 0"])
    read = verdict_error(verdict(error, {}, []))
    assert read is not None and read.ranks == range(4096)  # one run, not 4,096 numbers
    assert (str(read), read.details, len(read.ranks)) == (str(error), error.details, 4096)


def test_many_differences_are_cut_short():
    plan = load_plan(["cpu"])
    base = manifest(plan, RankInfo(0, 0, 2))
    extra = {f"x.k{i:02}": i for i in range(30)}
    other = {**base, "settings": {**base["settings"], **extra},
             "reads": [*base["reads"], *extra]}
    lines = differences({0: base, 1: other})
    assert len(lines) == 21 and lines[-1] == "... and 10 more"
    assert lines[0] == "x.k00: (not declared: a plugin missing there?) on rank 0; 0 on rank 1"


VARIANTS = [manifest(load_plan(["cpu"], **changes), RankInfo(0, 0, 2)) for changes in (
    {}, {"settings": {"hicache.host_pool_mb": 128}}, {"device": "cpu:1"})] + [
    manifest(load_plan(["mps"]), RankInfo(0, 0, 2))]


@settings(max_examples=60, deadline=None)
@given(st.lists(st.sampled_from(range(len(VARIANTS))), min_size=2, max_size=40))
def test_one_manifest_per_plan_key_explains_every_rank_as_all_of_them_do(chosen):
    """What the watcher says from one manifest per plan key is what N manifests say."""
    everyone = {rank: VARIANTS[variant] for rank, variant in enumerate(chosen)}
    by_key: dict[str, list[int]] = {}
    for rank, m in everyone.items():
        by_key.setdefault(plan_key(m), []).append(rank)
    sharing = {ranks[0]: ranks for ranks in by_key.values()}
    grouped = disagreement({rank: everyone[rank] for rank in sharing}, sharing)
    whole = disagreement(everyone)
    if whole is None:
        assert grouped is None
    else:
        assert grouped is not None
        assert (str(grouped), grouped.ranks, grouped.details) == \
            (str(whole), whole.ranks, whole.details)


# -- what the agreement covers: the settings the plan reads (issue 19) ------------------------

BANNER = setting("acme.banner", str, default="hello", description="an unrelated plugin's")


def with_banner_plugin(*, planned: bool) -> Any:
    """The cpu plan with an unrelated plugin installed: its step declares a setting, and
    is planned only when asked for."""
    import warnings

    registry = Registry.with_plugins()
    registry.steps.add(define("acme_banner", settings=(BANNER,)))
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # the step nothing pulls in, when not asked for
        return load_plan(["cpu"], registry=registry, steps=["acme_banner"] if planned else [])


def test_a_setting_no_planned_step_reads_changes_neither_fingerprint_nor_agreement():
    plain, with_plugin = load_plan(["cpu"]), with_banner_plugin(planned=False)
    assert "acme.banner" in with_plugin.settings
    assert with_plugin.fingerprint == plain.fingerprint
    results = agree_all([plain, with_plugin])
    assert all(isinstance(peers, JobPeers) for peers in results.values()), results


def test_a_plugin_planned_on_one_rank_only_is_named_with_its_setting():
    [first, _] = agree_all([with_banner_plugin(planned=True), load_plan(["cpu"])]).values()
    assert "step acme_banner: planned (declaration " in first.details[0]
    assert ("acme.banner: hello on rank 0; (not declared: a plugin missing there?) on rank 1"
            in first.details)


# -- store traffic: linear in the ranks (issue 30) --------------------------------------------

class CountingMemoryStore(MemoryStore):
    """A :class:`MemoryStore` that counts the calls made to it, by kind and key."""

    def __init__(self) -> None:
        super().__init__()
        self.calls: list[tuple[str, str]] = []

    def __getattribute__(self, name: str) -> Any:
        found = object.__getattribute__(self, name)
        if name in ("set", "get", "add", "check", "multi_get", "append", "wait"):
            calls = object.__getattribute__(self, "calls")

            def counted(first: Any, *rest: Any) -> Any:
                calls.append((name, first if isinstance(first, str) else ",".join(first)))
                return found(first, *rest)
            return counted
        return found


def joined_job(world: int, store: MemoryStore, clock: Clock | None = None) -> list[JobPeers]:
    """``world`` ranks that have agreed (one plan), their heartbeats then driven by hand;
    ``clock`` (standing still while they agree, in real time) judges them."""
    import time

    plan = load_plan(["cpu"])
    everyone = [JobPeers(Job(store, hosted_here=rank == 0), RankInfo(rank, 0, world), _Quiet(),
                         clock=clock or time.monotonic, sleep=time.sleep)
                for rank in range(world)]
    for peers in everyone:
        peers._publish()
    results = in_threads(world, lambda rank: everyone[rank].agree(plan))
    assert all(result is None for result in results.values()), results
    return everyone


def one_beat(everyone: list[JobPeers]) -> None:
    """What each rank's heartbeat thread does once: publish, then read the job."""
    for peers in everyone:
        peers._publish()
        peers._refresh()


def test_a_beat_of_the_whole_job_costs_two_store_calls_per_rank():
    store = CountingMemoryStore()
    world = 64
    everyone = joined_job(world, store)
    one_beat(everyone)  # every rank has seen the summary once
    store.calls.clear()
    one_beat(everyone)
    kinds = [kind for kind, _ in store.calls]
    # each rank writes its progress; the others read the summary; the watcher reads
    # every progress in one call and writes the summary
    assert len(kinds) == 2 * world + 1
    assert kinds.count("multi_get") == 1 and kinds.count("get") == world - 1
    assert all(key == "summary" for kind, key in store.calls if kind == "get")


def test_agreeing_ranks_never_read_each_others_plans():
    store = CountingMemoryStore()
    joined_job(16, store)
    assert not [key for kind, key in store.calls if "plan/" in key and kind != "set"]


def test_the_summary_stays_small_when_many_ranks_are_lost_and_names_the_first():
    clock = Clock()
    store = MemoryStore()
    world = 200
    everyone = joined_job(world, store, clock)
    one_beat(everyone)
    everyone[0]._refresh()  # the watcher has read every rank's last beat
    alive = everyone[:100]  # ranks 100-199 die: their heartbeat stops
    clock.now += silence_bound(QUICK.peer_s) + 1
    one_beat(alive)
    clock.now += 1
    one_beat(alive)
    assert len(store.data["summary"]) < 4096
    [lost_on_1] = [everyone[1].broken_off()]
    assert lost_on_1 is not None
    assert str(lost_on_1).startswith("rank 100 stopped answering: its heartbeat has not moved")
    assert lost_on_1.ranks == tuple(range(100, 116))
    assert lost_on_1.details[-1] == "... and 84 more ranks"
    assert everyone[0].broken_off().ranks == tuple(range(100, 116))  # listed alike


def test_a_watcher_whose_summary_stops_moving_is_named_by_every_other_rank():
    clock = Clock()
    store = MemoryStore()
    everyone = joined_job(4, store, clock)
    everyone[0].step_started("serve")
    one_beat(everyone)
    clock.now += silence_bound(QUICK.peer_s) + 1  # rank 0 is killed: nothing moves
    one_beat(everyone[1:])
    for peers in everyone[1:]:
        error = peers.broken_off()
        assert error is not None and error.ranks == (0,)
        assert str(error).startswith("rank 0 stopped answering: its heartbeat has not moved")
        assert "it was last seen in step serve (running)" in str(error)


def test_a_rank_waiting_for_the_verdict_reads_the_store_once_per_beat_not_per_poll():
    # Polling the summary every 0.02-0.5 s while waiting for the slowest rank made the
    # store calls to agree grow with how long the job took to gather: here rank 1 waits
    # a second for rank 0, over which it polled six times; its heartbeat thread now waits
    # for the verdict on the store instead, one call per beat (2 s here).
    import time

    store = CountingMemoryStore()
    plan = load_plan(["cpu"])
    early, watcher = peers_of(store, 1, 2), peers_of(store, 0, 2)
    early.start()
    thread = threading.Thread(target=early.agree, args=(plan,))
    thread.start()
    published = threading.Event()
    while not published.wait(0.01):
        if "plan/1" in store.data:
            published.set()
    time.sleep(1.0)  # rank 0 is slow to publish its plan
    watcher.start()
    watcher.agree(plan)
    thread.join(WAIT)
    for peers in (early, watcher):
        peers.stop()
    assert any(e[1] == "plan_agreed" for e in early.log.events)
    reads = [call for call in store.calls if call in (("get", "summary"), ("check", "summary"),
                                                       ("wait", "agreement"))]
    assert ("wait", "agreement") in reads and len(reads) <= 3, reads


# -- waits end when the last rank writes its key, not at the next poll (issue 26) -------------

class WaitOutcomes(CountingMemoryStore):
    """Also keeps how each ``wait`` ended (``(keys, "written")`` when the keys came,
    ``(keys, "timeout")`` when its timeout ran out first) and what each ``check`` said
    (``(keys, True)`` once they are all written)."""

    def __init__(self) -> None:
        super().__init__()
        self.outcomes: list[tuple[str, str]] = []
        self.checks: list[tuple[str, bool]] = []

    def wait(self, keys: list[str], timeout: timedelta) -> None:
        try:
            super().wait(keys, timeout)
        except TimeoutError:
            self.outcomes.append((",".join(keys), "timeout"))
            raise
        self.outcomes.append((",".join(keys), "written"))

    def check(self, keys: list[str]) -> bool:
        found = super().check(keys)
        self.checks.append((",".join(keys), found))
        return found


def _late(peers: JobPeers, action: Callable[[], None], after: str, store: MemoryStore) -> None:
    """Start ``peers`` and run ``action`` on it once ``after`` is in the store, plus
    half a second: the other rank is waiting by then, between two of its looks."""
    import time

    while after not in store.data:
        time.sleep(0.005)
    time.sleep(0.5)
    peers.start()
    action()


def test_the_watcher_learns_the_last_plan_from_its_key_not_at_its_next_poll():
    # The watcher read the plans on a backoff of 20 ms to 0.5 s: a rank whose plan came
    # just after a look was judged up to 0.5 s late (0.16-0.3 s in SGLang's drive mode
    # at tp=2).  Between two looks it now checks the key that the last other rank to
    # publish its plan writes ("planned/all": one key, whatever the job's size) every
    # 10 ms, and reads the job as soon as it is written.  It never waits on the store:
    # torch's client warns twice on stderr for every wait that times out.
    store = WaitOutcomes()
    plan = load_plan(["cpu"])
    watcher, late = peers_of(store, 0, 2), peers_of(store, 1, 2)
    watcher.start()
    thread = threading.Thread(target=_late, args=(late, lambda: late.agree(plan), "plan/0",
                                                  store))
    thread.start()
    watcher.agree(plan)
    thread.join(WAIT)
    for peers in (watcher, late):
        peers.stop()
    assert any(e[1] == "plan_agreed" for e in late.log.events)
    planned = [found for keys, found in store.checks if keys == "planned/all"]
    assert planned[-1] is True and planned.count(False) > 10, planned  # checked often
    assert "planned/all" not in [keys for keys, _ in store.outcomes]


BARRIER = "barrier/init_torch_distributed"


def barrier_with_a_late_rank(waiting_rank: int) -> WaitOutcomes:
    """Rank ``waiting_rank`` of two at a barrier that the other rank reaches half a
    second later; the store, with how its waits ended."""
    store = WaitOutcomes()
    waiting, last = peers_of(store, waiting_rank, 2), peers_of(store, 1 - waiting_rank, 2)
    waiting.start()
    thread = threading.Thread(target=_late, args=(
        last, lambda: last.barrier("init_torch_distributed"), BARRIER, store))
    thread.start()
    waiting.barrier("init_torch_distributed")
    thread.join(WAIT)
    for peers in (waiting, last):
        peers.stop()
    return store


def test_a_rank_at_a_barrier_is_woken_by_the_last_arrival_and_polls_nothing():
    # A barrier polled its counter, and the watcher's summary, every 20 ms to 0.5 s:
    # the last rank's arrival was seen up to 0.5 s late, and each waiting rank read the
    # store twice per look.  The last rank now writes "all arrived", which the others'
    # heartbeat threads (the watcher itself, between its looks) wait for.
    store = barrier_with_a_late_rank(1)
    assert store.outcomes[-1] == (f"{BARRIER}/all", "written"), store.outcomes
    assert ("add", BARRIER) in store.calls
    polls = [call for call in store.calls if call in (("add", BARRIER), ("check", "summary"))]
    assert len(polls) <= 4, polls  # two arrivals, and a read of the job per beat at most


def test_the_watcher_at_a_barrier_checks_for_the_last_arrival_between_its_looks():
    store = barrier_with_a_late_rank(0)
    everyone = f"{BARRIER}/all"
    checks = [found for keys, found in store.checks if keys == everyone]
    assert checks[-1] is True and checks.count(False) > 10, checks
    assert everyone not in [keys for keys, _ in store.outcomes]  # no wait, no warning
