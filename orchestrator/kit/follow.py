"""Where a function of an engine's tree calls a name: directly, or through its own helpers.

A call map names one hop per function: "``ModelRunner.__init__`` calls ``set_device``".
Engines keep moving such a call into a helper of their own (one release sets the device
inside a bootstrap function, the next in the constructor itself), so a hop is followed
into the helpers the function calls, as far as they are the engine's: methods of the
same class (or its bases), functions of the same file, and functions imported from the
engine's package.  Every call site counts, each marked unconditional or not, so that a
guarded early call cannot hide a real late one; nested ``def``s and lambdas are skipped
unless the function calls them; of two definitions of one name the last is the one
Python keeps.
"""

from __future__ import annotations

import ast
from collections.abc import Iterator

from initorch.kit.source import SourceTree
from initorch.records import record

__all__ = ["CallLine", "MissingCall", "call_sites", "find_function", "module_file",
           "resolve_call", "resolve_target"]

_DEPTH = 3
"""How many helpers deep a call is followed (the deepest call a map names is two deep)."""

_Function = ast.FunctionDef | ast.AsyncFunctionDef
_TRY: tuple[type[ast.AST], ...] = tuple(
    kind for kind in (ast.Try, getattr(ast, "TryStar", None)) if kind is not None)


class MissingCall(LookupError):
    """A hop of a chain is no longer in the source."""


@record
class CallLine:
    """A call of the name at ``line`` of the function (or of the helper call leading to
    it, ``via`` naming the helpers); ``unconditional``: it runs whenever the function
    runs to its end (no ``if``, loop, ``except`` or short-circuit on the way)."""

    line: int
    unconditional: bool
    via: tuple[str, ...] = ()


def find_function(scope: ast.AST, qualname: str) -> _Function | None:
    """The function ``qualname`` (``Class.method``) defined in ``scope``; the last of
    several definitions, as Python keeps it."""
    first, _, rest = qualname.partition(".")
    found: ast.AST | None = None
    for node in ast.iter_child_nodes(scope):
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)) \
                and node.name == first:
            found = node
        elif isinstance(node, (ast.If, ast.Try)):
            # ``if TYPE_CHECKING:``/``try: import`` blocks can hold definitions too.
            inner = find_function(node, qualname)
            if inner is not None:
                return inner
    if found is None:
        return None
    if rest:
        return find_function(found, rest)
    if isinstance(found, ast.ClassDef):
        return find_function(found, "__init__")
    return found if isinstance(found, (ast.FunctionDef, ast.AsyncFunctionDef)) else None


def module_file(tree: SourceTree, module: str) -> str | None:
    """The file of dotted ``module`` inside the engine's package (``<package>.srt.utils``
    -> ``srt/utils/__init__.py``), if the package holds it."""
    if not tree.engine.owns(module):
        return None
    path = module.split(".")[1:]
    for candidate in ("/".join(path) + ".py", "/".join([*path, "__init__.py"])):
        if candidate != ".py" and tree.has(candidate):
            return candidate
    return None


def call_sites(tree: SourceTree, file: str, function: str, name: str) -> list[CallLine]:
    """Every site in ``function`` of ``file`` that calls ``name``, directly or through
    the engine's own helpers; :class:`MissingCall` if the file or function is missing."""
    module = tree.module(file)
    if module is None:
        raise MissingCall(f"{file} is missing")
    node = find_function(module, function)
    if node is None:
        raise MissingCall(f"{file} has no function {function}")
    owner = function.rpartition(".")[0] or None
    return _Finder(tree, name).sites(file, owner, node, _DEPTH, frozenset())


