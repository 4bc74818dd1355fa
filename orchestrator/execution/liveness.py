"""How fast ranks can tell each other that they are alive, and so how short a wait for
a silent peer can be.

Kept apart from :mod:`initorch.execution.peers` (which needs the plan agreement and
threads) so that the settings that bound those waits can be declared from these
numbers without loading the run-time half of the package in a dry run.
"""

from __future__ import annotations

MIN_BEAT_S = 0.05
"""The shortest interval at which a rank moves its heartbeat in the job's store: each
beat is a store write, and faster beats only load the store."""

BEATS_PER_PEER_TIMEOUT = 6
"""A rank beats this many times within ``distributed.peer_timeout_s``, so that one late
beat (a busy store, a paused process) never makes a healthy peer count as lost."""

MAX_BEAT_S = 2.0
"""The longest interval between beats, however long the peer timeout."""

MIN_PEER_TIMEOUT_S = round(MIN_BEAT_S * BEATS_PER_PEER_TIMEOUT, 6)
"""The shortest ``distributed.peer_timeout_s`` the heartbeat can meet: below it a peer's
heartbeat cannot move often enough, and healthy ranks would be named as dead."""


WAIT_LOG_S = 5.0
"""How often a rank that waits for its peers (or for the job's store) says what it waits
for: which ranks, at which store, for how much longer.  A wait that only says "still
running" looks like a hung process."""


READS_PER_BEAT = 2
"""The watcher (rank 0) reads every rank's heartbeat this many times per beat, and
publishes its summary each time; the other ranks read the summary once per beat."""


def beat_interval(peer_timeout_s: float) -> float:
    """How often a rank moves its heartbeat for a given peer timeout."""
    return min(max(peer_timeout_s / BEATS_PER_PEER_TIMEOUT, MIN_BEAT_S), MAX_BEAT_S)


def silence_bound(peer_timeout_s: float) -> float:
    """How long a heartbeat may stay still before its rank counts as lost, so that
    every rank names it within ``peer_timeout_s`` of its last beat.

    News of a loss travels for at most two beats after the silence is judged: the
    watcher sees the last beat up to half a beat late and judges it half a beat after
    the bound at worst (it reads twice per beat), and a rank reads the watcher's
    summary once per beat.  So the silence allowed is the timeout less two beats: four
    beats of the six, never fewer than four, so one late beat still never makes a
    healthy rank lost."""
    return peer_timeout_s - 2 * beat_interval(peer_timeout_s)
