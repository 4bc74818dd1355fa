"""The process's standard streams as the ``initorch`` command uses them.

Two promises hold whatever the streams are:

* **Nothing printed can forge terminal output.**  Every write goes through
  :func:`initorch.printable.printable`: ESC, CR, BEL, C1 controls and bidi
  overrides are shown as escapes (line feeds and tabs are layout and stay).
* **The outcome never depends on the streams.**  A closed descriptor (``2>&-``),
  a reader that went away (``initorch steps | head``) or a full disk
  (``>/dev/full``) loses output, never the exit code (see
  :class:`initorch.printable.SafeStream`).
* **No thread a step left behind keeps the process alive** (:func:`exit_process`).

Only the console script installs this (:func:`install`); in-process callers of
:func:`initorch.cli.main` keep their own streams.
"""

from __future__ import annotations

import contextlib
import logging
import os
import sys
import threading
import time
from typing import NoReturn

from initorch.printable import SafeStream

STANDARD_FDS = (0, 1, 2)
STEP_THREAD_PREFIX = "initorch-"
"""Threads initorch runs steps on (``initorch-<step>``, ``initorch-worker-<n>``)."""


def open_closed_standard_fds() -> None:
    """Point a closed stdin, stdout or stderr at ``/dev/null``.

    A process started with ``2>&-`` has no fd 2: the next file it opens would
    get number 2, and every native library's log line (glog writes to fd 2)
    would land in that file -- a report, a saved plan, a profile being read.
    """
    for fd in STANDARD_FDS:
        try:
            os.fstat(fd)
        except OSError:
            opened = os.open(os.devnull, os.O_RDWR)
            if opened != fd:
                os.dup2(opened, fd)
                os.close(opened)


class Console:
    """The command's stdout and stderr."""

    def __init__(self) -> None:
        open_closed_standard_fds()
        self.stdout = SafeStream(sys.stdout, 1)
        self.stderr = SafeStream(sys.stderr, 2)

    def install(self) -> None:
        sys.stdout, sys.stderr = self.stdout, self.stderr

    def output_lost_warning(self) -> str | None:
        """One line for stderr when stdout lost output for another reason than its
        reader going away (a full disk, say)."""
        lost = self.stdout.lost
        if lost is None or self.stdout.reader_went_away:
            return None
        return f"initorch: warning: output to stdout was lost: {lost.strerror or lost}"


LINGER_S = 2.0
"""How long the command waits, after it is done, for threads that steps left
running; then it names them and exits without them."""


def exit_process(code: int) -> NoReturn:
    """End the process with ``code``, whatever threads are still running.

    A step may leave a non-daemon thread running (Python would wait for it for
    ever at exit) or a thread abandoned after a timeout or a signal, stuck in
    native code (interpreter shutdown would run C++ destructors under it).
    Non-daemon threads get ``LINGER_S`` seconds to end; those still running are
    named on stderr, and the process ends at once with ``code`` once its output
    is flushed.  Without such threads it exits normally.
    """
    me = threading.current_thread()
    waiting = [t for t in threading.enumerate() if t is not me and not t.daemon]
    deadline = time.monotonic() + LINGER_S
    for thread in waiting:
        thread.join(max(deadline - time.monotonic(), 0.0))
    left = [t for t in waiting if t.is_alive()]
    for thread in left:
        sys.stderr.write(f"initorch: warning: thread {thread.name!r} is still running "
                         f"{LINGER_S:g}s after the command finished (a step started it and "
                         "never stopped it); exiting without waiting for it\n")
    abandoned = [t for t in threading.enumerate()
                 if t.daemon and t.is_alive() and t.name.startswith(STEP_THREAD_PREFIX)]
    if not left and not abandoned:
        sys.exit(code)
    for stream in (sys.stdout, sys.stderr):
        with contextlib.suppress(OSError, ValueError):
            stream.flush()
    logging.shutdown()
    os._exit(code)


def install() -> Console:
    """Make the process's streams safe for the rest of the command (console script only)."""
    console = Console()
    console.install()
    return console
