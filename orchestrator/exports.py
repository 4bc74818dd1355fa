"""Public modules that import some of their names on first use (PEP 562).

A public tier (:mod:`initorch`, :mod:`initorch.plugin`) lists every name it exports,
but imports the heavier ones only when they are first read: a dry run must never
load the executors, the ranks' agreement or structlog's stdlib integration just
because a step module imported its kit.  :func:`on_first_use` gives such a module
its ``__getattr__`` and ``__dir__``; ``__dir__`` shows the exports, nothing else.
"""

from __future__ import annotations

import warnings
from collections.abc import Callable, Mapping
from importlib import import_module
from typing import Any


def on_first_use(namespace: dict[str, Any], lazy: Mapping[str, str],
                 moved: Mapping[str, str] | None = None
                 ) -> tuple[Callable[[str], Any], Callable[[], list[str]]]:
    """``__getattr__`` and ``__dir__`` for the module whose globals are ``namespace``.

    ``lazy`` maps an exported name to the module that defines it.  ``moved`` maps a
    name the module no longer exports to the module it moved to: reading it still
    works, with a :class:`DeprecationWarning` that names the new import.
    """
    module_name = namespace["__name__"]
    moved = moved or {}

    def __getattr__(name: str) -> Any:
        if name in lazy:
            value = getattr(import_module(lazy[name]), name)
            namespace[name] = value
            return value
        if name in moved:
            warnings.warn(f"{module_name}.{name} has moved: import it from {moved[name]} "
                          f"(from {moved[name]} import {name})", DeprecationWarning,
                          stacklevel=2)
            return getattr(import_module(moved[name]), name)
        raise AttributeError(f"module {module_name!r} has no attribute {name!r}")

    def __dir__() -> list[str]:
        return sorted(namespace["__all__"])

    return __getattr__, __dir__
