"""A rank's membership of its job: joined by the rendezvous step's output, the one
holder of the peers, left before that step's teardown.

The job's store is torch's own ``TCPStore`` on loopback (as the ``rendezvous`` step
makes it), and each rank a thread; how the peers agree and wait is
``test_peers.py``'s.
"""

from __future__ import annotations

import dataclasses
import datetime
import json
import threading
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any, TypeVar

import pytest

from initorch import RankInfo
from initorch.errors import PeerError, StepError
from initorch.execution.context import RunState
from initorch.execution.membership import JobMembership
from initorch.execution.peers import JobPeers
from initorch.plugin import PeerBounds
from initorch.reporting.logs import get_logger
from initorch.reporting.report import RunReport, StepOutcome
from initorch.resolution.plan import Plan
from tests.support.runs import WAIT
from tests.support.synthetic import FLAG, define, synthetic_plan

torch_distributed = pytest.importorskip("torch.distributed")

BOUNDS = PeerBounds(join_s=WAIT, peer_s=WAIT, barrier_s=WAIT)
T = TypeVar("T")


@dataclass(frozen=True)
class TcpJob:
    """A ``JobStore`` over torch's TCPStore, keys under the job's name, as the
    ``rendezvous`` step returns it."""

    peers: Any
    address: str
    hosted_here: bool
    bounds: PeerBounds = BOUNDS


@pytest.fixture
def served() -> Iterator[Callable[[int], TcpJob]]:
    """A TCPStore served here for the test's job; ``join(rank)`` connects a rank to it
    (rank 0 through the serving connection, as in the process that serves it)."""
    server = torch_distributed.TCPStore("127.0.0.1", 0, is_master=True, wait_for_workers=False,
                                        timeout=datetime.timedelta(seconds=WAIT))
    address = f"127.0.0.1:{server.port}"

    def join(rank: int) -> TcpJob:
        store = server if rank == 0 else torch_distributed.TCPStore(
            "127.0.0.1", server.port, is_master=False, wait_for_workers=False,
            timeout=datetime.timedelta(seconds=WAIT))
        return TcpJob(torch_distributed.PrefixStore("job", store), address, rank == 0)

    yield join


def job_plan(tmp_path: Path, yaml: str = "") -> Plan:
    return synthetic_plan([define("join", job_store=True),
                           define("work", requires=["join"], settings=(FLAG,)),
                           define("meet", requires=["work"], barrier=True)], tmp_path, yaml)


def report_of(plan: Plan, rank: int = 0) -> RunReport:
    return RunReport(plan, "sequential", rank, {name: StepOutcome(name) for name in plan.order},
                     started_at="")


def membership(plan: Plan, rank: int, world: int, report: RunReport | None = None
               ) -> JobMembership:
    return JobMembership(plan, RankInfo(rank, 0, world), get_logger(rank=rank),
                         report or report_of(plan, rank))


