"""The run's end of the watchdog: a small process that acts when the interpreter cannot.

A step stuck in native code that holds the GIL stops every Python thread:
no timeout fires, no signal handler runs, no teardown happens; a vendor
``abort()`` kills the process before a line of Python runs.  The watchdog
(:mod:`initorch.execution._watchdog_process`) is told, over a pipe, which
steps run, which have deadlines and which files hold their captured native
output, and CPython's C-level signal handler tells it about SIGINT/SIGTERM
directly.  When the run has not acted ``UNRESPONSIVE_S`` seconds after a
deadline or a signal, it replays the captured output, says which step held the
interpreter, and ends the process with SIGKILL; when the run dies, it replays
the captured output and names the steps that were running.

A run starts it when it handles signals (the CLI always does) and when a step
with a timeout starts; a run that does neither never pays for it.  Only one
run at a time can be active in a process (see :mod:`initorch.execution.run`),
so there is at most one watchdog: :func:`current` finds it for the native
output captures.
"""

from __future__ import annotations

import contextlib
import json
import os
import subprocess
import sys
import threading
import time
from pathlib import Path
from typing import Any, Literal

UNRESPONSIVE_S = 3.0
"""How long the watchdog waits after a missed deadline or an unhandled SIGINT/SIGTERM
before it ends the process: the documented overshoot of a timeout when a step holds
the interpreter, and what keeps a SIGTERM's exit within 5 s."""

TEARDOWN_GRACE_S = 20.0
"""How long a signal that arrives during teardown may wait for the run's handler (which
only logs it) before the watchdog ends the process: a teardown call in native code on
the main thread takes seconds (a Mooncake store client closing), and one that hangs
there must still end within torchrun's and Kubernetes' 30 s."""

SCRIPT = Path(__file__).with_name("_watchdog_process.py")

WatchdogFormat = Literal["text", "json"]


class _ProcessWide:
    """What is process-wide: where a watchdog writes, and the one running."""

    def __init__(self) -> None:
        self.output: tuple[int | None, WatchdogFormat] = (None, "text")
        self.current: Watchdog | None = None
        self.lock = threading.Lock()


_PROCESS = _ProcessWide()


def configure_watchdog(fd: int | None, fmt: WatchdogFormat = "text") -> None:
    """Where the watchdog writes (a file descriptor; ``None``: the process's stderr
    when the watchdog starts) and how: ``text`` lines or ``json`` events.  Only the
    CLI calls this, like :func:`initorch.configure_logging`."""
    _PROCESS.output = (fd, fmt)


def current() -> Watchdog | None:
    """The running watchdog, if any (native output captures register with it)."""
    return _PROCESS.current


class Watchdog:
    """One watchdog process and the pipes to it.  Every method is safe to call from
    any thread and never raises: a watchdog that died or fell behind is dropped,
    and the run goes on without it."""

    def __init__(self, fields: dict[str, Any]) -> None:
        fd, fmt = _PROCESS.output
        wake_read, self.wakeup_fd = os.pipe()
        os.set_blocking(self.wakeup_fd, False)  # required by signal.set_wakeup_fd
        try:
            self._process = subprocess.Popen(
                [sys.executable, "-I", str(SCRIPT), str(os.getpid()), str(UNRESPONSIVE_S),
                 fmt, json.dumps(fields, default=str), str(wake_read)],
                stdin=subprocess.PIPE, stdout=subprocess.DEVNULL, stderr=fd,
                pass_fds=(wake_read,), start_new_session=True)
        finally:
            os.close(wake_read)
        assert self._process.stdin is not None
        self.control_fd = self._process.stdin.fileno()
        os.set_blocking(self.control_fd, False)  # a stalled watchdog never stalls the run
        self._broken = False
        self._write_lock = threading.Lock()

    # -- what the run tells it -----------------------------------------------------------

    def step_started(self, step: str, timeout: float | None) -> None:
        self._send({"op": "start", "step": step})
        if timeout is not None:
            self._send({"op": "arm", "step": step, "deadline": time.monotonic() + timeout,
                        "timeout": timeout})

    def step_finished(self, step: str) -> None:
        """The step's code returned or raised."""
        self._send({"op": "end", "step": step})

    def step_abandoned(self, step: str) -> None:
        """The run stopped waiting for the step (its timeout, a signal): the run acted,
        so its deadline is off; the step still counts as running until it returns."""
        self._send({"op": "disarm", "step": step})

    def signal_handled(self) -> None:
        """The run acted on the signals received so far."""
        self._send({"op": "ack"})

    def tearing_down(self) -> None:
        """Teardown has begun: it is what any later signal asks for, so a signal's
        handler (which would only log it) may run late, up to ``TEARDOWN_GRACE_S``."""
        self._send({"op": "teardown", "grace": TEARDOWN_GRACE_S})

    def capturing(self, path: str) -> None:
        """Native output goes to ``path`` until :meth:`captured`: replay it if the
        process dies or is ended meanwhile."""
        self._send({"op": "capture", "path": path})

    def captured(self, path: str) -> None:
        self._send({"op": "uncapture", "path": path})

    def close(self, *, keep_wakeup_fd: bool = False) -> None:
        """The run is over: the watchdog exits quietly.  ``keep_wakeup_fd`` leaves the
        signal pipe's write end open while CPython may still write to it (signals
        were released off the main thread and still point there)."""
        self._send({"op": "bye"})
        stdin = self._process.stdin
        try:
            if stdin is not None:
                stdin.close()
            self._process.wait(timeout=5)
        except (OSError, subprocess.TimeoutExpired):
            self._process.kill()
        if not keep_wakeup_fd:
            with contextlib.suppress(OSError):
                os.close(self.wakeup_fd)

    def _send(self, message: dict[str, Any]) -> None:
        if self._broken:
            return
        line = (json.dumps(message) + "\n").encode()
        with self._write_lock:
            try:
                os.write(self.control_fd, line)  # below PIPE_BUF: one atomic write
            except OSError:
                self._broken = True


def _forget_in_child() -> None:
    """A forked child (multiprocessing) must not hold the watchdog's pipes open: the
    watchdog would miss the run's end, and the child's signals would count as the
    run's."""
    watchdog, _PROCESS.current = _PROCESS.current, None
    if watchdog is None:
        return
    import signal

    with contextlib.suppress(ValueError):  # the forking thread is the child's main thread
        signal.set_wakeup_fd(-1)
    for fd in (watchdog.wakeup_fd, watchdog.control_fd):
        with contextlib.suppress(OSError):
            os.close(fd)


os.register_at_fork(after_in_child=_forget_in_child)


def start_watchdog(fields: dict[str, Any]) -> Watchdog:
    """Start the watchdog for the run now starting, or return the one running."""
    with _PROCESS.lock:
        if _PROCESS.current is None:
            _PROCESS.current = Watchdog(fields)
        return _PROCESS.current


def stop_watchdog(watchdog: Watchdog, *, keep_wakeup_fd: bool = False) -> None:
    """End ``watchdog`` (the run that started it is torn down)."""
    with _PROCESS.lock:
        if _PROCESS.current is watchdog:
            _PROCESS.current = None
    watchdog.close(keep_wakeup_fd=keep_wakeup_fd)
