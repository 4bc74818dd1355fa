"""Plugins: the one way steps, profiles and diagnoses get into initorch.

A plugin is a function ``register(registry)``.  Installed plugins are entry
points in the ``initorch.plugins`` group; the built-in steps and profiles are
themselves the ``builtin`` plugin (``initorch.steps:register``), so a vendor
package adds a device with exactly the same mechanism the core uses, and the
core never imports device code by name.  A launcher's own module is a plugin
too, named on the command line like ``pytest -p``: ``--plugin MODULE[:FUNCTION]``
(or ``INITORCH_PLUGINS``), no packaging needed.

Which plugins load, in this order:

1. ``builtin``, then the other installed entry points by name -- only those in
   ``INITORCH_PLUGINS_ALLOW`` (or ``allow=``) when an allow list is given;
2. the ``MODULE[:FUNCTION]`` items of ``INITORCH_PLUGINS``;
3. the ``plugins=`` items (the CLI's ``--plugin`` options);

never one that is denied (``no:NAME`` among those items, or ``deny=``), so that
a broken plugin can be switched off without uninstalling it.

A plugin that cannot be imported or fails while registering -- whatever it
raises, ``sys.exit`` and ``KeyboardInterrupt`` included -- is a
:class:`PluginError` (exit code 2) naming it; what it registered before failing
is undone.
"""

from __future__ import annotations

import os
import re
import sys
from collections.abc import Callable, Collection, Iterable, Mapping
from importlib import import_module

from initorch.entry_points import InstalledEntryPoint, installed_entry_points
from initorch.errors import InitorchError, PluginError, RunInterrupted, describe_exception
from initorch.gc_pause import gc_paused
from initorch.loading.catalog import ProfileCatalog
from initorch.loading.detection import ProbeCatalog
from initorch.model.registry import StepCatalog
from initorch.model.settings import SettingCatalog
from initorch.records import record
from initorch.reporting.diagnosis import DiagnosisCatalog

ENTRY_POINT_GROUP = "initorch.plugins"
BUILTIN = "builtin"
PLUGINS_ENV = "INITORCH_PLUGINS"
ALLOW_ENV = "INITORCH_PLUGINS_ALLOW"
DENY_PREFIX = "no:"

RegisterFunction = Callable[["Registry"], None]

_DOTTED = re.compile(r"^[A-Za-z_]\w*(?:\.[A-Za-z_]\w*)*$")
_IDENTIFIER = re.compile(r"^[A-Za-z_]\w*$")


@record
class PluginSelection:
    """What to load besides the installed plugins, and which installed ones to skip.

    Built from ``MODULE[:FUNCTION]`` and ``no:NAME`` items (see :meth:`parse`).
    """

    modules: tuple[str, ...] = ()
    deny: frozenset[str] = frozenset()

    @classmethod
    def parse(cls, items: Iterable[str], source: str) -> PluginSelection:
        """Parse ``--plugin`` / ``INITORCH_PLUGINS`` items; ``source`` is named in errors."""
        modules: list[str] = []
        deny: set[str] = set()
        for raw in items:
            item = raw.strip()
            if item.startswith(DENY_PREFIX):
                name = item[len(DENY_PREFIX):].strip()
                if not name:
                    raise InitorchError(f"{source}: '{raw}' names no plugin",
                                        hint="write no:NAME, e.g. no:vendor_x")
                deny.add(name)
                continue
            module, colon, function = item.partition(":")
            if not _DOTTED.match(module) or (colon and not _IDENTIFIER.match(function)):
                raise InitorchError(f"{source}: invalid plugin {raw!r}",
                                    hint="expected MODULE[:FUNCTION] (e.g. my_server.steps or "
                                         "my_server.steps:register) or no:NAME")
            if item not in modules:
                modules.append(item)
        return cls(tuple(modules), frozenset(deny))

    @classmethod
    def from_environment(cls, environ: Mapping[str, str]) -> PluginSelection:
        """The comma-separated items of ``INITORCH_PLUGINS``."""
        items = [item for item in environ.get(PLUGINS_ENV, "").split(",") if item.strip()]
        return cls.parse(items, PLUGINS_ENV)

    def __add__(self, other: PluginSelection) -> PluginSelection:
        modules = self.modules + tuple(m for m in other.modules if m not in self.modules)
        return PluginSelection(modules, self.deny | other.deny)


