"""One rank watches every heartbeat; the others read its summary, of bounded size.

Every rank publishes its progress (step, state, heartbeat counter) under its own key.
If every rank read every other rank's progress each beat, a job of N ranks would load
its one store with N² reads per beat.  Instead the watcher (rank 0) reads all N keys
in one ``multi_get``, judges each rank's liveness on its own clock, and publishes a
**summary** under one key; every other rank reads that one key.  Per beat the store
serves N writes, N reads of the summary and the watcher's one read of N values: O(N)
operations and bytes, since the summary does not list the ranks that are well -- only
a bounded number of those that stopped (:data:`LISTED`, with how many in all) and,
while ranks are still expected somewhere (their plan, a barrier), a bounded sample of
those not there yet.

The others judge the watcher by the summary itself: its beat moves each time it is
published, so a watcher that dies is named, like any rank, once its summary has been
still for the silence bound (:func:`~initorch.execution.liveness.silence_bound`).
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Mapping
from dataclasses import field
from typing import Any

from initorch.execution.peer_states import PeerState, first_causes, where
from initorch.records import record

WATCHER = 0
SUMMARY_KEY = "summary"
LISTED = 16
"""The stopped ranks, and the ranks not yet at a point, that a summary lists by rank:
enough to name the cause of a failure, few enough that N ranks reading the summary
every beat stays O(N) in bytes even when a whole node is lost."""

PLAN = "plan"  # the point every rank reaches by publishing its plan


def progress_key(rank: int) -> str:
    return f"progress/{rank}"


@record
class Behind:
    """The ranks not yet at a point (their plan published, a barrier reached): up to
    :data:`LISTED` of them by rank, each with where it was last seen (``None``: it
    never published anything), and how many in all."""

    ranks: tuple[int, ...]
    seen: tuple[str | None, ...]
    count: int


@record
class View:
    """What a rank knows of the job after one read: ``beat`` of the summary (``None``
    before the watcher published one), the peers that stopped (all of them on the
    watcher, the first :data:`LISTED` elsewhere; ``stopped_count`` counts them all),
    who is behind at each point, and whether the plans were judged (``verdict``)."""

    beat: int | None = None
    stopped: tuple[PeerState, ...] = ()
    stopped_count: int = 0
    behind: Mapping[str, Behind] = field(default_factory=dict)
    verdict: str | None = None

    @property
    def unlisted(self) -> int:
        return self.stopped_count - len(self.stopped)


def behind(progresses: Mapping[int, dict[str, Any] | None], points: Iterable[str]
           ) -> dict[str, Behind]:
    """For each point, the ranks not there yet (``None`` progress: never published),
    all of them; :func:`summary` lists only the first :data:`LISTED`."""
    found: dict[str, Behind] = {}
    for point in points:
        late = [rank for rank, progress in sorted(progresses.items())
                if not _reached(progress, point)]
        if late:
            found[point] = Behind(tuple(late), tuple(_seen(progresses[r]) for r in late),
                                  len(late))
    return found


def barrier_points(progresses: Iterable[dict[str, Any] | None]) -> list[str]:
    """The barriers any rank has reached, in order of first mention."""
    points: dict[str, None] = {}
    for progress in progresses:
        if progress is not None:
            points.update(dict.fromkeys(progress.get("arrived", ())))
    return list(points)


def _reached(progress: dict[str, Any] | None, point: str) -> bool:
    if progress is None:
        return False
    if point == PLAN:
        return progress.get(PLAN) is not None
    return point in progress.get("arrived", ())


def _seen(progress: dict[str, Any] | None) -> str | None:
    return None if progress is None else where(progress)


def summary(beat: int, watcher: dict[str, Any], stopped: list[PeerState],
            late: Mapping[str, Behind], verdict: str | None) -> bytes:
    """The summary the watcher publishes: bounded whatever the size of the job."""
    listed = first_causes(stopped)[:LISTED]
    return json.dumps({
        "beat": beat, "watcher": watcher, "verdict": verdict,
        "stopped": [s.to_dict() for s in listed], "stopped_count": len(stopped),
        "behind": {point: {"ranks": list(b.ranks[:LISTED]), "seen": list(b.seen[:LISTED]),
                           "count": b.count} for point, b in late.items()},
    }, separators=(",", ":")).encode()


@record
class Summary:
    """A summary as a reader decodes it: the watcher's own progress, and the rest."""

    beat: int
    watcher: dict[str, Any]
    stopped: tuple[PeerState, ...]
    stopped_count: int
    behind: dict[str, Behind]
    verdict: str | None

    @classmethod
    def decode(cls, raw: bytes) -> Summary:
        data = json.loads(raw)
        return cls(int(data["beat"]), dict(data["watcher"]),
                   tuple(PeerState.from_dict(s) for s in data["stopped"]),
                   int(data["stopped_count"]),
                   {point: Behind(tuple(b["ranks"]), tuple(b["seen"]), int(b["count"]))
                    for point, b in data["behind"].items()},
                   data["verdict"])
