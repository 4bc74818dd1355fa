"""The engine an integration observes, named once: its package, its distributions, its words.

Every part of the kit that must say or find something of the engine (a message that names
its release, the hook that re-points the engine's own stale bindings, the frame of the
engine's package that made a vendor call, the package folder inside a wheel) reads it from
one :class:`Engine` value that the integration declares.  Nothing here imports the engine:
its version comes from the installed distribution's metadata and its folder from the
import system's finders, so that asking costs a dry run nothing and never runs the
engine's (torch-importing) code.
"""

from __future__ import annotations

import importlib.util
import io
import sys
import types
from importlib.metadata import Distribution, PackageNotFoundError, distribution
from pathlib import Path

from initorch.records import record

__all__ = ["Engine"]


@record
class Engine:
    """An inference engine as the kit names and finds it.

    ``name`` is how messages name it; ``package`` its top-level import package;
    ``distributions`` the names its release may be installed under
    (a community build can publish the same package under another name); ``marker`` a
    file inside the package that only a real tree of the engine has (how a wheel or a
    folder is recognised as one); ``command`` the ``initorch`` sub-command of its
    integration (``initorch <command> drift``); ``integration`` the integration's own name,
    which starts each line it writes into the engine's log."""

    name: str
    package: str
    distributions: tuple[str, ...]
    marker: str
    command: str
    integration: str

    def version(self) -> str | None:
        """The installed release, read from its distribution's metadata (never imported):
        the ``Version`` field of the metadata's header, what ``importlib.metadata.version``
        returns, without parsing the whole file as that does (an engine's metadata
        carries its README, whose parse took 1-2 ms of every process of a launch)."""
        for name in self.distributions:
            try:
                found = distribution(name)
            except PackageNotFoundError:
                continue
            return _header_version(found) or found.version
        return None

    def label(self, unknown: str = "(version unknown)") -> str:
        """``<name> <version>``: the engine and its installed release, as messages name
        it (``unknown`` in place of a version it cannot find)."""
        return f"{self.name} {self.version() or unknown}"

    def package_root(self) -> Path | None:
        """The installed package's folder: from the module when the engine imported it,
        else found without executing it; ``None`` when it is not installed."""
        module = sys.modules.get(self.package)
        location = getattr(module, "__file__", None) if module is not None else None
        if location:
            return Path(location).parent
        try:
            spec = importlib.util.find_spec(self.package)
        except (ImportError, ValueError):
            return None
        if spec is None or not spec.submodule_search_locations:
            return None
        return Path(next(iter(spec.submodule_search_locations)))

    def owns(self, module: str) -> bool:
        """Whether dotted ``module`` is one of the engine's own modules."""
        return module == self.package or module.startswith(f"{self.package}.")

    def loaded_modules(self) -> list[types.ModuleType]:
        """The engine's own modules imported so far: what :meth:`owns` selects from
        ``sys.modules``, tested in one C call per module (a rank has some 7,000 modules
        loaded, and a call of ``owns`` per module was 4.5 ms of each hook walk)."""
        package, prefix = self.package, f"{self.package}."
        return [module for name, module in list(sys.modules.items())
                if name.startswith(prefix) or name == package]


def _header_version(found: Distribution) -> str | None:
    """The ``Version`` field of ``found``'s metadata header (the lines before the first
    blank one), as the email parser reads it; ``None`` when the header has none."""
    text = found.read_text("METADATA") or found.read_text("PKG-INFO") or ""
    for line in io.StringIO(text, newline=None):  # line by line, any line ending
        if not line.strip():
            return None  # the header's end: the rest is the description
        field, colon, value = line.partition(":")
        if colon and field.strip().lower() == "version":
            return value.strip()
    return None
