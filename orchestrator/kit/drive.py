"""Drive mode's registry: the installed steps, with some actions performed by the engine.

In drive mode initorch runs part of an engine's start-up as a plan, and the steps of that
part call the engine's own functions.  A step keeps its contract (edges, settings, device
flags), so the plan keeps its shape and is checked like any other; only its action
changes, and it loses its teardown and preview: what the engine builds, the engine owns,
and initorch never tears it down.  :func:`engine_performed` gives the registry such a run
plans from: every installed plugin, each step still credited to the plugin that
registered it, with the named steps' actions replaced.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Mapping
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from initorch import Registry
    from initorch.plugin import Step, StepContext

__all__ = ["Action", "engine_performed"]

Action = Callable[["StepContext"], Any]
"""A step's action: what it does with its context; its return value is its output."""


def engine_performed(actions: Mapping[str, Action], *, engine: str,
                     installed: Registry | None = None) -> Registry:
    """The installed plugins' registry (``installed``, by default
    :meth:`Registry.with_plugins`) with the action of each step named in ``actions``
    replaced by the engine's function; its description says ``<engine>: <first sentence
    of the function's docstring>``."""
    from initorch import Registry

    installed = Registry.with_plugins() if installed is None else installed
    registry = Registry()
    registry.steps = installed.steps.copy()  # the steps as registered, then the engine's
    registry.settings = registry.steps.settings
    for name, action in actions.items():
        if name in registry.steps:
            registry.steps.substitute(_performed(registry.steps.get(name), action, engine))
    registry.profiles, registry.diagnoses, registry.probes = (
        installed.profiles, installed.diagnoses, installed.probes)
    registry.plugins = [*installed.plugins]
    return registry


def _performed(step: Step, action: Action, engine: str) -> Step:
    summary = (action.__doc__ or "").split(";")[0].split(".")[0].strip()
    return dataclasses.replace(step, action=action, teardown=None, preview=None,
                               description=f"{engine}: {summary}")
