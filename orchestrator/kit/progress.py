"""Where a rank's start-up is while it runs: the ``/startupz`` answer for an engine.

An operator whose server has been starting for three minutes wants to know which rank
is in which phase, and for how long.  A session's :class:`Progress` answers in two
ways, both fed by the calls the session observes (the engine's own start-up calls,
named as initorch's steps):

- **a progress line** on the integration's logger, for each phase that lasts longer
  than ``every_s`` seconds, and again every ``every_s`` seconds while it lasts: which
  rank, which phase, how long in it, how many of the plan's steps are done, and how
  long since the process started.  Short phases say nothing, so a healthy start-up
  adds no lines; a stuck one says where it is stuck;
- **a status file** (:class:`initorch.reporting.status.StatusFile`, the same document
  as ``initorch run --status``), rewritten atomically at every change and every second,
  so that a probe reads it without the engine's HTTP server: ``initorch status --ready
  FILE`` gives its exit code.  When the rank's start-up is over the file says
  ``ready`` (or ``failed``) and stays fresh while the process lives, so that a probe
  tells a rank that serves from one whose process is gone.

A phase is the step of the innermost observed call that is still running; between two
observed calls the rank is ``after <the last step>``.
"""

from __future__ import annotations

import contextlib
import logging
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from typing import TYPE_CHECKING

from initorch.kit.cost import process_age
from initorch.kit.outputs import rank_path

if TYPE_CHECKING:
    from initorch.reporting.status import StatusFile

__all__ = ["PROGRESS_EVERY_S", "Progress", "progress_seconds"]

PROGRESS_EVERY_S = 10.0
"""The default: a line once a phase has lasted 10 s, and every 10 s while it lasts."""


def progress_seconds(text: str | None) -> float | None:
    """An integration's progress variable: unset or empty, :data:`PROGRESS_EVERY_S`;
    ``off`` (or ``0``), no lines; otherwise seconds.  :class:`ValueError` says what is
    wrong with any other value."""
    text = (text or "").strip().lower()
    if not text:
        return PROGRESS_EVERY_S
    if text == "off":
        return None
    try:
        seconds = float(text)
    except ValueError:
        raise ValueError(f"{text!r} is neither seconds nor off") from None
    if not seconds >= 0 or seconds == float("inf"):
        raise ValueError(f"{text!r}: give a finite number of seconds, 0 or more, or off")
    return seconds or None


class Progress:
    """One rank's progress through its start-up; thread-safe (an engine's calls run on
    several threads).  :meth:`phase` frames each observed call; :meth:`over` ends the
    start-up.  With neither a status path nor ``every_s`` it writes and says nothing
    (and starts no thread): it only keeps track, for :meth:`line`."""

    def __init__(self, *, integration: str, rank: int, steps_total: int,
                 status: str | None, every_s: float | None, logger: logging.Logger) -> None:
        self._integration, self._rank, self._steps_total = integration, rank, steps_total
        self._logger = logger
        self._lock = threading.Lock()
        self._running: list[tuple[str, float]] = []  # (step, since), innermost last
        self._last: tuple[str, float] | None = None  # the last step that ended, and when
        self._done: set[str] = set()
        self._status = _status_file(status, rank, steps_total)
        self._stop = threading.Event()
        if every_s:
            threading.Thread(target=self._say_while_slow, args=(every_s,), daemon=True,
                             name=f"{integration}-progress").start()

    @contextmanager
    def phase(self, step: str) -> Iterator[None]:
        """The block is one call of ``step``: the rank is in that phase while it runs."""
        with self._lock:
            self._running.append((step, time.monotonic()))
        if self._status is not None:
            self._status.step_started(step)
        succeeded = False
        try:
            yield
            succeeded = True
        finally:
            with self._lock:
                self._leave(step, succeeded)
            if self._status is not None:
                self._status.step_finished(step, succeeded)

    def over(self, failed: bool) -> None:
        """The start-up is over: the status says ``ready`` (or ``failed``) and stays
        fresh while the process lives; the progress lines stop."""
        self._stop.set()
        if self._status is not None:
            self._status.state("failed" if failed else "ready")

    def _leave(self, step: str, succeeded: bool) -> None:
        """Take ``step``'s innermost open call off the stack (under the lock)."""
        for index in range(len(self._running) - 1, -1, -1):
            if self._running[index][0] == step:
                del self._running[index]
                break
        self._last = (step, time.monotonic())
        if succeeded:
            self._done.add(step)

    def line(self, now: float | None = None) -> str:
        """Where the rank is now, for people: ``rank 1 is in load_model for 20.0 s (5 of
        9 steps done; 31 s since the process started)``."""
        now = time.monotonic() if now is None else now
        with self._lock:
            if self._running:
                step, since = self._running[-1]
                where = f"in {step}"
            elif self._last is not None:
                step, since = self._last
                where = f"after {step}"
            else:
                return f"rank {self._rank} has begun its start-up"
            done = len(self._done)
        age = process_age()
        started = "" if age is None else f"; {age:.0f} s since the process started"
        return (f"rank {self._rank} is {where} for {now - since:.1f} s ({done} of "
                f"{self._steps_total} steps done{started})")

    def _say_while_slow(self, every_s: float) -> None:
        """Say :meth:`line` once the current phase has lasted ``every_s``, and again
        every ``every_s`` while it lasts."""
        spoken: tuple[str, float] | None = None  # the phase (step, since) last spoken of
        spoken_at = 0.0
        while not self._stop.wait(every_s / 4):
            with self._lock:
                current = self._running[-1] if self._running else self._last
            now = time.monotonic()
            if current is None or now - (spoken_at if spoken == current else current[1]) \
                    < every_s:
                continue
            self._logger.info("%s: %s", self._integration, self.line(now))
            spoken, spoken_at = current, now


def _status_file(template: str | None, rank: int, steps_total: int) -> StatusFile | None:
    """The rank's status file (``{rank}`` filled in), when one is asked for."""
    path = rank_path(template, rank)
    if path is None:
        return None
    from initorch.reporting.status import StatusFile

    with contextlib.suppress(OSError):  # unwritable: the file goes stale, start-up goes on
        path.parent.mkdir(parents=True, exist_ok=True)
    return StatusFile(str(path), rank=rank, steps_total=steps_total)
