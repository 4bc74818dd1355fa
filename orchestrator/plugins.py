"""Plugins: the one way steps, profiles and diagnoses get into initorch.

A plugin is an entry point in the ``initorch.plugins`` group naming a function
``register(registry)``.  The built-in steps and profiles are themselves the
``builtin`` plugin (``steps:register``), so a vendor package adds a device with
exactly the same mechanism the core uses, and the core never imports device
code by name.
"""

from __future__ import annotations

from collections.abc import Callable
from importlib.metadata import EntryPoint, entry_points

from initorch.errors import InitorchError
from initorch.loading.catalog import ProfileCatalog
from initorch.model.registry import StepRegistry
from initorch.model.settings import SettingCatalog
from initorch.reporting.diagnosis import DiagnosisBook

ENTRY_POINT_GROUP = "initorch.plugins"


class PluginError(InitorchError):
    """A plugin could not be loaded or failed while registering."""


class Registry:
    """Everything plugins contribute: steps (with the settings they declare),
    free-standing settings, named profiles, failure diagnoses."""

    def __init__(self) -> None:
        self.settings = SettingCatalog()
        self.steps = StepRegistry(self.settings)
        self.profiles = ProfileCatalog()
        self.diagnoses = DiagnosisBook()
        self.plugins: list[str] = []

    @classmethod
    def with_plugins(cls) -> Registry:
        """A registry populated by every installed ``initorch.plugins`` entry point."""
        registry = cls()
        for entry in sorted(entry_points(group=ENTRY_POINT_GROUP), key=_builtin_first):
            registry.load_plugin(entry.name, _loader(entry))
        return registry

    def load_plugin(self, name: str, register: Callable[[Registry], None]) -> None:
        """Run one plugin's ``register`` function; failures name the plugin."""
        try:
            register(self)
        except InitorchError:
            raise
        except Exception as exc:
            raise PluginError(f"plugin '{name}' failed to register: "
                              f"{type(exc).__name__}: {exc}",
                              hint="fix or uninstall the plugin") from exc
        self.plugins.append(name)


def _builtin_first(entry: EntryPoint) -> tuple[int, str]:
    return (entry.name != "builtin", entry.name)


def _loader(entry: EntryPoint) -> Callable[[Registry], None]:
    def register(registry: Registry) -> None:
        function = entry.load()
        function(registry)

    return register
