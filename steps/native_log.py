"""Capture what native code prints to stderr while a vendor call runs.

Mooncake, CANN and NCCL report the *reason* for a failure through glog or
printf on file descriptor 2 and hand Python only a return code.  Capturing fd 2
around the call lets a step attach those lines to its error, so that diagnosis
can say "aclrtGetDevice returned 107002" instead of "initialize returned -1".
Nothing is swallowed: the captured bytes are written back to the real stderr.
"""

from __future__ import annotations

import os
import sys
import tempfile
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass

# fd 2 is process-wide: two captures at once would steal each other's output.
_CAPTURE_LOCK = threading.Lock()


@dataclass(slots=True)
class NativeLog:
    """Text native code wrote to stderr during the capture (filled on exit)."""

    text: str = ""

    def error_lines(self) -> str:
        """Only the glog error/fatal lines (``E…``/``F…``), or all text if there are none."""
        lines = [line for line in self.text.splitlines() if line[:1] in ("E", "F")]
        return "\n".join(lines) if lines else self.text.strip()


@contextmanager
def capture_native_stderr() -> Iterator[NativeLog]:
    """Redirect fd 2 to a temporary file for the block, then replay it to stderr."""
    log = NativeLog()
    with _CAPTURE_LOCK, tempfile.TemporaryFile() as sink:
        sys.stderr.flush()
        saved = os.dup(2)
        os.dup2(sink.fileno(), 2)
        try:
            yield log
        finally:
            sys.stderr.flush()
            os.dup2(saved, 2)
            os.close(saved)
            sink.seek(0)
            data = sink.read()
            log.text = data.decode("utf-8", "replace")
            if data:
                os.write(2, data)
