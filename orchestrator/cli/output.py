"""What every command writes: its output on stdout, and each problem of an error as one
line on stderr (``file:line:col: what (how to fix)``)."""

from __future__ import annotations

import sys

from initorch.errors import InitorchError


def emit(text: str) -> None:
    sys.stdout.write(text + "\n")


def report_error(error: InitorchError, prefix: str = "") -> None:
    problems = error.problems
    if len(problems) == 1:
        sys.stderr.write(f"initorch: error: {prefix}{problems[0]}\n")
        return
    sys.stderr.write(f"initorch: error: {prefix}{error.args[0]}\n")
    for problem in problems:
        sys.stderr.write(f"  {problem}\n")
