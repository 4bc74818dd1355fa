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
import sys
from collections.abc import Callable
from pathlib import Path

if sys.version_info >= (3, 11):
    from importlib.resources.abc import Traversable
else:  # deprecated from 3.12, removed in 3.14
    from importlib.abc import Traversable

from initorch.errors import ProfileError
from initorch.files import InputFileError, describe_os_error, read_input
from initorch.loading.document import ProfileDocument, read_profile
from initorch.location import SourceLocation, display_path
from initorch.printable import printable, shown
from initorch.records import record
from initorch.suggest import closest

PROFILE_SUFFIXES = (".yaml", ".yml")

AUTO_PROFILE = "auto"
"""Reserved: the device profile hardware detection chooses (:mod:`initorch.loading.detection`)."""


@record
class ProfileSource:
    """A named profile file, the plugin that contributed it (``None``: added in code)
    and, when it replaced another plugin's profile on purpose, that profile."""

    name: str
    file: Traversable
    plugin: str | None
    replaces: ProfileSource | None = None

    @property
    def owner(self) -> str:
        return f"plugin '{self.plugin}'" if self.plugin else "code"


def is_path_reference(ref: str) -> bool:
    """True when ``ref`` names a file rather than a catalogued profile."""
    return os.sep in ref or "/" in ref or ref.endswith(PROFILE_SUFFIXES)


class ProfileCatalog:
    """Named profiles from plugin directories, plus loading of files by path.

    ``provider`` names the plugin whose ``register`` function is running (the
    plugin loader sets it); it wins over the ``plugin`` a directory is added with.
    """

    def __init__(self) -> None:
        self._named: dict[str, ProfileSource] = {}
        self._cache: dict[str, ProfileDocument] = {}
        self.provider: str | None = None

    def add_directory(self, directory: Traversable, plugin: str | None = None, *,
                      override: bool = False) -> None:
        """Register every ``*.yaml`` in ``directory``.

        A name that is already taken (by another plugin, or twice in one) is a
        :class:`ProfileError`, so that a plugin never silently shadows a built-in
        profile, nor is silently ignored; ``override=True`` replaces the earlier
        profile on purpose, and listings show what it replaced.  Nothing is
        added when any name is refused.
        """
        plugin = self.provider or plugin
        added: dict[str, ProfileSource] = {}
        for entry in sorted(directory.iterdir(), key=lambda e: e.name):
            stem, suffix = os.path.splitext(entry.name)
            if suffix not in PROFILE_SUFFIXES or not entry.is_file():
                continue
            shown = display_path(str(entry))
            if stem == AUTO_PROFILE:
                raise ProfileError(f"{shown}: the profile name '{AUTO_PROFILE}' is reserved "
                                   "for hardware detection", hint="rename the file")
            earlier = added.get(stem) or self._named.get(stem)
            if earlier is not None and (stem in added or not override):
                raise ProfileError(
                    f"{shown}: profile '{stem}' of {ProfileSource(stem, entry, plugin).owner} "
                    f"has the name of profile '{stem}' of {earlier.owner} "
                    f"({display_path(str(earlier.file))})",
                    hint="rename one of them, or replace the earlier one on purpose with "
                         "add_directory(..., override=True)")
            added[stem] = ProfileSource(stem, entry, plugin, replaces=earlier)
        self._named.update(added)

    def copy(self) -> ProfileCatalog:
        """An independent catalog with the same profiles (the plugin loader's undo point)."""
        clone = ProfileCatalog()
        clone._named, clone._cache = dict(self._named), dict(self._cache)
        clone.provider = self.provider
        return clone

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
            raise ProfileError(f"unknown profile '{shown(ref)}'", location=location, hint=hint)
        file = display_path(str(source.file))
        if isinstance(source.file, Path):
            path = source.file
            return self._parse(file, ref, lambda: _read(path, ref, location))
        return self._parse(file, ref, lambda: source.file.read_text("utf-8"))  # in a package

    def _load_path(self, ref: str, relative_to: str | None,
                   location: SourceLocation | None) -> ProfileDocument:
        base = Path(relative_to).parent if relative_to else Path.cwd()
        path = Path(os.path.realpath(base / ref))  # a loop of links fails on open, clearly
        return self._parse(display_path(path), printable(path.stem),
                           lambda: _read(path, printable(ref), location))

    def read_files(self) -> list[str]:
        """The profile files read so far (as messages show them): a command's inputs,
        which none of its outputs may overwrite."""
        return sorted(self._cache)

    def _parse(self, shown_path: str, name: str, read: Callable[[], str]) -> ProfileDocument:
        """Read and parse a file once (the cache is keyed by the shown path): a plan asks
        for every profile to learn the device names, and an embedding server plans twice."""
        cached = self._cache.get(shown_path)
        if cached is None:
            cached = self._cache[shown_path] = read_profile(read(), shown_path, name)
        return cached


def _read(path: Path, ref: str, location: SourceLocation | None) -> str:
    """A profile file's text: a regular file, at most ``MAX_INPUT_BYTES``, UTF-8."""
    try:
        return read_input(path).decode("utf-8")
    except FileNotFoundError:
        raise ProfileError(f"profile file not found: {ref}", location=location,
                           hint=f"looked for {display_path(path)}") from None
    except InputFileError as exc:
        raise ProfileError(f"cannot read profile {ref}: {exc.strerror}", location=location,
                           hint="a profile is a regular YAML file") from None
    except OSError as exc:
        raise ProfileError(f"cannot read profile {ref}: {describe_os_error(exc)}",
                           location=location) from None
    except UnicodeDecodeError as exc:
        raise ProfileError(f"cannot read profile {ref}: not UTF-8 text ({exc.reason} at byte "
                           f"{exc.start})", location=location,
                           hint="save the file as UTF-8") from None
