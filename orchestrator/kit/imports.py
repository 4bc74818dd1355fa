"""Run code right after a module executes, without importing it.

An integration changes two kinds of module it must not import itself: vendor modules
(importing ``mooncake.engine`` before ``set_device`` aborts an NPU worker) and the
engine's modules that the launch may never import (a storage backend's, with its cache
off) or would import later (its hook targets: importing them at plugin load moves seconds
of the engine's own imports into the plugin).  :func:`after_import` runs a callback at
once for a module already imported, else right after the module's code ran, through one
``sys.meta_path`` finder that asks the other finders for the real spec and wraps its
loader.

That finder goes first on the meta path (again, each time a callback is added): a finder
consulted earlier may swap what the module holds after it ran (a simulated vendor build
swaps Mooncake's classes), and the callback must see what the engine will use.
"""

from __future__ import annotations

import importlib.abc
import importlib.machinery
import importlib.util
import sys
import threading
import types
from collections.abc import Callable, Iterator, Sequence

__all__ = ["after_import", "go_first", "module_of"]

Callback = Callable[[types.ModuleType], None]


def after_import(name: str, callback: Callback) -> None:
    """``callback(module)`` now if module ``name`` is imported, else right after it is."""
    finder = go_first()
    module = sys.modules.get(name)
    if module is not None:
        callback(module)
    else:
        finder.callbacks.setdefault(name, []).append(callback)


def module_of(target: str) -> str | None:
    """The module part of dotted ``target`` (``a.b.Class.method`` -> ``a.b``), found
    without executing it: only its parent packages are imported (to search their path);
    ``None`` when no prefix is a module."""
    parts = target.split(".")
    found = None
    for end in range(1, len(parts)):
        name = ".".join(parts[:end])
        module = sys.modules.get(name)
        if module is not None:
            found = name
            if not hasattr(module, "__path__"):
                return found  # a module, not a package: the rest are attributes
            continue
        try:
            spec = importlib.util.find_spec(name)
        except (ImportError, ValueError):
            spec = None
        if spec is None:
            return found
        found = name
        if spec.submodule_search_locations is None:
            return found
    return found


class _Resolving(threading.local):
    def __init__(self) -> None:
        self.names: set[str] = set()


class _AfterImport(importlib.abc.MetaPathFinder):
    """Finds a watched module through the other finders and wraps its loader."""

    def __init__(self) -> None:
        self.callbacks: dict[str, list[Callback]] = {}
        self._resolving = _Resolving()

    def find_spec(self, fullname: str, path: Sequence[str] | None,
                  target: types.ModuleType | None = None) -> importlib.machinery.ModuleSpec | None:
        if fullname not in self.callbacks or fullname in self._resolving.names:
            return None
        self._resolving.names.add(fullname)  # another finder may ask the meta path again
        try:
            spec = next(self._others(fullname, path, target), None)
        finally:
            self._resolving.names.discard(fullname)
        if spec is not None and spec.loader is not None:
            # Taken when the module runs, not here: a probe (importlib.util.find_spec)
            # finds without loading.
            spec.loader = _CallingLoader(spec.loader, lambda: self.callbacks.pop(fullname, []))
        return spec

    def _others(self, fullname: str, path: Sequence[str] | None,
                target: types.ModuleType | None) -> Iterator[importlib.machinery.ModuleSpec]:
        for finder in list(sys.meta_path):
            find_spec = getattr(finder, "find_spec", None)
            if finder is self or find_spec is None:
                continue
            spec = find_spec(fullname, path, target)
            if spec is not None:
                yield spec


class _CallingLoader(importlib.abc.Loader):
    def __init__(self, inner: importlib.abc.Loader,
                 callbacks: Callable[[], list[Callback]]) -> None:
        self._inner, self._callbacks = inner, callbacks

    def create_module(self, spec: importlib.machinery.ModuleSpec) -> types.ModuleType | None:
        return self._inner.create_module(spec)

    def exec_module(self, module: types.ModuleType) -> None:
        self._inner.exec_module(module)
        for callback in self._callbacks():
            callback(module)


def go_first() -> _AfterImport:
    """The process's finder, moved first on the meta path (call again once other
    plugins have loaded: theirs may have gone first since)."""
    ours = [finder for finder in sys.meta_path if isinstance(finder, _AfterImport)]
    for finder in ours:
        sys.meta_path.remove(finder)
    finder = ours[0] if ours else _AfterImport()
    sys.meta_path.insert(0, finder)
    return finder
