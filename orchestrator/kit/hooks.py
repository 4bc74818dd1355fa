"""Hooks on an engine's functions, each applied when its module is imported and checked.

A hook wraps a dotted target (``around``: ``function(original, *args, **kwargs)``;
``replace``: ``function(*args, **kwargs)``) and re-points the stale ``from X import Y``
bindings the engine's other modules hold, as an engine's own hook registry would.  Such a
registry walks every loaded module once per target, which measured about two seconds of
each rank's start-up for a dozen targets; here one walk serves all the targets applied
together, and none is needed for a module that was just imported (nobody has bound its
names yet).  A missing target or a hook that did not take is a :class:`HookError`, which
the integration turns into an exit: a start-up must never go on unobserved while its
integration believes it is watching.

A hook is applied when its module is imported: at once for a module the engine already
imported, else right after the engine imports it (:mod:`initorch.kit.imports`).
Resolving a target imports its module; done at plugin load for every target, that moves
seconds of the engine's own imports into the plugin, and imports modules (a storage
backend's) into launches that never use them.  That a target's module exists is checked
at once, without running it.
"""

from __future__ import annotations

import contextlib
import functools
import pkgutil
import sys
import types
from collections.abc import Callable
from typing import TYPE_CHECKING, Any, Literal

from initorch.kit.cost import COST
from initorch.kit.imports import after_import, module_of

if TYPE_CHECKING:
    from initorch.kit.engine import Engine

__all__ = ["Hook", "HookError", "HookKind", "apply_hooks"]

HookKind = Literal["around", "replace"]
Hook = tuple[Callable[..., Any], HookKind]
"""A hook function and how it wraps its target."""


class HookError(RuntimeError):
    """A hook target is missing in the installed engine, or the hook did not apply."""


def apply_hooks(hooks: dict[str, Hook], engine: Engine) -> None:
    """Apply every hook on ``engine``'s functions when its module is imported, and check
    each once applied."""
    by_module: dict[str, dict[str, Hook]] = {}
    for target, hook in hooks.items():
        module = module_of(target)
        if module is None:
            raise HookError(f"{engine.integration}: hook target {target} is missing: no "
                            f"module of it can be found ({_installed(engine)})")
        by_module.setdefault(module, {})[target] = hook
    ready = {target: hook for module, group in by_module.items() if module in sys.modules
             for target, hook in group.items()}
    if ready:  # one walk for every target the engine imported already
        _apply_now(ready, engine, repoint=True)
    for module, group in by_module.items():
        if module not in sys.modules:
            after_import(module, _applier(group, engine, repoint=False))


def _applier(hooks: dict[str, Hook], engine: Engine, *,
             repoint: bool) -> Callable[[types.ModuleType], None]:
    """The callback that applies ``hooks`` once their module is imported."""

    def apply_when_imported(_module: types.ModuleType) -> None:
        _apply_now(hooks, engine, repoint=repoint)

    return apply_when_imported


def _apply_now(hooks: dict[str, Hook], engine: Engine, *, repoint: bool) -> None:
    """Wrap each target of ``hooks`` (their modules are imported); with ``repoint``, also
    the bindings other modules already took of a wrapped module-level function."""
    with COST.timed("hooks"):
        stale: dict[int, tuple[Any, Callable[..., Any]]] = {}
        for target, (function, kind) in hooks.items():
            owner, attribute = _owner(target, engine)
            original = getattr(owner, attribute)
            if getattr(original, "__initorch_hook__", False):
                continue  # applied before (a second Scheduler in one process)
            wrapper = _wrapped(original, function, kind)
            setattr(owner, attribute, wrapper)
            if isinstance(owner, types.ModuleType):
                stale[id(original)] = (original, wrapper)
        if repoint and stale:
            _repoint(stale, engine)
        for target in hooks:
            owner, attribute = _owner(target, engine)
            if not getattr(getattr(owner, attribute), "__initorch_hook__", False):
                raise HookError(f"{engine.integration}: the hook on {target} did not apply "
                                f"({_installed(engine)})")


def _wrapped(original: Callable[..., Any], function: Callable[..., Any],
             kind: HookKind) -> Callable[..., Any]:
    if kind == "around":
        def hooked(*args: Any, **kwargs: Any) -> Any:
            return function(original, *args, **kwargs)
    else:
        def hooked(*args: Any, **kwargs: Any) -> Any:
            return function(*args, **kwargs)
    functools.update_wrapper(hooked, original)  # __wrapped__ is the original
    hooked.__initorch_hook__ = True  # type: ignore[attr-defined]
    return hooked


def _repoint(stale: dict[int, tuple[Any, Callable[..., Any]]], engine: Engine) -> None:
    """One walk over the engine's loaded modules: a name bound to a wrapped original
    (``from X import f`` before the hook) is bound to its wrapper.  Only the engine's
    modules: a binding matters where the engine's own code calls through it."""
    originals = stale.keys()
    for module in engine.loaded_modules():
        try:
            namespace = vars(module)
        except TypeError:
            continue
        if originals.isdisjoint(map(id, namespace.values())):
            continue  # nearly every module: tested in C, not attribute by attribute
        for attribute, value in list(namespace.items()):
            found = stale.get(id(value))
            if found is not None and found[0] is value:
                with contextlib.suppress(AttributeError, TypeError):
                    setattr(module, attribute, found[1])


def _owner(target: str, engine: Engine) -> tuple[Any, str]:
    owner, _, attribute = target.rpartition(".")
    parent = _resolve(owner, target, engine)
    if not hasattr(parent, attribute):
        raise HookError(f"{engine.integration}: hook target {target} is missing: {owner} "
                        f"has no attribute {attribute!r} ({_installed(engine)})")
    return parent, attribute


def _resolve(name: str, target: str, engine: Engine) -> Any:
    try:
        return pkgutil.resolve_name(name)
    except (ImportError, AttributeError, ValueError) as error:
        raise HookError(f"{engine.integration}: hook target {target} is missing: cannot "
                        f"resolve {name} ({type(error).__name__}: {error}; "
                        f"{_installed(engine)})") from error


def _installed(engine: Engine) -> str:
    return engine.label("(not installed)")
