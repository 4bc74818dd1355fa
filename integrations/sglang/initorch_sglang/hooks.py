"""Hooks into SGLang through its own registry, each checked once applied.

SGLang's ``HookRegistry`` (``srt/plugins/hook_registry.py``) patches any dotted target,
re-points stale ``from X import Y`` bindings (:320-347), and is idempotent: applying
again patches only new targets.  But a target that is missing is only logged
(:162-166), and so is a plugin that fails (``plugins/__init__.py:79-84``): a start-up
would go on unobserved.  So every hook here is checked once applied: the target
resolves, the registry counts it as patched, and the attribute now is a wrapper.  A hook
that did not take is a :class:`HookError`, which the plugin turns into an exit.

A hook is applied when its module is imported: at once for a module SGLang already
imported, else right after SGLang imports it (:mod:`initorch_sglang.imports`).  Resolving
a target imports its module; done at plugin load for every target, that moved seconds
of SGLang's own imports (``ModelRunner``, ``TpModelWorker``) into the plugin and imported
the Mooncake store's module into launches that never use it.  That a target's module
exists is checked at once, without running it.
"""

from __future__ import annotations

import pkgutil
from collections.abc import Callable
from typing import Any, Literal

from initorch_sglang.cost import COST
from initorch_sglang.imports import after_import, module_of

__all__ = ["HookError", "HookKind", "apply"]

HookKind = Literal["around", "replace"]


class HookError(RuntimeError):
    """A hook target is missing in the installed SGLang, or the hook did not apply."""


def apply(hooks: dict[str, tuple[Callable[..., Any], HookKind]]) -> None:
    """Register every hook (``around``: ``function(original, *args, **kwargs)``;
    ``replace``: ``function(*args, **kwargs)``) when its module is imported, and check
    each target once applied."""
    by_module: dict[str, dict[str, tuple[Callable[..., Any], HookKind]]] = {}
    for target, hook in hooks.items():
        module = module_of(target)
        if module is None:
            raise HookError(f"initorch-sglang: hook target {target} is missing: no module of "
                            f"it can be found ({_sglang()})")
        by_module.setdefault(module, {})[target] = hook
    for module, group in by_module.items():
        after_import(module, lambda _module, group=group: _apply_now(group))


def _apply_now(hooks: dict[str, tuple[Callable[..., Any], HookKind]]) -> None:
    """Register and apply ``hooks`` (their modules are imported), and check each."""
    with COST.timed("hooks"):
        _register_and_check(hooks)


def _register_and_check(hooks: dict[str, tuple[Callable[..., Any], HookKind]]) -> None:
    from sglang.srt.plugins.hook_registry import HookRegistry, HookType

    for target in hooks:
        _resolve(target)  # a precise message before SGLang's own logged failure
    for target, (function, kind) in hooks.items():
        HookRegistry.register(target, function,
                              HookType.AROUND if kind == "around" else HookType.REPLACE)
    HookRegistry.apply_hooks()
    for target in hooks:
        patched = _resolve(target)
        if target not in HookRegistry._patched or getattr(patched, "__wrapped__", None) is None:
            raise HookError(f"initorch-sglang: the hook on {target} did not apply "
                            f"({_sglang()}; see SGLang's 'Failed to apply hooks' log line)")


def _resolve(target: str) -> Any:
    owner, _, attribute = target.rpartition(".")
    try:
        parent = pkgutil.resolve_name(owner)
    except (ImportError, AttributeError, ValueError) as error:
        raise HookError(f"initorch-sglang: hook target {target} is missing: cannot "
                        f"resolve {owner} ({type(error).__name__}: {error}; "
                        f"{_sglang()})") from error
    if not hasattr(parent, attribute):
        raise HookError(f"initorch-sglang: hook target {target} is missing: {owner} has "
                        f"no attribute {attribute!r} ({_sglang()})")
    return getattr(parent, attribute)


def _sglang() -> str:
    from initorch_sglang.version import installed_sglang

    return f"SGLang {installed_sglang() or '(not installed)'}"
