"""The watchdog process: acts for a run whose interpreter cannot act for itself.

Run as a script (standard library only, so it starts fast)::

    python -I _watchdog_process.py PARENT_PID GRACE_S FORMAT FIELDS_JSON WAKEUP_FD

Python runs signal handlers and timeouts only when a thread can take the GIL.
A vendor call that holds it (Mooncake's ``TransferEngine.initialize`` waiting
for a metadata server does) freezes the whole interpreter, and a vendor
``abort()`` kills it before any Python code runs.  This process sees what the
frozen or dead one cannot:

* its stdin is a pipe whose only writer is the run; each line is one JSON
  message (``start``/``end`` of a step, ``arm``/``disarm`` of a step's
  deadline, ``ack`` of the signals handled so far, ``teardown`` once the run tears
  down, ``capture``/``uncapture`` of a file holding native output, ``bye``);
* ``WAKEUP_FD`` is the read end of the pipe that CPython's C-level signal handler
  writes each signal number to (``signal.set_wakeup_fd``), without the GIL.

It ends the run's process with SIGKILL, after replaying the captured native
output and saying why, when a step is still armed ``GRACE_S`` after its
deadline, or when SIGINT/SIGTERM has waited ``GRACE_S`` for the run to act on
it; during teardown (``teardown`` gives the grace for it) a signal asks for what the
run is doing already, so a teardown call in native code (a Mooncake store closing)
gets the longer grace before it is cut short.  When its stdin
reaches end-of-file without ``bye`` the run died (an abort, a crash, SIGKILL): it
replays the captured native output and names the steps that were running.  It
ignores SIGINT and SIGTERM and lives in its own session, so a terminal's Ctrl-C or a
supervisor's SIGTERM reaches only the run.
"""

from __future__ import annotations

import contextlib
import json
import os
import select
import signal
import sys
import time
from dataclasses import dataclass, field
from typing import Any

HANDLED = {int(signal.SIGINT): "SIGINT", int(signal.SIGTERM): "SIGTERM"}


@dataclass
class State:
    """What the run told this process, and what it is waiting for."""

    running: dict[str, float] = field(default_factory=dict)  # step -> monotonic start
    armed: dict[str, tuple[float, float]] = field(default_factory=dict)  # deadline, timeout
    captures: list[str] = field(default_factory=list)
    signal: tuple[str, float] | None = None  # the first signal not acted on, and when
    teardown_grace: float | None = None  # set once the run tears down
    said_bye: bool = False


class Reporter:
    """Writes this process's lines to the run's stderr, as the run writes its own:
    ``initorch: error: ...`` for people, one JSON event per line for machines."""

    def __init__(self, fmt: str, fields: dict[str, Any]) -> None:
        self.fmt = fmt
        self.fields = fields

    def error(self, event: str, text: str, **extra: Any) -> None:
        if self.fmt == "json":
            stamp = time.time()
            data = {"event": event, "level": "critical",
                    "timestamp": time.strftime("%Y-%m-%dT%H:%M:%S", time.gmtime(stamp))
                    + f".{int(stamp % 1 * 1e6):06d}Z", **self.fields, **extra, "text": text}
            self._write(json.dumps(data) + "\n")
        else:
            self._write(f"initorch: error: {text}\n")

    def replay(self, path: str) -> None:
        """What native code printed into ``path``, as it would have appeared."""
        try:
            with open(path, "rb") as handle:
                data = handle.read()
        except OSError:
            return
        if self.fmt != "json":
            self._write(data.decode("utf-8", "replace"))
            return
        for line in data.decode("utf-8", "replace").splitlines():
            if line.strip():
                self._write(json.dumps({"event": "native_output", "level": "warning",
                                        **self.fields, "text": line}) + "\n")

    @staticmethod
    def _write(text: str) -> None:
        try:
            sys.stderr.write(text)
            sys.stderr.flush()
        except (OSError, ValueError):  # stderr gone: nothing else to tell
            pass


def steps_text(state: State) -> str:
    names = sorted(state.running)
    if not names:
        return "no step"
    return "step " + ", ".join(f"'{name}'" for name in names)


def exit_status(pid: int) -> str:
    """How ``pid`` ended, read from its zombie's /proc entry while its parent has not
    reaped it yet ("killed by SIGABRT"); empty when that cannot be known."""
    deadline = time.monotonic() + 0.5
    while time.monotonic() < deadline:
        try:
            with open(f"/proc/{pid}/stat", encoding="ascii", errors="replace") as handle:
                fields = handle.read().rsplit(")", 1)[1].split()
        except OSError:
            return ""
        if fields[0] == "Z" and len(fields) >= 50:
            status = int(fields[49])  # exit_code, field 52 of proc(5)
            if status & 0x7F:
                try:
                    return f"killed by {signal.Signals(status & 0x7F).name}"
                except ValueError:
                    return f"killed by signal {status & 0x7F}"
            return f"exit code {status >> 8}"
        time.sleep(0.01)
    return ""