@record(frozen=False)
class _Finder:
    tree: SourceTree
    name: str

    def sites(self, file: str, owner: str | None, function: _Function, depth: int,
              seen: frozenset[tuple[str, int]]) -> list[CallLine]:
        seen = seen | {(file, function.lineno)}
        local = {node.name: node for node in function.body
                 if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef))}
        found: list[CallLine] = []
        for call, unconditional in _calls(function.body, True):
            if _called_name(call) == self.name:
                found.append(CallLine(call.lineno, unconditional))
                continue
            if depth == 0:
                continue
            callee = self._resolve(file, owner, call.func, local)
            if callee is None or (callee[0], callee[2].lineno) in seen:
                continue
            inner = self.sites(callee[0], callee[1], callee[2], depth - 1, seen)
            if inner:
                helper = f"{_called_name(call)} ({callee[0]}:{callee[2].lineno})"
                found.append(CallLine(call.lineno,
                                      unconditional and any(s.unconditional for s in inner),
                                      (helper, *inner[0].via)))
        return found

    def _resolve(self, file: str, owner: str | None, func: ast.expr,
                 local: dict[str, _Function]) -> tuple[str, str | None, _Function] | None:
        """The engine's function a call goes to: (file, its class, its definition)."""
        module = self.tree.module(file)
        assert module is not None
        if isinstance(func, ast.Name):
            if func.id in local:
                return file, owner, local[func.id]
            return self._named(file, module, func.id, 2)
        if isinstance(func, ast.Attribute) and isinstance(func.value, ast.Name):
            base = func.value.id
            if base in ("self", "cls") and owner is not None:
                return self._method(file, module, owner, func.attr, 3)
            target = _imported_module(self.tree, file, module, base)
            if target is not None:
                inner = self.tree.module(target)
                if inner is not None:
                    return self._named(target, inner, func.attr, 2)
        return None

    def _method(self, file: str, module: ast.Module, owner: str, name: str,
                hops: int) -> tuple[str, str | None, _Function] | None:
        """Method ``name`` of class ``owner`` of ``file``, or of its bases (mixins)."""
        found = find_function(module, f"{owner}.{name}")
        if found is not None:
            return file, owner, found
        cls = next((node for node in ast.iter_child_nodes(module)
                    if isinstance(node, ast.ClassDef) and node.name == owner), None)
        if cls is None or hops == 0:
            return None
        for base in cls.bases:
            if not isinstance(base, ast.Name):
                continue
            home = self._home(file, module, base.id, 2)
            if home is not None:
                inner = self.tree.module(home)
                assert inner is not None
                method = self._method(home, inner, base.id, name, hops - 1)
                if method is not None:
                    return method
        return None

    def _home(self, file: str, module: ast.Module, name: str, hops: int) -> str | None:
        """The file that defines top-level ``name`` seen from ``file`` (re-exports followed)."""
        if any(isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef))
               and node.name == name for node in ast.iter_child_nodes(module)):
            return file
        if hops == 0:
            return None
        for target, inner, original in self._imported(file, module, name):
            found = self._home(target, inner, original, hops - 1)
            if found is not None:
                return found
        return None

    def _named(self, file: str, module: ast.Module, name: str,
               hops: int) -> tuple[str, str | None, _Function] | None:
        """``name`` as defined in ``file`` or imported into it (re-exports followed)."""
        found = find_function(module, name)
        if found is not None:
            owner = name if _is_class(module, name) else None
            return file, owner, found
        if hops == 0:
            return None
        for target, inner, original in self._imported(file, module, name):
            return self._named(target, inner, original, hops - 1)
        return None

    def _imported(self, file: str, module: ast.Module,
                  name: str) -> Iterator[tuple[str, ast.Module, str]]:
        """(file, its parsed module, original name) of each ``from X import original as
        name`` in ``file`` whose module ``X`` is in the engine's package."""
        for source, original in _imports_of(self.tree, file, module, name):
            target = module_file(self.tree, source)
            inner = None if target is None else self.tree.module(target)
            if target is not None and inner is not None:
                yield target, inner, original


def _is_class(module: ast.Module, name: str) -> bool:
    return any(isinstance(node, ast.ClassDef) and node.name == name
               for node in ast.iter_child_nodes(module))


def _absolute(tree: SourceTree, file: str, node: ast.ImportFrom) -> str:
    if not node.level:
        return node.module or ""
    package = [tree.engine.package, *file.split("/")[:-1]]
    base = package[:len(package) - (node.level - 1)] if node.level > 1 else package
    return ".".join([*base, *([node.module] if node.module else [])])


def _import_index(tree: SourceTree, file: str,
                  module: ast.Module) -> dict[str, list[tuple[str, str, bool]]]:
    """Each name a file's imports bind: (module, original name, ``import X as name``)."""
    key = ("imports", file)
    cached = tree.derived.get(key)
    if cached is None:
        index: dict[str, list[tuple[str, str, bool]]] = {}
        for node in ast.walk(module):
            if isinstance(node, ast.Import):
                for alias in node.names:
                    if alias.asname:
                        index.setdefault(alias.asname, []).append((alias.name, "", True))
            elif isinstance(node, ast.ImportFrom):
                source = _absolute(tree, file, node)
                for alias in node.names:
                    index.setdefault(alias.asname or alias.name, []).append(
                        (source, alias.name, False))
        tree.derived[key] = cached = index
    assert isinstance(cached, dict)
    return cached


def _imports_of(tree: SourceTree, file: str, module: ast.Module,
                name: str) -> Iterator[tuple[str, str]]:
    """(module, original name) of each ``from module import original as name``."""
    for source, original, whole in _import_index(tree, file, module).get(name, ()):
        if not whole:
            yield source, original


