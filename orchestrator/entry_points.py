"""The installed entry points of one group, found without importing importlib.metadata.

Every command loads the installed plugins, and importing :mod:`importlib.metadata`
took 18-24 ms of it (2026-12-06, 2 shared cores): it imports ``email``, ``zipfile``
and ``csv`` to read any distribution's metadata, and a plugin needs none of that.
So the folders on ``sys.path`` are read here as importlib.metadata's path finder
reads them (CPython 3.10-3.13's ``FastPath``, ``Lookup``, ``PathDistribution`` and
``Sectioned``): each folder's ``*.dist-info`` and ``*.egg-info`` children in the order
``os.listdir`` gives, grouped by their normalized name; a distribution counts where it
is first found, with entry points of the group or without; its ``entry_points.txt`` is
parsed only when it names the group's section.

Wherever that reading could differ from importlib.metadata's, importlib.metadata is
asked instead, and its answer is the one: a finder on ``sys.meta_path`` besides the
path finder that finds distributions itself, a ``sys.path`` entry that is not a folder
name (a zip, an egg) or not a string, a metadata folder whose suffix is not written in
lower case (its name then comes from its metadata), a file that is not UTF-8, a line
that is not ``name = value``.  ``tests/unit/plugins/test_entry_points.py`` holds the
two to the same answer.
"""

from __future__ import annotations

import os
import re
import sys
from functools import reduce
from importlib import import_module
from importlib.machinery import PathFinder
from typing import Any

from initorch.records import record

_SUFFIXES = (".dist-info", ".egg-info")
_SEPARATORS = re.compile(r"[-_.]+")
# importlib.metadata's EntryPoint.pattern: MODULE[:ATTRIBUTE.PATH][ [extras]].
_REFERENCE = re.compile(r"(?P<module>[\w.]+)\s*(:\s*(?P<attr>[\w.]+)\s*)?((?P<extras>\[.*\])\s*)?$")


@record
class InstalledEntryPoint:
    """One entry point: ``name = value`` under ``[group]`` of a distribution's
    ``entry_points.txt``."""

    name: str
    value: str
    group: str

    def load(self) -> Any:
        """What ``value`` names (``module:attribute.path``), imported: what
        ``importlib.metadata.EntryPoint.load`` returns."""
        match = _REFERENCE.match(self.value)
        if match is None:
            raise ValueError(f"entry point {self.name} = {self.value!r} names no module "
                             "(expected MODULE[:ATTRIBUTE])")
        attributes = filter(None, (match.group("attr") or "").split("."))
        return reduce(getattr, attributes, import_module(match.group("module")))


def installed_entry_points(group: str) -> list[InstalledEntryPoint]:
    """The entry points of ``group``, in the order ``importlib.metadata.entry_points(
    group=group)`` gives them."""
    found = _read_path_folders(group)
    return _ask_importlib_metadata(group) if found is None else found


class _Unusual(Exception):
    """Something only importlib.metadata reads as it does."""


def _read_path_folders(group: str) -> list[InstalledEntryPoint] | None:
    if any(finder is not PathFinder and hasattr(finder, "find_distributions")
           for finder in sys.meta_path):
        return None
    section = f"[{group}]"
    seen: set[str] = set()
    found: list[InstalledEntryPoint] = []
    try:
        for entry in sys.path:
            for name, folder in _distributions(entry):
                if name in seen:
                    continue
                seen.add(name)
                text = _read_entry_points_text(folder)
                if text is not None and section in text:
                    found += _parse(text, group)
    except _Unusual:
        return None
    return found


def _distributions(entry: object) -> list[tuple[str, str]]:
    """The metadata folders of one ``sys.path`` entry with their normalized names, in
    importlib.metadata's order: by name, in the order the names first appear."""
    if not isinstance(entry, str) or os.path.basename(entry).lower().endswith(".egg"):
        raise _Unusual
    root = entry or "."
    try:
        children = os.listdir(root)
    except OSError:
        if os.path.isfile(root):
            raise _Unusual from None  # a zip: importlib.metadata reads it as one
        return []  # a folder that is not there: nothing found, as there
    by_name: dict[str, list[str]] = {}
    for child in children:
        if not child.lower().endswith(_SUFFIXES):
            continue
        stem, suffix = os.path.splitext(child)
        if suffix not in _SUFFIXES:
            raise _Unusual  # ".DIST-INFO": importlib.metadata names it from its metadata
        name = _SEPARATORS.sub("_", stem.partition("-")[0]).lower()
        if not name:
            raise _Unusual  # "-1.0.dist-info": named from its metadata too
        by_name.setdefault(name, []).append(os.path.join(entry, child))
    return [(name, folder) for name, folders in by_name.items() for folder in folders]


def _read_entry_points_text(folder: str) -> str | None:
    try:
        with open(os.path.join(folder, "entry_points.txt"), encoding="utf-8") as stream:
            return stream.read()
    except (FileNotFoundError, IsADirectoryError, NotADirectoryError, PermissionError):
        return None  # what importlib.metadata's read_text leaves out
    except (OSError, UnicodeDecodeError):
        raise _Unusual from None


def _parse(text: str, group: str) -> list[InstalledEntryPoint]:
    """The entry points of ``group`` in ``text``, read as ``Sectioned`` reads it; every
    line of every section must be ``name = value``, as importlib.metadata requires."""
    section: str | None = None
    found: list[InstalledEntryPoint] = []
    for line in map(str.strip, text.splitlines()):
        if not line or line.startswith("#"):
            continue
        if line.startswith("[") and line.endswith("]"):
            section = line.strip("[]")
            continue
        if section is None:
            continue  # before the first section: read by nobody
        if "=" not in line:
            raise _Unusual  # importlib.metadata refuses the file
        if section == group:
            name, value = line.split("=", 1)
            found.append(InstalledEntryPoint(name.strip(), value.strip(), group))
    return found


def _ask_importlib_metadata(group: str) -> list[InstalledEntryPoint]:
    """What ``entry_points(group=group)`` returns, without parsing every distribution's
    entry points (in an SGLang venv, about 200 distributions and 50 files, that was two
    thirds of its time): the same distributions, the first of a name counting."""
    from importlib.metadata import distributions

    section = f"[{group}]"
    seen: set[str] = set()
    found: list[InstalledEntryPoint] = []
    for dist in distributions():
        # The key entry_points() takes them unique by (Python 3.10-3.13; typeshed omits it).
        name: str = dist._normalized_name  # type: ignore[attr-defined]
        if name in seen:
            continue
        seen.add(name)
        text = dist.read_text("entry_points.txt")
        if text and section in text:
            found += [InstalledEntryPoint(entry.name, entry.value, group)
                      for entry in dist.entry_points.select(group=group)]
    return found