def end_the_run(parent: int, state: State, reporter: Reporter, event: str, text: str) -> None:
    for path in state.captures:
        reporter.replay(path)
    reporter.error(event, text, steps=sorted(state.running))
    with contextlib.suppress(OSError):
        os.kill(parent, signal.SIGKILL)


def overdue(state: State, grace: float, now: float) -> tuple[str, str] | None:
    """The reason to end the run now, if there is one: (event, text)."""
    for step, (deadline, timeout) in sorted(state.armed.items()):
        if now >= deadline + grace:
            return ("watchdog_killed_step",
                    f"step '{step}' is still running {now - deadline + timeout:.1f}s after it "
                    f"started (timeout {timeout:g}s), and native code has held the Python "
                    f"interpreter for the last {grace:g}s, so initorch can neither stop it nor "
                    "tear down; the watchdog ends the process (SIGKILL)")
    if state.signal is None or now < state.signal[1] + signal_grace(state, grace):
        return None
    if state.teardown_grace is not None:
        return ("watchdog_killed_on_signal",
                f"{state.signal[0]} arrived during teardown, and native code has held the "
                f"main thread for {state.teardown_grace:g}s since, so teardown cannot finish "
                "in time; the watchdog ends the process (SIGKILL)")
    return ("watchdog_killed_on_signal",
            f"{state.signal[0]} arrived while {steps_text(state)} was running, and native "
            f"code held the Python interpreter for {grace:g}s, so initorch could not tear "
            "down; the watchdog ends the process (SIGKILL)")


def signal_grace(state: State, grace: float) -> float:
    """How long a signal may wait for the run's handler: longer once teardown runs."""
    return grace if state.teardown_grace is None else state.teardown_grace


def next_wake(state: State, grace: float) -> float | None:
    due = [deadline + grace for deadline, _ in state.armed.values()]
    if state.signal is not None:
        due.append(state.signal[1] + signal_grace(state, grace))
    return min(due) if due else None


def apply(state: State, message: dict[str, Any]) -> None:
    op = message.get("op")
    step = str(message.get("step", ""))
    if op == "start":
        state.running[step] = time.monotonic()
    elif op == "end":
        state.running.pop(step, None)
        state.armed.pop(step, None)
    elif op == "arm":
        state.armed[step] = (float(message["deadline"]), float(message["timeout"]))
    elif op == "disarm":
        state.armed.pop(step, None)
    elif op == "ack":
        state.signal = None
    elif op == "teardown":
        state.signal, state.teardown_grace = None, float(message["grace"])
    elif op == "capture":
        state.captures.append(str(message["path"]))
    elif op == "uncapture" and message.get("path") in state.captures:
        state.captures.remove(str(message["path"]))
    elif op == "bye":
        state.said_bye = True


def main(argv: list[str]) -> int:
    parent, grace, fmt, fields = int(argv[0]), float(argv[1]), argv[2], json.loads(argv[3])
    wakeup = int(argv[4])
    for signum in HANDLED:
        signal.signal(signum, signal.SIG_IGN)
    reporter = Reporter(fmt, fields)
    state = State()
    control = sys.stdin.fileno()
    pending = b""
    sources = [control, wakeup]
    while True:
        due = next_wake(state, grace)
        timeout = None if due is None else max(due - time.monotonic(), 0.0)
        ready, _, _ = select.select(sources, [], [], timeout)
        if wakeup in ready:
            data = os.read(wakeup, 512)
            if not data:
                sources.remove(wakeup)
            for signum in data:
                if signum in HANDLED and state.signal is None:
                    state.signal = (HANDLED[signum], time.monotonic())
        if control in ready:
            data = os.read(control, 65536)
            if not data:  # the run closed the pipe: it is done, or it died
                if not state.said_bye:
                    status = exit_status(parent)
                    how = f" ({status})" if status else ""
                    for path in state.captures:
                        reporter.replay(path)
                        _unlink(path)
                    if state.running or state.captures:
                        reporter.error("process_died",
                                       f"the process died{how} while {steps_text(state)} "
                                       "was running; the native output captured during the "
                                       "step, if any, is above", steps=sorted(state.running))
                return 0
            pending += data
            *lines, pending = pending.split(b"\n")
            for line in lines:
                if line.strip():
                    apply(state, json.loads(line))
        reason = overdue(state, grace, time.monotonic())
        if reason is not None:
            end_the_run(parent, state, reporter, *reason)
            for path in state.captures:
                _unlink(path)
            return 0


def _unlink(path: str) -> None:
    with contextlib.suppress(OSError):
        os.unlink(path)


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
