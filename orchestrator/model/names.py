"""The names initorch reads from people: step names and setting keys.

Both are plain ASCII ``lower_snake_case`` so that conditions can name them and
so that two names that look the same are the same.  A name that fails the rule
because it holds a Unicode look-alike (a Cyrillic ``e``, U+0435, in
``set_device``; a full-width ``m``, U+FF4D) is reported with that character
named: "unknown step" with a did-you-mean would hide the cause, and Python's
parser silently folds some look-alikes (NFKC) into the ASCII name, so a
condition would read another setting than the one written.
"""

from __future__ import annotations

import re
import unicodedata

STEP_NAME = re.compile(r"[a-z][a-z0-9_]*")
"""A step name (match with ``fullmatch``: ``$`` would accept a trailing newline)."""

KEY_SEGMENT = re.compile(r"[a-z_][a-z0-9_]*")
"""One segment of a dotted setting key (``hicache`` in ``hicache.layout``)."""

SETTING_KEY = re.compile(rf"{KEY_SEGMENT.pattern}(?:\.{KEY_SEGMENT.pattern})*")
"""A dotted setting key."""

# Letters from other scripts that render like ASCII ones in most fonts (Unicode's
# confusables.txt, restricted to the Latin letters names are made of: Cyrillic,
# Greek, dotless i, script g, Roman numerals).  Written as code points so that the
# source itself stays free of look-alikes.
_LOOKALIKES = {chr(code): letter for code, letter in (
    (0x0430, "a"), (0x0441, "c"), (0x0435, "e"), (0x04BB, "h"), (0x0456, "i"), (0x0458, "j"),
    (0x043A, "k"), (0x04CF, "l"), (0x043E, "o"), (0x0440, "p"), (0x051B, "q"), (0x0455, "s"),
    (0x0442, "t"), (0x0443, "y"), (0x0445, "x"), (0x051D, "w"), (0x03B1, "a"), (0x03B5, "e"),
    (0x03B9, "i"), (0x03BA, "k"), (0x03BD, "v"), (0x03BF, "o"), (0x03C1, "p"), (0x03C4, "t"),
    (0x03C5, "u"), (0x03C7, "x"), (0x0131, "i"), (0x0261, "g"), (0x2170, "i"), (0x217C, "l"),
)}


def describe_character(char: str) -> str:
    """The character, its code point and Unicode name, and the ASCII letter it
    passes for: ``'?' (U+0435 CYRILLIC SMALL LETTER IE, looks like 'e')``."""
    name = unicodedata.name(char, "unnamed character")
    ascii_twin = _LOOKALIKES.get(char) or _ascii_fold(char)
    twin = f", looks like '{ascii_twin}'" if ascii_twin else ""
    return f"{char!r} (U+{ord(char):04X} {name}{twin})"


def _ascii_fold(char: str) -> str | None:
    folded = unicodedata.normalize("NFKC", char)
    return folded if folded.isascii() and folded.isprintable() and folded != char else None


def non_ascii_problem(text: str, what: str) -> str | None:
    """Why ``text`` (a ``what``, e.g. "step name") is not plain ASCII, naming the first
    offending character and its position; ``None`` when it is ASCII."""
    for position, char in enumerate(text):
        if not char.isascii():
            return (f"{what} {text!r} contains the non-ASCII character "
                    f"{describe_character(char)} at position {position + 1}")
    return None


def name_problem(text: str, what: str, pattern: re.Pattern[str] = STEP_NAME) -> str | None:
    """Why ``text`` is not a valid ``what`` under ``pattern``; ``None`` when it is."""
    if not isinstance(text, str):
        return f"{what} must be a string, got {type(text).__name__} {text!r}"
    if pattern.fullmatch(text):
        return None
    return non_ascii_problem(text, what) or f"{what} {text!r} is not a valid name"
