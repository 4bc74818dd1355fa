"""``when:`` conditions: a tiny, safe expression language over settings.

A condition reads like Python — ``mooncake.enabled and device.type != "mps"`` —
and is parsed with :mod:`ast`, but it is never compiled or ``eval``-ed: a small
interpreter walks a whitelist of node types (names, literals, ``and``/``or``/
``not``, comparisons, ``in``).  Dotted names refer to settings (``device.*`` or
config keys); ``true``/``false``/``null`` are accepted as YAML spells them.
"""

from __future__ import annotations

import ast
import operator
import warnings
from collections.abc import Callable, Iterable, Mapping
from typing import Any

from initorch.errors import ConditionError
from initorch.location import SourceLocation
from initorch.model.names import non_ascii_problem
from initorch.records import record
from initorch.suggest import closest

# YAML's spellings; Python's True/False/None already parse as constants.
_LITERAL_NAMES = {"true": True, "false": False, "null": None}

_COMPARISONS: dict[type[ast.cmpop], Callable[[Any, Any], Any]] = {
    ast.Eq: operator.eq,
    ast.NotEq: operator.ne,
    ast.Lt: operator.lt,
    ast.LtE: operator.le,
    ast.Gt: operator.gt,
    ast.GtE: operator.ge,
    ast.In: lambda a, b: a in b,
    ast.NotIn: lambda a, b: a not in b,
}


def _dotted_name(node: ast.expr) -> str | None:
    if isinstance(node, ast.Name):
        return node.id
    if isinstance(node, ast.Attribute):
        parent = _dotted_name(node.value)
        return f"{parent}.{node.attr}" if parent else None
    return None


@record
class Condition:
    """A parsed ``when`` expression; ``names`` are the settings it reads."""

    source: str
    names: frozenset[str]
    _tree: ast.expr
    location: SourceLocation | None = None

    def check_names(self, known: Iterable[str]) -> None:
        """Raise :class:`ConditionError` if the condition reads an unknown setting."""
        known_set = set(known)
        for name in sorted(self.names - known_set):
            guess = closest(name, known_set)
            raise ConditionError(
                f"condition {self.source!r} reads unknown setting '{name}'",
                location=self.location,
                hint=f"did you mean '{guess}'?" if guess
                else "conditions read declared settings: see 'initorch settings'",
            )

    def evaluate(self, settings: Mapping[str, Any]) -> bool:
        """Truth value of the condition given flat dotted ``settings``."""
        try:
            return bool(self._eval(self._tree, settings))
        except (TypeError, KeyError) as exc:
            raise ConditionError(
                f"cannot evaluate condition {self.source!r}: {exc}",
                location=self.location,
                hint="compare values of the same type",
            ) from None

    def describe(self, settings: Mapping[str, Any],
                 origins: Mapping[str, object] | None = None,
                 names: Iterable[str] | None = None) -> str:
        """The values the condition read (or only ``names``), e.g.
        ``mooncake.enabled=false``, each followed by where it was set when ``origins``
        says so."""
        def one(name: str) -> str:
            origin = origins.get(name) if origins else None
            where = f" from {origin}" if origin else ""
            return f"{name}={_show(settings.get(name))}{where}"

        return ", ".join(one(name) for name in sorted(self.names if names is None
                                                       else names))

    def deciding(self, settings: Mapping[str, Any]) -> str:
        """The values that make a false condition false, without origins: for a
        top-level ``and``, those its false operands read (``checks.verify_transfer=
        false``); otherwise every value it read.  The short reason tables show."""
        tree = self._tree
        names: set[str] = set()
        if isinstance(tree, ast.BoolOp) and isinstance(tree.op, ast.And):
            for operand in tree.values:
                if not self._eval(operand, settings):
                    # parsed already, so this only collects the names it reads
                    _validate(operand, self.source, self.location, names)
        return self.describe(settings, None, names or None)

    def _eval(self, node: ast.expr, settings: Mapping[str, Any]) -> Any:
        if isinstance(node, ast.BoolOp):
            values = (self._eval(v, settings) for v in node.values)
            return all(values) if isinstance(node.op, ast.And) else any(values)
        if isinstance(node, ast.UnaryOp):
            operand = self._eval(node.operand, settings)
            return -operand if isinstance(node.op, ast.USub) else not operand
        if isinstance(node, ast.Compare):
            left = self._eval(node.left, settings)
            for op, right_node in zip(node.ops, node.comparators, strict=True):
                right = self._eval(right_node, settings)
                if not _COMPARISONS[type(op)](left, right):
                    return False
                left = right
            return True
        if isinstance(node, ast.Constant):
            return node.value
        if isinstance(node, (ast.List, ast.Tuple, ast.Set)):
            return [self._eval(e, settings) for e in node.elts]
        name = _dotted_name(node)
        assert name is not None  # guaranteed by parse_condition's validation
        if name in _LITERAL_NAMES:
            return _LITERAL_NAMES[name]
        return settings[name]


