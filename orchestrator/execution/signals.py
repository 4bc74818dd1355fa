"""SIGINT/SIGTERM while a run is alive: interrupt it, then let teardown finish.

Before a run exists (``initorch run`` loading plugins, profiles and resolving the
plan) :func:`interrupt_on_signals` turns both signals into the same
:class:`RunInterrupted`, so that a launcher's SIGTERM that arrives while a rank is
still planning ends it as cleanly as one during the run: one line or
``run_interrupted`` event, exit ``128+N``.  The run's own guard takes the signals
over when it starts and hands them back when its teardown ends.  Every other
command holds the same guard while its plugins load: the plugin loader makes a
plugin's own ``KeyboardInterrupt`` a failed plugin, and a Ctrl-C is not one.

Signal handlers can only be installed from the main thread, and Python runs
them there.  While a run is alive a signal raises :class:`RunInterrupted` in
the main thread, which unwinds into the run's teardown.  During teardown a
repeated signal (a second Ctrl-C) is logged and ignored, so that every
teardown still runs; afterwards the previous handlers are back.

The main thread never runs step code while signals are handled: steps run on
helper threads and the main thread waits, waking at least every
``POLL_S`` seconds (see :mod:`initorch.execution.invoke`), so the handler runs
promptly and no step code can swallow :class:`RunInterrupted`.  When the
interpreter itself is frozen (native code holding the GIL), CPython's C-level
handler still writes the signal to the watchdog's pipe (``set_wakeup_fd``);
the watchdog ends the process if the handler below has not acknowledged it in
time (:mod:`initorch.execution.watchdog`).
"""

from __future__ import annotations

import signal
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from types import FrameType
from typing import TYPE_CHECKING, Any, Literal

from initorch.errors import RunInterrupted

if TYPE_CHECKING:
    from initorch.execution.watchdog import Watchdog

HANDLED_SIGNALS = (signal.SIGINT, signal.SIGTERM)

POLL_S = 0.1
"""Longest a waiting main thread sleeps between chances to run a signal handler: a
signal that lands just before a blocking wait starts does not wake it."""


def _in_main_thread() -> bool:
    return threading.current_thread() is threading.main_thread()


@contextmanager
def interrupt_on_signals() -> Iterator[None]:
    """Within the block, SIGINT and SIGTERM raise :class:`RunInterrupted` in the main
    thread (elsewhere the block changes nothing); the previous handlers come back
    when it ends."""
    if not _in_main_thread():
        yield
        return

    def interrupt(signum: int, frame: FrameType | None) -> None:
        raise RunInterrupted(signum)

    saved = {signum: signal.signal(signum, interrupt) for signum in HANDLED_SIGNALS}
    try:
        yield
    finally:
        for signum, handler in saved.items():
            signal.signal(signum, handler)


class SignalGuard:
    """Owns the SIGINT/SIGTERM handlers for the lifetime of one run."""

    def __init__(self, log: Any) -> None:
        self._log = log
        self._saved: dict[int, Any] = {}
        self._saved_wakeup: int | None = None
        self._mode: Literal["interrupt", "teardown", "released"] = "interrupt"
        self._watchdog: Watchdog | None = None

    @property
    def installed(self) -> bool:
        """True while this guard owns SIGINT/SIGTERM (on the main thread)."""
        return bool(self._saved)

    def install(self, watchdog: Watchdog | None = None) -> None:
        """Start turning signals into :class:`RunInterrupted` (main thread only); with
        a ``watchdog``, tell it about every signal even when Python cannot run."""
        if not _in_main_thread():
            return
        for signum in HANDLED_SIGNALS:
            self._saved[signum] = signal.signal(signum, self._handle)
        if watchdog is not None:
            self._watchdog = watchdog
            self._saved_wakeup = signal.set_wakeup_fd(watchdog.wakeup_fd,
                                                      warn_on_full_buffer=False)

    def quiet(self) -> None:
        """Teardown has begun: from now on, log repeated signals and carry on; the
        watchdog no longer ends the process for a signal whose handler runs late
        (teardown runs on this thread, and may be in native code for seconds)."""
        self._mode = "teardown"
        if self._watchdog is not None:
            self._watchdog.tearing_down()

    def release(self) -> None:
        """Give the signals back to their previous handlers."""
        if not _in_main_thread():
            # Only the main thread may touch handlers; the next signal does it.
            self._mode = "released"
            return
        while self._saved:
            signum, handler = self._saved.popitem()
            signal.signal(signum, handler)
        if self._saved_wakeup is not None:
            signal.set_wakeup_fd(self._saved_wakeup)
            self._saved_wakeup = None

    def _handle(self, signum: int, frame: FrameType | None) -> None:
        name = signal.Signals(signum).name
        if self._watchdog is not None:
            self._watchdog.signal_handled()  # Python runs: the watchdog need not act
        if self._mode == "teardown":
            self._log.warning("signal_ignored", signal=name, reason="teardown in progress")
            return
        if self._mode == "released":  # the run is over: behave as if never installed
            self.release()
            signal.raise_signal(signum)
            return
        self._log.warning("signal_received", signal=name)
        raise RunInterrupted(signum)
