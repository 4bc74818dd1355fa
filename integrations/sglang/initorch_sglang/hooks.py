"""Hooks on SGLang's functions, each applied when its module is imported and checked.

A hook wraps a dotted target (``around``: ``function(original, *args, **kwargs)``;
``replace``: ``function(*args, **kwargs)``) and re-points the stale ``from X import Y``
bindings other modules hold, as SGLang's own ``HookRegistry`` does
(``srt/plugins/hook_registry.py:320-347``).  It is not SGLang's registry that applies
them: the registry walks every loaded module once per target, which measured about two
seconds of each rank's start-up for initorch's dozen targets; here one walk serves all
the targets applied together, and none is needed for a module that was just imported
(nobody has bound its names yet).  A missing target or a hook that did not take is a
:class:`HookError`, which the plugin turns into an exit: SGLang's registry would only
log it (:162-166), and a start-up would go on unobserved.

A hook is applied when its module is imported: at once for a module SGLang already
imported, else right after SGLang imports it (:mod:`initorch_sglang.imports`).
Resolving a target imports its module; done at plugin load for every target, that moved
seconds of SGLang's own imports (``ModelRunner``, ``TpModelWorker``) into the plugin and
imported the Mooncake store's module into launches that never use it.  That a target's
module exists is checked at once, without running it.
"""

from __future__ import annotations

import contextlib
import functools
import pkgutil
import sys
import types
from collections.abc import Callable
from typing import Any, Literal

from initorch_sglang.cost import COST
from initorch_sglang.imports import after_import, module_of

__all__ = ["HookError", "HookKind", "apply"]

HookKind = Literal["around", "replace"]


class HookError(RuntimeError):
    """A hook target is missing in the installed SGLang, or the hook did not apply."""


def apply(hooks: dict[str, tuple[Callable[..., Any], HookKind]]) -> None:
    """Apply every hook when its module is imported, and check each once applied."""
    by_module: dict[str, dict[str, tuple[Callable[..., Any], HookKind]]] = {}
    for target, hook in hooks.items():
        module = module_of(target)
        if module is None:
            raise HookError(f"initorch-sglang: hook target {target} is missing: no module of "
                            f"it can be found ({_sglang()})")
        by_module.setdefault(module, {})[target] = hook
    ready = {target: hook for module, group in by_module.items() if module in sys.modules
             for target, hook in group.items()}
    if ready:
        _apply_now(ready, repoint=True)  # one walk for every target SGLang imported already
    for module, group in by_module.items():
        if module not in sys.modules:
            after_import(module, _applier(group, repoint=False))


def _applier(hooks: dict[str, tuple[Callable[..., Any], HookKind]], *,
             repoint: bool) -> Callable[[types.ModuleType], None]:
    """The callback that applies ``hooks`` once their module is imported."""

    def apply_hooks(_module: types.ModuleType) -> None:
        _apply_now(hooks, repoint=repoint)

    return apply_hooks


def _apply_now(hooks: dict[str, tuple[Callable[..., Any], HookKind]], *, repoint: bool) -> None:
    """Wrap each target of ``hooks`` (their modules are imported); with ``repoint``, also
    the bindings other modules already took of a wrapped module-level function."""
    with COST.timed("hooks"):
        stale: dict[int, tuple[Any, Callable[..., Any]]] = {}
        for target, (function, kind) in hooks.items():
            owner, attribute = _owner(target)
            original = getattr(owner, attribute)
            if getattr(original, "__initorch_hook__", False):
                continue  # applied before (a second Scheduler in one process)
            wrapper = _wrapped(original, function, kind)
            setattr(owner, attribute, wrapper)
            if isinstance(owner, types.ModuleType):
                stale[id(original)] = (original, wrapper)
        if repoint and stale:
            _repoint(stale)
        for target in hooks:
            owner, attribute = _owner(target)
            if not getattr(getattr(owner, attribute), "__initorch_hook__", False):
                raise HookError(f"initorch-sglang: the hook on {target} did not apply "
                                f"({_sglang()})")


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


def _repoint(stale: dict[int, tuple[Any, Callable[..., Any]]]) -> None:
    """One walk over SGLang's loaded modules: a name bound to a wrapped original (``from X
    import f`` before the hook) is bound to its wrapper.  Only SGLang's modules: a binding
    matters where SGLang's own code calls through it."""
    for name, module in list(sys.modules.items()):
        if not name.startswith("sglang"):
            continue
        try:
            names = list(vars(module).items())
        except TypeError:
            continue
        for attribute, value in names:
            found = stale.get(id(value))
            if found is not None and found[0] is value:
                with contextlib.suppress(AttributeError, TypeError):
                    setattr(module, attribute, found[1])


def _owner(target: str) -> tuple[Any, str]:
    owner, _, attribute = target.rpartition(".")
    parent = _resolve(owner, target)
    if not hasattr(parent, attribute):
        raise HookError(f"initorch-sglang: hook target {target} is missing: {owner} has "
                        f"no attribute {attribute!r} ({_sglang()})")
    return parent, attribute


def _resolve(name: str, target: str) -> Any:
    try:
        return pkgutil.resolve_name(name)
    except (ImportError, AttributeError, ValueError) as error:
        raise HookError(f"initorch-sglang: hook target {target} is missing: cannot resolve "
                        f"{name} ({type(error).__name__}: {error}; {_sglang()})") from error


def _sglang() -> str:
    from initorch_sglang.version import installed_sglang

    return f"SGLang {installed_sglang() or '(not installed)'}"