def in_threads(count: int, body: Callable[[int], T]) -> dict[int, T | BaseException]:
    """``body(rank)`` for each rank on a thread of its own: what each returned or raised."""
    results: dict[int, T | BaseException] = {}

    def target(rank: int) -> None:
        try:
            results[rank] = body(rank)
        except BaseException as exc:  # handed to the test
            results[rank] = exc

    threads = [threading.Thread(target=target, args=(rank,)) for rank in range(count)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(WAIT)
    assert not any(thread.is_alive() for thread in threads)
    return results


def progress(job: TcpJob, rank: int) -> dict[str, Any]:
    return json.loads(job.peers.get(f"progress/{rank}"))


def test_outside_a_job_every_question_has_the_answer_of_a_rank_in_none(tmp_path):
    plan = job_plan(tmp_path)
    member = membership(plan, 0, 2)
    member.recorded("work", "not a job")  # only the job_store step's output joins
    member.step_started("work")
    member.step_finished("work", "succeeded")
    member.note_lost()
    member.undoing("join")
    assert not member.joined
    assert member.barrier("meet") is False
    assert member.gone([1]) == {}
    assert member.give_up_for(plan.step("meet")) is None


def test_the_job_store_steps_output_must_be_a_job_store(tmp_path):
    member = membership(job_plan(tmp_path), 0, 1)
    with pytest.raises(TypeError, match="declares job_store but returned 'a string'"):
        member.recorded("join", "a string")
    assert not member.joined


def test_joined_ranks_hold_barriers_publish_progress_and_leave_before_the_store_goes(
        tmp_path, served):
    plan = job_plan(tmp_path)
    jobs = {rank: served(rank) for rank in range(2)}
    members = {rank: membership(plan, rank, 2) for rank in range(2)}

    def join_and_meet(rank: int) -> bool:
        members[rank].recorded("join", jobs[rank])
        members[rank].step_started("meet")
        return members[rank].barrier("meet")

    assert in_threads(2, join_and_meet) == {0: True, 1: True}
    member = members[1]
    assert member.joined
    assert progress(jobs[1], 1)["step"] == "meet"
    assert member.give_up_for(plan.step("work")) is None  # not a barrier step
    give_up = member.give_up_for(plan.step("meet"))
    assert give_up is not None and give_up() is None  # nobody broke off
    member.undoing("work")  # only the step that joined the job leaves it
    assert member.joined

    in_threads(2, lambda rank: members[rank].undoing("join"))
    assert not any(m.joined for m in members.values())
    assert progress(jobs[0], 1)["state"] == "exited"
    assert members[0].barrier("meet") is False  # left: in no job any more


def test_a_disagreement_fails_the_joining_step_and_leaves_the_job(tmp_path, served):
    for rank in range(2):
        (tmp_path / str(rank)).mkdir()
    plans = [job_plan(tmp_path / str(rank), f"config:\n  flag: {str(rank == 1).lower()}\n")
             for rank in range(2)]
    jobs = {rank: served(rank) for rank in range(2)}
    members = {rank: membership(plans[rank], rank, 2) for rank in range(2)}

    results = in_threads(2, lambda rank: members[rank].recorded("join", jobs[rank]))
    assert all(isinstance(error, PeerError) for error in results.values()), results
    assert not any(m.joined for m in members.values())
    left = progress(jobs[0], 1)
    assert (left["state"], left["failed"]) == ("exited", "join")


def test_leaving_names_the_first_failed_step_once(tmp_path, served):
    plan = job_plan(tmp_path)
    job = served(0)
    report = report_of(plan)
    member = membership(plan, 0, 1, report)
    member.recorded("join", job)
    report.outcomes["work"].status = "failed"
    member.leave()
    assert progress(job, 0)["failed"] == "work"
    report.outcomes["work"].status = "succeeded"
    member.leave()  # once only: nothing is published again
    assert progress(job, 0)["failed"] == "work"


def test_a_peer_whose_heartbeat_stopped_is_in_the_report(tmp_path, served):
    plan = job_plan(tmp_path)
    quick = PeerBounds(join_s=WAIT, peer_s=0.2, barrier_s=WAIT)
    jobs = {rank: dataclasses.replace(served(rank), bounds=quick) for rank in range(2)}
    report = report_of(plan)
    watcher = membership(plan, 0, 2, report)
    silent = JobPeers(jobs[1], RankInfo(1, 0, 2), get_logger(rank=1))

    def join(rank: int) -> None:
        if rank == 0:
            watcher.recorded("join", jobs[0])
        else:
            silent.start()
            silent.agree(plan)

    in_threads(2, join)
    silent.stop()  # as if killed: its progress stays, its heartbeat stops
    pause = threading.Event()
    for _ in range(int(WAIT / 0.05)):
        watcher.note_lost()
        if report.peers_lost:
            break
        pause.wait(0.05)
    assert list(report.peers_lost) == [1]
    watcher.leave()  # a lost peer is not waited for
    assert not watcher.joined


class Recorded:
    """A :class:`Job` that records what the run's state tells it."""

    def __init__(self, fail_on: str = "") -> None:
        self.told: list[tuple[str, Any]] = []
        self.fail_on = fail_on
        self.in_job = False

    def recorded(self, step: str, output: Any) -> None:
        self.told.append((step, output))
        if step == self.fail_on:
            raise PeerError("the ranks disagree")

    def barrier(self, step: str) -> bool:
        return self.in_job

    def gone(self, ranks: Any) -> dict[int, str]:
        return {}


def test_the_state_tells_its_job_each_output_before_recording_it(tmp_path):
    plan = job_plan(tmp_path)
    job = Recorded(fail_on="join")
    state = RunState(plan, RankInfo(0, 0, 2), job=job)
    state.record_output("work", 1, binds_device=False)
    with pytest.raises(PeerError):
        state.record_output("join", "store", binds_device=False)
    assert job.told == [("work", 1), ("join", "store")]
    assert state.has_output("work") and not state.has_output("join")


def test_a_barrier_outside_the_job_is_refused_only_where_there_are_peers(tmp_path):
    plan = job_plan(tmp_path)
    job = Recorded()
    with pytest.raises(StepError, match="has not joined the job's store yet"):
        RunState(plan, RankInfo(0, 0, 2), job=job).wait_for_peers("meet")
    with pytest.raises(StepError, match="has not joined the job's store yet"):
        RunState(plan, RankInfo(0, 0, 2)).wait_for_peers("meet")
    RunState(plan, RankInfo(0, 0, 1), job=job).wait_for_peers("meet")  # nobody to wait for
    job.in_job = True
    RunState(plan, RankInfo(0, 0, 2), job=job).wait_for_peers("meet")