def _is_number(node: ast.expr) -> bool:
    return isinstance(node, ast.Constant) and isinstance(node.value, (int, float)) \
        and not isinstance(node.value, bool)


def _show(value: Any) -> str:
    if isinstance(value, bool):
        return "true" if value else "false"
    return "null" if value is None else repr(value) if isinstance(value, str) else str(value)


# A condition is one line of intent; anything longer is a mistake or an attack
# on the parser (deep nesting exhausts the recursion limit).
MAX_CONDITION_LENGTH = 500


def parse_condition(source: str, location: SourceLocation | None = None) -> Condition:
    """Parse and validate ``source``; raise :class:`ConditionError` on anything unsafe."""
    if len(source) > MAX_CONDITION_LENGTH:
        raise ConditionError(f"condition is {len(source)} characters long",
                             location=location,
                             hint=f"keep conditions under {MAX_CONDITION_LENGTH} characters")
    try:
        with warnings.catch_warnings():
            # "1or x", "1if": Python warns on stderr and parses on; for a condition it is
            # a typo, refused like any other invalid expression (the compiler raises it as
            # a SyntaxError when the warning is an error).
            warnings.simplefilter("error", SyntaxWarning)
            tree = ast.parse(source.strip(), mode="eval").body
        names: set[str] = set()
        _validate(tree, source, location, names)
    except (SyntaxError, ValueError) as exc:  # ValueError: NUL bytes before Python 3.11
        message = exc.msg if isinstance(exc, SyntaxError) else str(exc)
        raise ConditionError(
            f"condition {source!r} is not a valid expression: {message}",
            location=location,
            hint="use names, literals, and/or/not, ==, !=, <, >, in",
        ) from None
    except (RecursionError, MemoryError):
        raise ConditionError(f"condition {source[:40]!r}... nests too deeply",
                             location=location, hint="simplify the expression") from None
    if not source.isascii():
        _refuse_lookalike_names(source, location)
    return Condition(source, frozenset(names), tree, location)


def _refuse_lookalike_names(source: str, location: SourceLocation | None) -> None:
    """Setting names are ASCII.  Python's parser folds some look-alikes into ASCII
    (NFKC turns a full-width 'm', U+FF4D, into 'm') and keeps others (a Cyrillic
    'e', U+0435), so a condition would silently read another setting, or fail with
    a misleading "unknown setting".  Text inside string literals may hold any
    character."""
    import io
    import tokenize  # only for the rare non-ASCII condition: keeps the dry run lean

    tokens = tokenize.generate_tokens(io.StringIO(source.strip()).readline)
    for token in tokens:
        if token.type == tokenize.NAME:
            problem = non_ascii_problem(token.string, "setting name")
            if problem is not None:
                raise ConditionError(f"condition {source!r}: {problem}", location=location,
                                     hint="retype the name in ASCII")


def _validate(node: ast.expr, source: str, location: SourceLocation | None,
              names: set[str]) -> None:
    if isinstance(node, ast.BoolOp):
        children: list[ast.expr] = list(node.values)
    elif isinstance(node, ast.UnaryOp) and isinstance(node.op, ast.Not):
        children = [node.operand]
    elif isinstance(node, ast.UnaryOp) and isinstance(node.op, ast.USub) \
            and _is_number(node.operand):
        return
    elif isinstance(node, ast.Compare) and all(type(op) in _COMPARISONS for op in node.ops):
        children = [node.left, *node.comparators]
    elif isinstance(node, (ast.List, ast.Tuple, ast.Set)):
        children = list(node.elts)
    elif isinstance(node, ast.Constant) and isinstance(node.value, (str, int, float, bool,
                                                                    type(None))):
        return
    else:
        name = _dotted_name(node)
        if name is None:
            raise ConditionError(
                f"condition {source!r} uses unsupported syntax "
                f"'{ast.unparse(node)}'",
                location=location,
                hint="only names, literals, and/or/not, comparisons and 'in' are allowed",
            )
        if name not in _LITERAL_NAMES:
            names.add(name)
        return
    for child in children:
        _validate(child, source, location, names)
