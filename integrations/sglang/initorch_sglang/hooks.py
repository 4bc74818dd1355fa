"""Hooks into SGLang through its own registry, each checked once applied.

SGLang's ``HookRegistry`` (``srt/plugins/hook_registry.py``) patches any dotted target,
re-points stale ``from X import Y`` bindings (:320-347), and is idempotent: applying
again patches only new targets.  But a target that is missing is only logged
(:162-166), and so is a plugin that fails (``plugins/__init__.py:79-84``): a start-up
would go on unobserved.  So every hook here is applied at once and checked: the
target resolves, the registry counts it as patched, and the attribute now is a wrapper.
A hook that did not take is a :class:`HookError`, which the plugin turns into an exit.
"""

from __future__ import annotations

import pkgutil
from collections.abc import Callable
from typing import Any, Literal

__all__ = ["HookError", "HookKind", "apply"]

HookKind = Literal["around", "replace"]


class HookError(RuntimeError):
    """A hook target is missing in the installed SGLang, or the hook did not apply."""


def apply(hooks: dict[str, tuple[Callable[..., Any], HookKind]]) -> None:
    """Register every hook (``around``: ``function(original, *args, **kwargs)``;
    ``replace``: ``function(*args, **kwargs)``), apply them in one pass, and check each
    target."""
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
