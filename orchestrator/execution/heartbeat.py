"""``step_still_running``: a heartbeat for steps that take long.

Start-up steps can run for seconds or minutes (a rendezvous waiting for other
ranks, a transfer engine probing the network); without a heartbeat the log is
silent between ``step_started`` and ``step_succeeded``, and a slow step looks
exactly like a hung process.  While a step runs, one daemon thread per run logs
``step_still_running`` every ``interval`` seconds of wall time (measured with
``time.monotonic``, whatever clock the run reports with).

The thread never needs waking when a step starts: a new step is due a whole
interval later, and the thread wakes at least once per interval.  Beats are
logged under the same lock that :meth:`Heartbeat.stop_watching` takes, so no
beat follows a step's last event or the run's end.
"""

from __future__ import annotations

import threading
import time
from typing import Any

from initorch.records import record

DEFAULT_INTERVAL_S = 5.0
"""A 6 s step logs one beat; the CLI's ``--heartbeat`` and ``Run(heartbeat=...)``."""


@record(frozen=False)
class _Watched:
    """A running step: when it started and when its next beat is due (monotonic)."""

    started: float
    due: float
    timeout: float | None


class Heartbeat:
    """Logs ``step_still_running`` for watched steps; single-use, like a run."""

    def __init__(self, interval: float, log: Any) -> None:
        if not interval > 0:
            raise ValueError(f"the heartbeat interval must be positive, got {interval!r}")
        self.interval = interval
        self._log = log
        self._watched: dict[str, _Watched] = {}
        self._wake = threading.Condition()
        self._thread: threading.Thread | None = None
        self._stopped = False

    def watch(self, step: str, timeout: float | None) -> None:
        """``step`` has started: beat for it every interval until :meth:`stop_watching`."""
        with self._wake:
            if self._stopped:
                return
            now = time.monotonic()
            self._watched[step] = _Watched(now, now + self.interval, timeout)
            if self._thread is None:
                self._thread = threading.Thread(target=self._beat, daemon=True,
                                                name="initorch-heartbeat")
                self._thread.start()

    def stop_watching(self, step: str) -> None:
        """``step`` is about to log its outcome: no beat for it after this returns."""
        with self._wake:
            self._watched.pop(step, None)

    def stop(self) -> None:
        """The run is over: no beat after this returns; the thread exits soon after."""
        with self._wake:
            self._stopped = True
            self._watched.clear()
            self._wake.notify()

    def _beat(self) -> None:
        with self._wake:
            while not self._stopped:
                now = time.monotonic()
                for step, watched in self._watched.items():
                    if watched.due <= now:
                        bound = {} if watched.timeout is None else {"timeout_s": watched.timeout}
                        self._log.info("step_still_running", step=step,
                                       elapsed_s=round(now - watched.started, 1), **bound)
                        watched.due = now + self.interval
                next_due = min((w.due for w in self._watched.values()),
                               default=now + self.interval)
                self._wake.wait(max(next_due - now, 0.0))
