"""What one rank knows of a peer: alive, absent, failed, exited or lost, in words.

Kept apart from :mod:`initorch.execution.peers` (which talks to the job's store) so that
the watcher (:mod:`initorch.execution.watch`), the ranks that read its summary and the
waits that stop on a broken peer all judge and word a peer the same way.  Liveness is
judged on the judging rank's own clock (how long since a peer's heartbeat last moved),
never by comparing clocks across hosts.
"""

from __future__ import annotations

from dataclasses import field
from typing import Any

from initorch.errors import PeerError
from initorch.records import record


@record
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

    def to_dict(self) -> dict[str, Any]:
        return {"rank": self.rank, "kind": self.kind, "text": self.text, "failed": self.failed}

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> PeerState:
        return cls(int(data["rank"]), str(data["kind"]), str(data["text"]),
                   bool(data.get("failed")))


@record(frozen=False)
class Seen:
    """What this rank last saw of a peer's heartbeat, and since when (this rank's
    monotonic clock): the beat counter ``beat`` has not moved since ``since``."""

    progress: dict[str, Any] = field(default_factory=dict)
    beat: Any = None
    since: float = 0.0

    def saw(self, progress: dict[str, Any], beat: Any, now: float) -> None:
        """Record a reading; the clock restarts only when the beat moved."""
        self.progress = progress
        if beat != self.beat:
            self.beat, self.since = beat, now


def state_of(rank: int, progress: dict[str, Any], still_for: float, silence_s: float
             ) -> PeerState:
    """A peer's state from its published progress and how long its heartbeat has been
    still; ``silence_s`` is how long a heartbeat may stay still before the peer is lost."""
    state, step = progress.get("state"), progress.get("step")
    if state == "exited":
        failed = progress.get("failed")
        left = f" (its start-up failed in step {failed})" if failed else ""
        return PeerState(rank, "exited", f"rank {rank} has left the job{left}",
                         failed=bool(failed))
    if state == "failed":
        return PeerState(rank, "failed", f"rank {rank} failed in step {step}")
    if still_for > silence_s:
        return PeerState(rank, "lost", f"rank {rank} stopped answering: its heartbeat has not "
                                       f"moved for {still_for:.0f}s; it was last seen "
                                       f"{where(progress)}")
    return PeerState(rank, "alive", f"rank {rank} is {where(progress)}")


def where(progress: dict[str, Any]) -> str:
    """Where a peer was last seen, from its progress: ``in step X (running)``."""
    step, state = progress.get("step"), progress.get("state")
    if step is None:
        return "joining the job"
    return f"in step {step} ({state})"


CAUSE_FIRST = {"lost": 0, "exited": 1, "failed": 2, "absent": 3}


def first_causes(states: list[PeerState]) -> list[PeerState]:
    """``states`` with the likeliest cause first: a rank that died before ranks that
    left, before ranks that failed waiting for it; by rank within a kind."""
    return sorted(states, key=lambda s: (CAUSE_FIRST[s.kind], s.rank))


def stopped_peers(problems: list[PeerState], rank: int, more: int = 0) -> PeerError:
    """One error for the peers that stopped, the likeliest cause first; ``more`` peers
    stopped too but are not listed (a summary lists a bounded number)."""
    first, *rest = first_causes(problems)
    details = [s.text for s in rest]
    if more:
        details.append(f"... and {more} more {'rank' if more == 1 else 'ranks'}")
    return PeerError(f"{first.text}; rank {rank} stops too",
                     ranks=sorted(s.rank for s in problems), details=details,
                     hint="the first error in that rank's log is the cause")
