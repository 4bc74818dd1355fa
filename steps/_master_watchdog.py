"""Keeps a managed ``mooncake_master`` from outliving the initorch process that needs it.

Run as a script (standard library only, without site, so it starts fast)::

    python -I -S _master_watchdog.py GRACE_S LOGFILE -- /path/mooncake_master --flags...

It starts the master, removes LOGFILE's name (the master writes to it, initorch reads
it through the descriptor it keeps open: however either dies, no file is left behind),
writes ``pid <n>`` on stdout, then waits for its stdin to
reach end-of-file.  initorch holds the only write end of that pipe, so EOF
means initorch closed it (teardown) or died, however it died: the kernel
closes a killed process's descriptors, SIGKILL included.  Then the master gets
SIGTERM and, after GRACE_S seconds, SIGKILL.  SIGTERM to the watchdog does the
same.  The master itself is started with ``PR_SET_PDEATHSIG`` (SIGTERM), which is
safe here because this process has a single thread (the signal follows the
*thread* that forked, which is why initorch, whose steps run on worker threads,
does not use it directly).  If the master exits on its own, so does the watchdog,
with the master's exit status.
"""

from __future__ import annotations

import contextlib
import ctypes
import os
import signal
import subprocess
import sys
import threading

PR_SET_PDEATHSIG = 1


def _die_with_parent() -> None:
    libc = ctypes.CDLL(None, use_errno=True)
    libc.prctl(PR_SET_PDEATHSIG, signal.SIGTERM)


def stop(child: subprocess.Popen[bytes], grace: float) -> int:
    """SIGTERM, then SIGKILL after ``grace`` seconds; returns the exit status."""
    if child.poll() is None:
        child.terminate()
        try:
            return child.wait(grace)
        except subprocess.TimeoutExpired:
            child.kill()
    return child.wait()


def main(argv: list[str]) -> int:
    grace, logfile, separator, *command = argv
    if separator != "--" or not command:
        sys.stderr.write("usage: _master_watchdog.py GRACE_S LOGFILE -- COMMAND...\n")
        return 2
    with open(logfile, "ab") as log:
        child = subprocess.Popen(command, stdin=subprocess.DEVNULL, stdout=log, stderr=log,
                                 preexec_fn=_die_with_parent)  # noqa: PLW1509 - one thread here
    with contextlib.suppress(OSError):  # initorch reads it through the descriptor it holds
        os.unlink(logfile)
    sys.stdout.write(f"pid {child.pid}\n")
    sys.stdout.flush()

    def on_signal(signum: int, frame: object) -> None:
        raise SystemExit(stop(child, float(grace)))

    signal.signal(signal.SIGTERM, on_signal)
    signal.signal(signal.SIGINT, signal.SIG_IGN)  # a terminal's ^C goes to initorch first

    def exit_with_child() -> None:
        code = child.wait()
        os._exit(code if code >= 0 else 128 - code)

    threading.Thread(target=exit_with_child, daemon=True).start()
    sys.stdin.buffer.read()  # returns at EOF: initorch is done or gone
    return stop(child, float(grace))


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