class Registry:
    """Everything plugins contribute: steps (with the settings they declare),
    free-standing settings, named profiles, failure diagnoses, device probes."""

    def __init__(self) -> None:
        self.settings = SettingCatalog()
        self.steps = StepCatalog(self.settings)
        self.profiles = ProfileCatalog()
        self.diagnoses = DiagnosisCatalog()
        self.probes = ProbeCatalog()
        self.plugins: list[str] = []

    @classmethod
    def with_plugins(
        cls,
        plugins: Iterable[str] = (),
        *,
        allow: Collection[str] | None = None,
        deny: Collection[str] = (),
        environ: Mapping[str, str] | None = None,
        on_error: Callable[[PluginError], None] | None = None,
    ) -> Registry:
        """A registry populated by the installed plugins and the ones named here.

        ``plugins`` are ``MODULE[:FUNCTION]`` items (the function defaults to
        ``register``) or ``no:NAME`` to skip an installed plugin.  ``allow``
        limits the installed plugins besides ``builtin`` to those names; the
        environment (``os.environ`` unless ``environ`` is given) adds
        ``INITORCH_PLUGINS`` and ``INITORCH_PLUGINS_ALLOW``.  A plugin that
        fails raises :class:`PluginError`, or, with ``on_error``, is reported
        to it and left out (its registrations undone).
        """
        environ = os.environ if environ is None else environ
        selection = (PluginSelection.from_environment(environ)
                     + PluginSelection.parse(plugins, "plugins"))
        denied = selection.deny | set(deny)
        allowed = _allow_list(allow, environ)
        registry = cls()
        with gc_paused():  # the steps, settings and profiles registered hold no cycle
            registry._load_selected(selection, denied, allowed, on_error)
        return registry

    def _load_selected(self, selection: PluginSelection, denied: Collection[str],
                       allowed: set[str] | None,
                       on_error: Callable[[PluginError], None] | None) -> None:
        """The installed plugins (builtin first), then the ones named, less ``denied``."""
        for entry in sorted(installed_entry_points(ENTRY_POINT_GROUP), key=_builtin_first):
            if entry.name in denied or (allowed is not None and entry.name != BUILTIN
                                        and entry.name not in allowed):
                continue
            self._load_reporting(entry.name, _entry_point_function(entry), on_error)
        for spec in selection.modules:
            if spec in denied or spec.partition(":")[0] in denied:
                continue
            self._load_reporting(spec, _module_function(spec), on_error)

    def load_plugin(self, name: str, register: RegisterFunction) -> None:
        """Run one plugin's ``register`` function; failures name the plugin.

        Whatever the plugin registered before it failed is undone.  An
        :class:`InitorchError` it raises (a duplicate step, say) passes through
        unchanged; anything else, ``SystemExit`` and ``KeyboardInterrupt``
        included, becomes a :class:`PluginError`; :class:`RunInterrupted` (a signal
        the CLI turned into one while plugins load) passes through.
        """
        self._load(name, lambda: register)

    def _load_reporting(self, name: str, find: Callable[[], RegisterFunction],
                        on_error: Callable[[PluginError], None] | None) -> None:
        try:
            self._load(name, find)
        except InitorchError as error:  # a PluginError, or a bad declaration it made
            if on_error is None:
                raise
            on_error(error if isinstance(error, PluginError) else
                     PluginError(name, f"plugin '{name}' failed to register: {error}"))

    def _load(self, name: str, find: Callable[[], RegisterFunction]) -> None:
        saved = self.steps.copy(), self.profiles.copy(), self.diagnoses.copy(), \
            self.probes.copy()
        hint = _hint(name)
        try:
            try:
                register = find()
            except (PluginError, RunInterrupted):  # a signal is not the plugin's failure
                raise
            except BaseException as exc:  # an import may do anything, sys.exit included
                raise PluginError(name, f"plugin '{name}' failed to load: "
                                        f"{describe_exception(exc)}", hint=hint) from exc
            self.steps.provider = self.profiles.provider = self.settings.provider = name
            try:
                register(self)
            except (InitorchError, RunInterrupted):
                raise
            except BaseException as exc:
                raise PluginError(name, f"plugin '{name}' failed to register: "
                                        f"{describe_exception(exc)}", hint=hint) from exc
            finally:
                self.steps.provider = self.profiles.provider = self.settings.provider = None
        except BaseException:
            self.steps, self.profiles, self.diagnoses, self.probes = saved
            self.settings = self.steps.settings  # the steps' copy holds the declarations
            raise
        self.plugins.append(name)


def _allow_list(allow: Collection[str] | None, environ: Mapping[str, str]
                ) -> set[str] | None:
    names = set(allow) if allow is not None else None
    raw = environ.get(ALLOW_ENV)
    if raw is not None:
        listed = {name.strip() for name in raw.split(",") if name.strip()}
        names = listed if names is None else names & listed
    return names


def _builtin_first(entry: InstalledEntryPoint) -> tuple[int, str]:
    return (entry.name != BUILTIN, entry.name)


def _entry_point_function(entry: InstalledEntryPoint) -> Callable[[], RegisterFunction]:
    def find() -> RegisterFunction:
        function: RegisterFunction = entry.load()
        return function

    return find


def _module_function(spec: str) -> Callable[[], RegisterFunction]:
    """Import ``MODULE`` of ``MODULE[:FUNCTION]`` and return its function, as ``python -m``
    would find the module (installed, on PYTHONPATH, or in the current folder)."""
    module_name, _, function_name = spec.partition(":")
    function_name = function_name or "register"

    def find() -> RegisterFunction:
        here = os.getcwd()
        if here not in sys.path:
            sys.path.append(here)  # after the installed packages, so it never shadows them
        module = import_module(module_name)
        function = getattr(module, function_name, None)
        if not callable(function):
            raise PluginError(spec, f"plugin '{spec}': module '{module_name}' has no function "
                                    f"'{function_name}'",
                              hint="define register(registry) in it, or name the function: "
                                   "MODULE:FUNCTION")
        return function  # type: ignore[no-any-return]

    return find


def _hint(name: str) -> str:
    return (f"fix or uninstall it, or disable it: --plugin {DENY_PREFIX}{name} or "
            f"{PLUGINS_ENV}={DENY_PREFIX}{name}")
