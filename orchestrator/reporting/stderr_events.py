"""``--log-format json``: everything the process writes to stderr becomes a JSON event.

Native libraries log through glog or printf on file descriptor 2 (Mooncake's
``I1130 12:00:00.710721 13256 transfer_engine_impl.cpp:1046] ...`` lines), and
Python prints warnings there.  For a stream that is JSON lines only, the CLI
points fd 2 at a pipe for the whole run: a reader thread turns each line into a
``native_output`` event (glog's severity becomes the level, its source and
thread become fields), passes lines that already are JSON objects through,
and the handler writes every event to the real stderr.  Python warnings become
``python_warning`` events.  Only the CLI uses this: the library never touches
a host's file descriptors or warning hooks.
"""

from __future__ import annotations

import json
import os
import re
import sys
import threading
import warnings
from types import TracebackType
from typing import Any, TextIO, cast

from initorch.location import display_path
from initorch.printable import SafeStream
from initorch.reporting.logs import get_logger

# glog: severity, MMDD, time, thread id, file:line] message
_GLOG = re.compile(r"^([IWEF])(\d{4}) (\d\d:\d\d:\d\d\.\d+)\s+(\d+) ([^\]\s]+:\d+)\] ?(.*)$")
_GLOG_LEVELS = {"I": "info", "W": "warning", "E": "error", "F": "critical"}
_DRAIN_S = 5.0  # how long to wait for the last lines (a child process may hold the pipe)


def _is_json_object(line: str) -> bool:
    if not line.startswith("{"):
        return False
    try:
        return isinstance(json.loads(line), dict)
    except ValueError:
        return False


class StderrEvents:
    """While active, fd 2 feeds events; :attr:`stream` is the real stderr.

    ``log`` is the logger the events go to; rebind it (``capture.log =
    capture.log.bind(rank=0)``) once the run's fields are known.
    """

    def __init__(self) -> None:
        self.log: Any = get_logger()
        self.stream: TextIO = sys.stderr
        self._saved_fd = -1
        self._reader: threading.Thread | None = None
        self._showwarning = warnings.showwarning

    def __enter__(self) -> StderrEvents:
        sys.stderr.flush()
        self._saved_fd = os.dup(2)
        # The events' own stream: a separate descriptor on the real stderr, left open
        # after the capture ends (late events, at exit, still have somewhere to go).  A
        # full or closed stderr loses events quietly: a failing handler would report
        # its failure on fd 2, which is the pipe this process reads back.
        events_fd = os.dup(self._saved_fd)
        self.stream = cast(TextIO, SafeStream(
            os.fdopen(events_fd, "w", buffering=1, encoding="utf-8", errors="replace"),
            events_fd, neutralise=False))
        read_fd, write_fd = os.pipe()
        os.dup2(write_fd, 2)
        os.close(write_fd)
        self._reader = threading.Thread(target=self._pump, args=(read_fd,), daemon=True,
                                        name="initorch-stderr")
        self._reader.start()
        self._showwarning = warnings.showwarning
        warnings.showwarning = self._warning
        return self

    def __exit__(self, exc_type: type[BaseException] | None, exc: BaseException | None,
                 tb: TracebackType | None) -> None:
        warnings.showwarning = self._showwarning
        sys.stderr.flush()
        os.dup2(self._saved_fd, 2)  # drops the pipe's last writer: the reader sees EOF
        os.close(self._saved_fd)
        if self._reader is not None:
            self._reader.join(_DRAIN_S)

    def _pump(self, read_fd: int) -> None:
        with os.fdopen(read_fd, "rb") as pipe:
            for raw in pipe:
                line = raw.decode("utf-8", "replace").rstrip("\r\n")
                if not line.strip():
                    continue
                if _is_json_object(line):  # already an event (a child process, say)
                    self.stream.write(line + "\n")
                    continue
                self._native(line)

    def _native(self, line: str) -> None:
        match = _GLOG.match(line)
        if match is None:
            self.log.warning("native_output", text=line)
            return
        severity, day, time_of_day, thread, source, text = match.groups()
        method = getattr(self.log, _GLOG_LEVELS[severity])
        method("native_output", text=text, source=source, native_thread=int(thread),
               native_time=f"{day} {time_of_day}")

    def _warning(self, message: Warning | str, category: type[Warning], filename: str,
                 lineno: int, file: TextIO | None = None, line: str | None = None) -> None:
        self.log.warning("python_warning", category=category.__name__, text=str(message),
                         source=f"{display_path(filename)}:{lineno}")
