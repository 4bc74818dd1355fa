"""Text that is safe to show on a terminal: the one place control characters are neutralised.

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

import re

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
    char = match.group(0)
    code = ord(char)
    return _NAMED.get(char) or (f"\\x{code:02x}" if code < 0x100 else f"\\u{code:04x}")


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


def printable_json(text: str) -> str:
    """JSON text from ``json.dumps`` (which escapes C0 controls itself) with the
    characters it leaves raw (DEL, C1, bidi marks, separators) written as
    ``\\uXXXX`` escapes: the same JSON value, safe on a terminal."""
    return _UNSAFE_IN_JSON.sub(_json_escape, text) if _UNSAFE_IN_JSON.search(text) else text