def _imported_module(tree: SourceTree, file: str, module: ast.Module,
                     name: str) -> str | None:
    """The file of the module bound to ``name`` by an import in ``file``."""
    for source, original, whole in _import_index(tree, file, module).get(name, ()):
        found = module_file(tree, source if whole else f"{source}.{original}")
        if found is not None:
            return found
    return None


def _called_name(call: ast.Call) -> str | None:
    func = call.func
    if isinstance(func, ast.Name):
        return func.id
    if isinstance(func, ast.Attribute):
        return func.attr
    return None


def _calls(nodes: list[ast.stmt] | list[ast.expr] | list[ast.AST],
           unconditional: bool) -> Iterator[tuple[ast.Call, bool]]:
    for node in nodes:
        yield from _node_calls(node, unconditional)


def _node_calls(node: ast.AST, unconditional: bool) -> Iterator[tuple[ast.Call, bool]]:
    """Every call under ``node`` in source order, with whether it always runs; nested
    definitions and lambdas are not entered (their body runs only if called)."""
    if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef, ast.Lambda)):
        if not isinstance(node, ast.Lambda):
            yield from _calls(list(node.decorator_list), unconditional)
        return
    if isinstance(node, (ast.If, ast.While)):
        yield from _node_calls(node.test, unconditional)
        yield from _calls(node.body, False)
        yield from _calls(node.orelse, False)
        return
    if isinstance(node, (ast.For, ast.AsyncFor)):
        yield from _node_calls(node.iter, unconditional)
        yield from _calls(node.body, False)
        yield from _calls(node.orelse, False)
        return
    if isinstance(node, _TRY):
        # ast.TryStar (3.11) has ast.Try's fields.
        yield from _calls(getattr(node, "body"), unconditional)  # noqa: B009
        for handler in getattr(node, "handlers"):  # noqa: B009
            yield from _calls(handler.body, False)
        yield from _calls(getattr(node, "orelse"), False)  # noqa: B009
        yield from _calls(getattr(node, "finalbody"), unconditional)  # noqa: B009
        return
    if isinstance(node, ast.Match):
        yield from _node_calls(node.subject, unconditional)
        for case in node.cases:
            yield from _calls(case.body, False)
        return
    if isinstance(node, ast.BoolOp):
        yield from _node_calls(node.values[0], unconditional)
        yield from _calls(node.values[1:], False)
        return
    if isinstance(node, ast.IfExp):
        yield from _node_calls(node.test, unconditional)
        yield from _node_calls(node.body, False)
        yield from _node_calls(node.orelse, False)
        return
    if isinstance(node, (ast.ListComp, ast.SetComp, ast.GeneratorExp, ast.DictComp)):
        yield from _calls(list(ast.iter_child_nodes(node)), False)
        return
    if isinstance(node, ast.Call):
        # Arguments are evaluated before the call itself.
        yield from _node_calls(node.func, unconditional)
        yield from _calls([*node.args, *(k.value for k in node.keywords)], unconditional)
        yield node, unconditional
        return
    yield from _calls(list(ast.iter_child_nodes(node)), unconditional)


def resolve_target(tree: SourceTree, target: str) -> str | None:
    """Where dotted ``target`` (``<package>.x.Class.method``) is defined in ``tree``:
    ``file:line``, following the module's re-exports and a class's bases; ``None`` if
    it is not."""
    parts = target.split(".")
    for cut in range(len(parts) - 1, 0, -1):
        file = module_file(tree, ".".join(parts[:cut]))
        if file is None:
            continue
        module = tree.module(file)
        assert module is not None
        finder = _Finder(tree, "")
        home = finder._home(file, module, parts[cut], 2)
        if home is None:
            return None
        inner = tree.module(home)
        assert inner is not None
        rest = parts[cut:]
        if len(rest) == 1:
            found = find_function(inner, rest[0])
        elif len(rest) == 2:
            method = finder._method(home, inner, rest[0], rest[1], 3)
            return None if method is None else f"{method[0]}:{method[2].lineno}"
        else:
            found = find_function(inner, ".".join(rest))
        return None if found is None else f"{home}:{found.lineno}"
    return None


def resolve_call(tree: SourceTree, file: str, function: str,
                 func: ast.expr) -> tuple[str, _Function] | None:
    """The engine's function that ``func`` (a call's callee, inside ``function`` of
    ``file``) goes to: its file and definition; ``None`` if it is not the engine's."""
    owner = function.rpartition(".")[0] or None
    found = _Finder(tree, "")._resolve(file, owner, func, {})
    return None if found is None else (found[0], found[2])
