"""Printing safely: the one place control characters are neutralised, and streams
whose failures never change an outcome.

A profile's file name, a setting's value or a step's error message can hold
bytes that a terminal obeys instead of showing: ESC sequences that clear the
screen or recolour text, a carriage return that overwrites the start of a line,
a line break that forges a ``run: ok`` line, bidirectional overrides that
reorder what is read.  Everything initorch prints passes through
:func:`printable`: the CLI's output streams, the log formatter, and the two
sources of free text inside one-line messages, file paths
(:func:`initorch.location.display_path`) and profile names taken from them.

Neutralised characters are shown as escapes (``\\x1b``, ``\\u202e``), so the
text stays readable and the fact that it held them stays visible.
"""

from __future__ import annotations

import contextlib
import errno
import io
import os
import re
from typing import TextIO

# What a terminal obeys instead of showing, besides line feeds and tabs: the other C0
# controls (ESC, CR, BEL, ...), DEL, the C1 controls (a terminal reads 0x9b as CSI),
# the line and paragraph separators and the bidirectional marks, embeddings,
# overrides and isolates (Unicode's Bidi_Control property).
_BEYOND_ASCII = "\x7f-\x9f\u061c\u200e\u200f\u2028\u2029\u202a-\u202e\u2066-\u2069"
_UNSAFE_KEEPING_LAYOUT = re.compile(f"[\x00-\x08\x0b-\x1f{_BEYOND_ASCII}]")
_ANY_UNSAFE = re.compile(f"[\x00-\x1f{_BEYOND_ASCII}]")
_UNSAFE_IN_JSON = re.compile(f"[{_BEYOND_ASCII}]")  # json.dumps escapes C0 itself


_NAMED = {"\n": "\\n", "\r": "\\r", "\t": "\\t"}


def _escape(match: re.Match[str]) -> str:
    # C0 as \xNN (as Python shows it); DEL, C1 and the rest as \uXXXX, which is also
    # a JSON escape: a JSON document written through a SafeStream stays valid JSON
    # (json.dumps escapes C0 itself, but leaves those raw).
    char = match.group(0)
    code = ord(char)
    return _NAMED.get(char) or (f"\\x{code:02x}" if code < 0x20 else f"\\u{code:04x}")


def _json_escape(match: re.Match[str]) -> str:
    return f"\\u{ord(match.group(0)):04x}"


def printable(text: str, *, layout: bool = False) -> str:
    """``text`` with every control character shown as an escape.

    With ``layout`` (multi-line output: tables, tracebacks) line feeds and tabs
    are kept; a carriage return never is.  Without it (a path, a name, a value
    inside a one-line message) nothing that moves the cursor survives.
    """
    pattern = _UNSAFE_KEEPING_LAYOUT if layout else _ANY_UNSAFE
    return pattern.sub(_escape, text) if pattern.search(text) else text


SHOWN_LIMIT = 80
"""The most characters of a user-supplied name a message quotes (see :func:`shown`)."""


def shown(name: object, limit: int = SHOWN_LIMIT) -> str:
    """A name the user supplied (a step, a profile, a setting key, a device) as a one-line
    message quotes it: every control character escaped, a line break included (a step
    name holding ``\\nrun: ok`` must not print a line of its own), and a name longer
    than ``limit`` characters cut to its start and end with its length between (an
    error about a 100 KB name is one readable line, not 100 KB).  Every message that
    echoes what a user typed or wrote goes through here."""
    text = name if isinstance(name, str) else str(name)
    if len(text) <= limit:
        return printable(text)
    keep = max(limit - 30, 8)
    head, tail = text[:keep * 3 // 4], text[-(keep // 4):]
    return f"{printable(head)}...[{len(text)} characters]...{printable(tail)}"


def printable_json(text: str) -> str:
    """JSON text from ``json.dumps`` (which escapes C0 controls itself) with the
    characters it leaves raw (DEL, C1, bidi marks, separators) written as
    ``\\uXXXX`` escapes: the same JSON value, safe on a terminal."""
    return _UNSAFE_IN_JSON.sub(_json_escape, text) if _UNSAFE_IN_JSON.search(text) else text


class SafeStream(io.TextIOBase):
    """A text stream that neutralises control characters (``neutralise``) and never
    raises on write or flush: a closed descriptor, a reader that went away or a
    full disk loses output, never the outcome of what was writing.  ``lost`` holds
    the first error that lost output; the descriptor is then pointed at
    ``/dev/null`` so that nothing fails twice (interpreter exit flushes again)."""

    def __init__(self, stream: TextIO | None, fd: int, *, neutralise: bool = True) -> None:
        super().__init__()
        self._stream = stream
        self._fd = fd
        self._neutralise = neutralise
        self.lost: OSError | None = None
        # The same stream without neutralising, for a writer that makes its own text
        # safe and adds its own escapes (the log handler's colours).
        self.verbatim = SafeStream(stream, fd, neutralise=False) if neutralise else self

    def write(self, text: str) -> int:
        if self._stream is None or self.lost is not None:
            return len(text)
        try:
            self._stream.write(printable(text, layout=True) if self._neutralise else text)
        except (OSError, ValueError) as exc:
            self._lose(exc)
        return len(text)

    def flush(self) -> None:
        if self._stream is None or self.lost is not None:
            return
        try:
            self._stream.flush()
        except (OSError, ValueError) as exc:
            self._lose(exc)

    def fileno(self) -> int:
        return self._fd

    def isatty(self) -> bool:
        try:
            return self._stream is not None and self.lost is None and self._stream.isatty()
        except (OSError, ValueError):
            return False

    def writable(self) -> bool:
        return True

    @property
    def encoding(self) -> str:  # type: ignore[override]
        return getattr(self._stream, "encoding", None) or "utf-8"

    @property
    def reader_went_away(self) -> bool:
        """True when output was lost because the reading end closed (``| head``)."""
        return isinstance(self.lost, BrokenPipeError) or (
            self.lost is not None and self.lost.errno == errno.EPIPE)

    def _lose(self, exc: BaseException) -> None:
        self.lost = exc if isinstance(exc, OSError) else OSError(errno.EBADF, str(exc))
        # Whatever is still buffered would fail again at interpreter exit.
        with contextlib.suppress(OSError):
            null = os.open(os.devnull, os.O_WRONLY)
            os.dup2(null, self._fd)
            os.close(null)
