"""Safe YAML parsing that remembers where every key and value came from.

PyYAML's safe loader builds plain Python values and throws away the positions;
profile errors must point at ``file:line:column``, so this module composes the
node tree with the safe loader and keeps a map from each key path to its
position.  Duplicate keys (which PyYAML silently accepts, keeping the last) are
rejected, since a profile that says a thing twice is almost always a mistake.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

import yaml

from initorch.collector import collector_paused
from initorch.errors import ProfileError
from initorch.location import SourceLocation

KeyPath = tuple[str | int, ...]

_Loader: type[yaml.SafeLoader] = getattr(yaml, "CSafeLoader", yaml.SafeLoader)


@dataclass(frozen=True, slots=True)
class YamlDocument:
    """A parsed YAML document: plain ``data`` plus positions by key path."""

    path: str
    data: Any
    value_marks: dict[KeyPath, SourceLocation] = field(default_factory=dict)
    key_marks: dict[KeyPath, SourceLocation] = field(default_factory=dict)

    def where(self, *keys: str | int) -> SourceLocation:
        """Location of the value at ``keys``; falls back to the nearest enclosing one."""
        for end in range(len(keys), -1, -1):
            found = self.value_marks.get(keys[:end])
            if found is not None:
                return found
        return SourceLocation(self.path)

    def key_where(self, *keys: str | int) -> SourceLocation:
        """Location of the mapping key at ``keys`` (where a misspelt key should be reported)."""
        return self.key_marks.get(keys) or self.where(*keys)


def _location(path: str, mark: Any) -> SourceLocation:
    return SourceLocation(path, mark.line + 1, mark.column + 1)


def parse_yaml(text: str, path: str) -> YamlDocument:
    """Parse one YAML document safely; raise :class:`ProfileError` with a position."""
    with collector_paused():  # the document and its positions form no cycle
        return _parse(text, path)


def _parse(text: str, path: str) -> YamlDocument:
    loader = _Loader(text)
    try:
        try:
            root = loader.get_single_node()
        except yaml.MarkedYAMLError as exc:
            mark = exc.problem_mark or exc.context_mark
            where = _location(path, mark) if mark else SourceLocation(path)
            raise ProfileError(
                f"invalid YAML: {exc.problem or exc.context}",
                location=where,
                hint="check indentation and quoting around this position",
            ) from None
        except yaml.YAMLError as exc:
            raise ProfileError(f"invalid YAML: {exc}", location=SourceLocation(path)) from None
        document = YamlDocument(path, None)
        if root is not None:
            builder = _Builder(loader, document, value_budget(text))
            object.__setattr__(document, "data", builder.build(root, ()))
        return document
    finally:
        loader.dispose()


# Aliases can make a tiny file expand enormously ("billion laughs").  Written out, a
# profile holds far fewer values than characters (about one per ten; at most about
# one per character, for [a,b,c]): a document may expand to one value per character
# of its text, or MIN_VALUE_BUDGET values if that is more, so aliases may repeat
# what they name tenfold but not without bound, and a large honest profile loads.
VALUES_PER_CHARACTER = 1
MIN_VALUE_BUDGET = 20_000


def value_budget(text: str) -> int:
    """How many values a document of ``text`` may expand to."""
    return max(MIN_VALUE_BUDGET, VALUES_PER_CHARACTER * len(text))


class _Builder:
    """Builds plain values from a node tree, recording positions and refusing
    unknown tags, recursive aliases and runaway alias expansion."""

    def __init__(self, loader: Any, doc: YamlDocument, budget: int) -> None:
        self.loader = loader
        self.doc = doc
        self.nodes = 0
        self.budget = budget
        self.active: set[int] = set()

    def build(self, node: yaml.Node, keys: KeyPath) -> Any:
        where = _location(self.doc.path, node.start_mark)
        self.doc.value_marks[keys] = where
        self.nodes += 1
        if self.nodes > self.budget:
            raise ProfileError(
                f"aliases expand the profile to more than {self.budget} values (one per "
                f"character of the file, at least {MIN_VALUE_BUDGET})", location=where,
                hint="an alias repeats a large or nested value too often; write it out")
        if id(node) in self.active:
            raise ProfileError("recursive alias: a value contains itself", location=where,
                               hint="remove the alias that refers to its own anchor")
        self.active.add(id(node))
        try:
            if isinstance(node, yaml.MappingNode):
                return self._mapping(node, keys)
            if isinstance(node, yaml.SequenceNode):
                return [self.build(item, (*keys, i)) for i, item in enumerate(node.value)]
            return self._scalar(node, where)
        finally:
            self.active.discard(id(node))

    def _scalar(self, node: yaml.Node, where: SourceLocation) -> Any:
        try:
            return self.loader.construct_object(node, deep=True)
        except yaml.MarkedYAMLError as exc:
            raise ProfileError(f"unsupported YAML value: {exc.problem}", location=where,
                               hint="profiles hold plain strings, numbers, booleans, lists "
                                    "and mappings; quote the value") from None

    def _mapping(self, node: yaml.MappingNode, keys: KeyPath) -> dict[str, Any]:
        explicit = {id(pair) for pair in node.value}
        try:
            self.loader.flatten_mapping(node)
        except yaml.MarkedYAMLError as exc:
            raise ProfileError(f"invalid merge key: {exc.problem}",
                               location=_location(self.doc.path, node.start_mark)) from None
        result: dict[str, Any] = {}
        merged_keys: set[str] = set()
        for pair in node.value:
            key_node, value_node = pair
            key_mark = _location(self.doc.path, key_node.start_mark)
            key = self._scalar(key_node, key_mark)
            if not isinstance(key, str):
                raise ProfileError(
                    f"mapping keys must be strings, not {type(key).__name__} {key!r}",
                    location=key_mark,
                    hint="quote the key",
                )
            path = (*keys, key)
            # Keys merged in with '<<' may be overridden by the mapping's own keys.
            if key in result and key not in merged_keys:
                first = self.doc.key_marks[path]
                raise ProfileError(
                    f"duplicate key '{key}' (first given at line {first.line})",
                    location=key_mark,
                    hint="remove one of them",
                )
            merged_keys.discard(key)
            if id(pair) not in explicit:
                merged_keys.add(key)
            self.doc.key_marks[path] = key_mark
            result[key] = self.build(value_node, path)
        return result
