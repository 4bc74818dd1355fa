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
            # A reader error (a control character) is two lines; the first says it all.
            first = str(exc).splitlines()[0] if str(exc) else type(exc).__name__
            raise ProfileError(f"invalid YAML: {first}", location=SourceLocation(path)) from None
        except RecursionError:
            raise ProfileError(f"invalid YAML: values nest more than {MAX_DEPTH} levels deep",
                               location=SourceLocation(path), hint=DEPTH_HINT) from None
        document = YamlDocument(path, None)
        if root is not None:
            builder = _Builder(loader, document, alias_budget(text))
            object.__setattr__(document, "data", builder.build(root, ()))
        return document
    finally:
        loader.dispose()


# Aliases can make a tiny file expand enormously ("billion laughs"): past one value
# built again through an alias per character of the document (at least
# MAX_ALIAS_EXPANSION), it is refused rather than built.  The bound grows with the
# document, so a large profile may merge shared defaults into every step.  Values
# written out are bounded by the size limit on input files instead
# (initorch.files.MAX_INPUT_BYTES), so a 100,000-step profile loads.
MAX_ALIAS_EXPANSION = 20_000
# No profile nests this deep; refusing it keeps parsing off Python's recursion limit.
MAX_DEPTH = 64
DEPTH_HINT = "a profile nests mappings and lists a few levels deep; flatten the value"


def alias_budget(text: str) -> int:
    """How many values aliases may build again in a document of ``text``."""
    return max(MAX_ALIAS_EXPANSION, len(text))


class _Builder:
    """Builds plain values from a node tree, recording positions and refusing
    unknown tags, recursive aliases and runaway alias expansion."""

    def __init__(self, loader: Any, doc: YamlDocument, budget: int) -> None:
        self.loader = loader
        self.doc = doc
        self.budget = budget
        self.expanded = 0
        self.built: set[int] = set()
        self.active: set[int] = set()

    def build(self, node: yaml.Node, keys: KeyPath) -> Any:
        where = _location(self.doc.path, node.start_mark)
        self.doc.value_marks[keys] = where
        if id(node) in self.built:
            self.expanded += 1
            if self.expanded > self.budget:
                raise ProfileError(f"aliases expand to more than {self.budget} values",
                                   location=where, hint="aliases nest too deeply; write it out")
        self.built.add(id(node))
        if len(keys) > MAX_DEPTH:
            raise ProfileError(f"values nest more than {MAX_DEPTH} levels deep",
                               location=where, hint=DEPTH_HINT)
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
        except ValueError:  # an integer past Python's 4,300-digit conversion limit
            raise ProfileError(f"unsupported YAML value: a number of {len(node.value)} "
                               "characters", location=where,
                               hint="quote it to pass it as text") from None

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
