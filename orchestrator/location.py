"""Where a piece of configuration or code was declared.

Locations travel with every edge, setting and error so that a message can say
``profiles/npu.yaml:12:5`` instead of "somewhere in your profiles".
"""

from __future__ import annotations

import functools
import os
import sys
import sysconfig

from initorch.printable import printable
from initorch.records import record


@record(order=True)
class SourceLocation:
    """A 1-based line and column in a file; ``column`` 0 means "whole line"."""

    path: str
    line: int = 0
    column: int = 0

    def __str__(self) -> str:
        if not self.line:
            return self.path
        if not self.column:
            return f"{self.path}:{self.line}"
        return f"{self.path}:{self.line}:{self.column}"


COMMAND_LINE = SourceLocation("<command line>")


SITE_PACKAGES = "<site-packages>"
"""How a path inside the installed packages begins in messages."""


@functools.cache
def _installed_roots() -> tuple[str, ...]:
    """This interpreter's package folders (purelib, platlib), longest first."""
    paths = sysconfig.get_paths()
    roots = {os.path.abspath(paths[key]) for key in ("purelib", "platlib") if key in paths}
    return tuple(sorted(roots, key=len, reverse=True))


def display_path(path: str | os.PathLike[str]) -> str:
    """``path`` as messages show it: ``./relative`` when it lies below the working
    directory (the ``./`` names the root it is relative to),
    ``<site-packages>/package/...`` inside the installed packages (a built-in profile
    is ``<site-packages>/initorch/profiles/base.yaml``, the same on every machine, not a
    venv's long absolute path), absolute otherwise.

    Never a bare relative path, so that a line read away from the shell that
    printed it (a log collector, a saved plan) still says where the file is.
    Control characters in the name are shown as escapes (see
    :func:`initorch.printable.printable`): a file name cannot forge output.
    """
    text = os.path.abspath(os.fspath(path))
    try:
        relative = os.path.relpath(text)
    except ValueError:  # another drive (Windows)
        return printable(text)
    if not relative.startswith(os.pardir):
        return printable(os.curdir + os.sep + relative)
    for root in _installed_roots():
        if text.startswith(root + os.sep):
            return printable(SITE_PACKAGES + text[len(root):])
    return printable(text)


def caller_location(depth: int = 2) -> SourceLocation:
    """Location of the code ``depth`` frames up (used to record where a step was declared).

    A plugin declares thousands of steps from a few files: how a file is shown is
    worked out once per file and working directory (:func:`_code_path`), not once per
    declaration (``os.path.relpath`` each time was most of registering 20,000 steps), and
    a line that declares steps in a loop gives one location, made once."""
    try:
        frame = sys._getframe(depth)  # 0 is this function, 1 its caller
    except ValueError:  # fewer frames than that
        return SourceLocation("<unknown>")
    return _code_location(frame.f_code.co_filename, frame.f_lineno, os.getcwd())


@functools.lru_cache(maxsize=4096)
def _code_location(filename: str, line: int, cwd: str) -> SourceLocation:
    """The (immutable, so shared) location of ``line`` of a code file."""
    return SourceLocation(_code_path(filename, cwd), line)


@functools.lru_cache(maxsize=1024)
def _code_path(filename: str, cwd: str) -> str:
    """:func:`display_path` of a code file, kept per working directory (``cwd``: what
    the display depends on besides the name; the installed roots never change)."""
    return display_path(filename)
