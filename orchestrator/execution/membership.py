"""This rank's membership of its job, owned by its run: the one place the peers live.

A run joins its job when the step that joins the job's store (``job_store=True``,
the rendezvous) returns, and leaves it just before that step's teardown closes the
store.  In between, :class:`JobMembership` holds the run's one
:class:`~initorch.execution.peers.JobPeers` and is everything the rest of the run
asks of the job: the run's state tells it each step's output and asks it to hold
barriers and which peers are gone; the run publishes progress through it and asks
it what ends the wait for a barrier step; the report gets the peers it lost.
Before the job is joined, and once it is left, every question has the answer of a
rank that is in no job.  How the peers agree, beat and wait is
:mod:`initorch.execution.peers`'s business, not this module's.
"""

from __future__ import annotations

import threading
from collections.abc import Callable, Iterable
from typing import Any

from initorch.errors import PeerError
from initorch.execution.launchers import RankInfo
from initorch.execution.peers import JobPeers, JobStore
from initorch.reporting.report import RunReport
from initorch.resolution.plan import Plan, PlannedStep


class JobMembership:
    """This rank's membership of the job of one run; thread-safe.

    Implements :class:`~initorch.execution.context.Job` for the run's state.
    ``report`` is the run's: leaving names its first failed step to the other ranks,
    and the peers found lost are added to its ``peers_lost``.
    """

    def __init__(self, plan: Plan, rank: RankInfo, log: Any, report: RunReport) -> None:
        self._plan = plan
        self._rank = rank
        self._log = log
        self._report = report
        self._lock = threading.Lock()
        self._peers: JobPeers | None = None

    @property
    def joined(self) -> bool:
        """Whether this rank is in the job now: joined, and not left yet."""
        return self._peers is not None

    def recorded(self, step: str, output: Any) -> None:
        """``step`` returned ``output``: if ``step`` joins the job's store, join the job
        (keep a heartbeat there and agree on the plan with every rank).  What this
        raises fails ``step``: the output is not a :class:`JobStore`, or the ranks
        disagree (after telling the others)."""
        if step not in self._plan or not self._plan.step(step).step.job_store:
            return
        if not isinstance(output, JobStore):
            raise TypeError(f"step '{step}' declares job_store but returned {output!r}, not a "
                            "JobStore (peers, address, hosted_here, bounds)")
        peers = JobPeers(output, self._rank, self._log)
        peers.start()
        try:
            peers.agree(self._plan)
        except BaseException:
            peers.leave(failed_step=step)
            raise
        with self._lock:
            self._peers = peers

    # -- while in the job ------------------------------------------------------------

    def step_started(self, step: str) -> None:
        """Tell the other ranks that this one is running ``step``."""
        peers = self._peers
        if peers is not None:
            peers.step_started(step)

    def step_finished(self, step: str, status: str) -> None:
        """Tell the other ranks how ``step`` ended here (once joined: the step that
        joins the job says so too)."""
        peers = self._peers
        if peers is not None:
            peers.step_finished(step, status)

    def barrier(self, step: str) -> bool:
        """Return once every rank has reached ``step``; ``False`` at once when this
        rank is in no job, and so has nobody to wait with."""
        peers = self._peers
        if peers is None:
            return False
        peers.barrier(step)
        return True

    def give_up_for(self, planned: PlannedStep) -> Callable[[], PeerError | None] | None:
        """What ends the wait for ``planned`` once a peer died or failed meanwhile
        (:data:`~initorch.execution.invoke.GiveUp`: asked often while the step runs,
        it costs no store call), for a barrier step (the process group forming, a
        collective) in a job of several ranks; ``None`` for any other step.  Inside
        torch's own wait nothing else would end it before ``distributed.timeout_s``."""
        peers = self._peers
        if not planned.step.barrier or peers is None or self._rank.world_size == 1:
            return None
        return peers.broken_off

    def gone(self, ranks: Iterable[int]) -> dict[int, str]:
        """Those of ``ranks`` known to be gone from the job, with what this rank saw;
        ``{}`` outside the job."""
        peers = self._peers
        return {} if peers is None else peers.gone(ranks)

    def note_lost(self) -> None:
        """Keep in the report the peers found lost so far (during start-up, or while
        teardown waited), so that the run does not pass for the job's success."""
        peers = self._peers
        if peers is not None:
            self._report.peers_lost.update(peers.lost())

    # -- leaving -----------------------------------------------------------------------

    def undoing(self, step: str) -> None:
        """``step`` is about to be torn down: if it joined the job, leave the job first,
        while its store is still there for the others to read that this rank left."""
        if self._plan.step(step).step.job_store:
            self.leave()

    def leave(self) -> None:
        """Say that this rank is done with the job, naming its first failed step, if
        any; the peers lost meanwhile go to the report.  Once only."""
        with self._lock:
            peers, self._peers = self._peers, None
        if peers is None:
            return
        failed = self._report.failed
        peers.leave(failed_step=failed[0].name if failed else None)
        self._report.peers_lost.update(peers.lost())
