"""Where profiles come from: plugin-provided directories and plain files.

A profile reference is either a *name* (``npu``), looked up in the directories
that plugins registered (the built-in ``profiles/`` package first), or a *path*
to a YAML file (anything containing a path separator or ending in ``.yaml`` /
``.yml``), resolved against the referring file's folder or the working
directory.  Parsed files are cached, so a profile extended by several others is
read once.  A loaded document keeps its format problems (``problems``); they
are reported with everything else that is wrong when the selection is resolved.
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from importlib.abc import Traversable
from pathlib import Path

from initorch.errors import ProfileError
from initorch.loading.document import ProfileDocument, read_profile
from initorch.location import SourceLocation, display_path
from initorch.suggest import closest

PROFILE_SUFFIXES = (".yaml", ".yml")


@dataclass(frozen=True, slots=True)
class ProfileSource:
    """A named profile file contributed by a plugin."""

    name: str
    file: Traversable
    plugin: str


def is_path_reference(ref: str) -> bool:
    """True when ``ref`` names a file rather than a catalogued profile."""
    return os.sep in ref or "/" in ref or ref.endswith(PROFILE_SUFFIXES)


class ProfileCatalog:
    """Named profiles from plugin directories, plus loading of files by path."""

    def __init__(self) -> None:
        self._named: dict[str, ProfileSource] = {}
        self._cache: dict[str, ProfileDocument] = {}

    def add_directory(self, directory: Traversable, plugin: str) -> None:
        """Register every ``*.yaml`` in ``directory``; an earlier plugin's name wins."""
        for entry in sorted(directory.iterdir(), key=lambda e: e.name):
            stem, suffix = os.path.splitext(entry.name)
            if suffix in PROFILE_SUFFIXES and entry.is_file():
                self._named.setdefault(stem, ProfileSource(stem, entry, plugin))

    def names(self) -> list[str]:
        return sorted(self._named)

    def source(self, name: str) -> ProfileSource:
        return self._named[name]

    def load(self, ref: str, *, relative_to: str | None = None,
             location: SourceLocation | None = None) -> ProfileDocument:
        """Load the profile ``ref`` (a name or a path); errors point at ``location``."""
        if is_path_reference(ref):
            return self._load_path(ref, relative_to, location)
        source = self._named.get(ref)
        if source is None:
            guess = closest(ref, self._named)
            hint = f"did you mean '{guess}'?" if guess else f"available: {', '.join(self.names())}"
            raise ProfileError(f"unknown profile '{ref}'", location=location, hint=hint)
        return self._parse(display_path(str(source.file)), ref, source.file.read_text("utf-8"))

    def _load_path(self, ref: str, relative_to: str | None,
                   location: SourceLocation | None) -> ProfileDocument:
        base = Path(relative_to).parent if relative_to else Path.cwd()
        path = (base / ref).resolve()
        try:
            text = path.read_text("utf-8")
        except FileNotFoundError:
            raise ProfileError(f"profile file not found: {ref}", location=location,
                               hint=f"looked for {path}") from None
        except (OSError, UnicodeDecodeError) as exc:
            raise ProfileError(f"cannot read profile {ref}: {exc}", location=location) from None
        return self._parse(display_path(path), path.stem, text)

    def _parse(self, shown_path: str, name: str, text: str) -> ProfileDocument:
        cached = self._cache.get(shown_path)
        if cached is None:
            cached = self._cache[shown_path] = read_profile(text, shown_path, name)
        return cached
