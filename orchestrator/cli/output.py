"""What every command writes: its output on stdout, and each problem of an error as one
line on stderr (``file:line:col: what (how to fix)``).

One line each, whatever a message holds: each is written through
:func:`~initorch.printable.printable` without layout, so a line break inside a name
that a message quotes is shown as ``\\n`` and cannot start a line of its own (a
forged ``run: ok``).  Names are also shortened where a message quotes them
(:func:`~initorch.printable.shown`); this is the net under every message."""

from __future__ import annotations

import sys

from initorch.errors import InitorchError
from initorch.printable import printable


def emit(text: str) -> None:
    sys.stdout.write(text + "\n")


def report_error(error: InitorchError, prefix: str = "") -> None:
    problems = error.problems
    if len(problems) == 1:
        sys.stderr.write(f"initorch: error: {printable(f'{prefix}{problems[0]}')}\n")
        return
    sys.stderr.write(f"initorch: error: {printable(f'{prefix}{error.args[0]}')}\n")
    for problem in problems:
        sys.stderr.write(f"  {printable(str(problem))}\n")
