"""Capture what native code prints to stderr while a vendor call runs.

Mooncake, CANN and NCCL report the *reason* for a failure through glog or
printf on file descriptor 2 and hand Python only a return code.  Capturing fd 2
around the call lets a step attach those lines to its error, so that diagnosis
can say "aclrtGetDevice returned 107002" instead of "initialize returned -1".
Nothing is swallowed:

* the captured bytes are written back to the real stderr when the call returns
  (best effort: a closed or full stderr never turns into a failed step);
* the capture file is named and registered with the run's watchdog, which
  replays it if the vendor call aborts the process (glog's ``LOG(FATAL)``) or
  holds the interpreter until the watchdog ends it;
* a run that stops waiting for a step (timeout, signal) calls
  :func:`release_captures`, which gives fd 2 back at once, so that the run's own
  last lines are not written into the capture of a call that never returns.

fd 2 is process-wide, so one capture is active at a time; another waits.
"""

from __future__ import annotations

import contextlib
import os
import sys
import tempfile
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from typing import TYPE_CHECKING

from initorch.records import record

if TYPE_CHECKING:
    from initorch.execution.watchdog import Watchdog


@record(frozen=False)
class NativeLog:
    """Text native code wrote to stderr during the capture (filled on exit)."""

    text: str = ""

    def error_lines(self) -> str:
        """Only the glog error/fatal lines (``E…``/``F…``), or all text if there are none."""
        lines = [line for line in self.text.splitlines() if line[:1] in ("E", "F")]
        return "\n".join(lines) if lines else self.text.strip()


class _Redirect:
    """fd 2 pointed at a file, and how to point it back (once)."""

    def __init__(self, path: str, sink: int) -> None:
        self.path = path
        sys.stderr.flush()
        self._saved = os.dup(2)
        os.dup2(sink, 2)
        self._done = False

    def restore(self) -> bool:
        """Give fd 2 back; False when that already happened."""
        if self._done:
            return False
        self._done = True
        with contextlib.suppress(OSError, ValueError):
            sys.stderr.flush()
        os.dup2(self._saved, 2)
        os.close(self._saved)
        return True


class _Slot:
    """fd 2 is process-wide: the one capture that holds it, if any."""

    def __init__(self) -> None:
        self.changed = threading.Condition()
        self.redirect: _Redirect | None = None


_SLOT = _Slot()


def current_watchdog() -> Watchdog | None:
    """The watchdog of the active run, if any.  Imported on first capture: steps import
    this module to define themselves, and a dry run needs no watchdog (nor subprocess)."""
    from initorch.execution.watchdog import current

    return current()


@contextmanager
def capture_native_stderr() -> Iterator[NativeLog]:
    """Redirect fd 2 to a named temporary file for the block, then replay it to stderr."""
    log = NativeLog()
    handle, path = tempfile.mkstemp(prefix="initorch-native-", suffix=".log")
    watchdog = current_watchdog()
    try:
        with _SLOT.changed:
            _SLOT.changed.wait_for(lambda: _SLOT.redirect is None)
            if watchdog is not None:
                watchdog.capturing(path)
            redirect = _SLOT.redirect = _Redirect(path, handle)
        try:
            yield log
        finally:
            with _SLOT.changed:
                restored = redirect.restore()
                if _SLOT.redirect is redirect:
                    _SLOT.redirect = None
                    _SLOT.changed.notify_all()
            data = os.pread(handle, 1 << 30, 0)
            log.text = data.decode("utf-8", "replace")
            if data and restored:  # released early: the run already moved on
                _best_effort_write(data)
            if watchdog is not None:
                watchdog.captured(path)
    finally:
        os.close(handle)
        with contextlib.suppress(OSError):
            os.unlink(path)


def release_captures() -> None:
    """The run stopped waiting for a step: give fd 2 back now, whatever the step's
    vendor call is doing.  Its later output goes to the real stderr."""
    with _SLOT.changed:
        redirect, _SLOT.redirect = _SLOT.redirect, None
        if redirect is not None:
            redirect.restore()
            with contextlib.suppress(OSError), open(redirect.path, "rb") as captured:
                _best_effort_write(captured.read())
            watchdog = current_watchdog()
            if watchdog is not None:
                watchdog.captured(redirect.path)
        _SLOT.changed.notify_all()


def _best_effort_write(data: bytes) -> None:
    """Replay to fd 2; a closed or full stderr loses the lines, never the step."""
    with contextlib.suppress(OSError):
        while data:
            data = data[os.write(2, data):]
