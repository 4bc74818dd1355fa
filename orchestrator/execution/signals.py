"""SIGINT/SIGTERM while a run is alive: interrupt it, then let teardown finish.

Signal handlers can only be installed from the main thread, and Python runs
them there.  While a run is alive a signal raises :class:`RunInterrupted` in
the main thread, which unwinds into the run's teardown.  During teardown a
repeated signal (a second Ctrl-C) is logged and ignored, so that every
teardown still runs; afterwards the previous handlers are back.
"""

from __future__ import annotations

import signal
import threading
from types import FrameType
from typing import Any, Literal

HANDLED_SIGNALS = (signal.SIGINT, signal.SIGTERM)


class RunInterrupted(BaseException):
    """SIGINT or SIGTERM arrived while a run was alive (a BaseException, like
    KeyboardInterrupt, so that step code catching ``Exception`` cannot swallow it)."""

    def __init__(self, signum: int) -> None:
        super().__init__(f"interrupted by {signal.Signals(signum).name}")
        self.signum = signum

    @property
    def exit_code(self) -> int:
        return 128 + self.signum


def _in_main_thread() -> bool:
    return threading.current_thread() is threading.main_thread()


class SignalGuard:
    """Owns the SIGINT/SIGTERM handlers for the lifetime of one run."""

    def __init__(self, log: Any) -> None:
        self._log = log
        self._saved: dict[int, Any] = {}
        self._mode: Literal["interrupt", "teardown", "released"] = "interrupt"

    def install(self) -> None:
        """Start turning signals into :class:`RunInterrupted` (main thread only)."""
        if not _in_main_thread():
            return
        for signum in HANDLED_SIGNALS:
            self._saved[signum] = signal.signal(signum, self._handle)

    def quiet(self) -> None:
        """Teardown has begun: from now on, log repeated signals and carry on."""
        self._mode = "teardown"

    def release(self) -> None:
        """Give the signals back to their previous handlers."""
        if not _in_main_thread():
            # Only the main thread may touch handlers; the next signal does it.
            self._mode = "released"
            return
        while self._saved:
            signum, handler = self._saved.popitem()
            signal.signal(signum, handler)

    def _handle(self, signum: int, frame: FrameType | None) -> None:
        name = signal.Signals(signum).name
        if self._mode == "teardown":
            self._log.warning("signal_ignored", signal=name, reason="teardown in progress")
            return
        if self._mode == "released":  # the run is over: behave as if never installed
            self.release()
            signal.raise_signal(signum)
            return
        self._log.warning("signal_received", signal=name)
        raise RunInterrupted(signum)
