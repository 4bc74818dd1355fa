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

from orchestrator.errors import ProfileError
from orchestrator.location import SourceLocation

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
            object.__setattr__(document, "data", _build(loader, root, (), document))
        return document
    finally:
        loader.dispose()


def _build(loader: Any, node: yaml.Node, keys: KeyPath, doc: YamlDocument) -> Any:
    doc.value_marks[keys] = _location(doc.path, node.start_mark)
    if isinstance(node, yaml.MappingNode):
        loader.flatten_mapping(node)
        result: dict[str, Any] = {}
        for key_node, value_node in node.value:
            key = loader.construct_object(key_node, deep=True)
            key_mark = _location(doc.path, key_node.start_mark)
            if not isinstance(key, str):
                raise ProfileError(
                    f"mapping keys must be strings, not {type(key).__name__} {key!r}",
                    location=key_mark,
                    hint="quote the key",
                )
            path = (*keys, key)
            if key in result:
                first = doc.key_marks[path]
                raise ProfileError(
                    f"duplicate key '{key}' (first given at line {first.line})",
                    location=key_mark,
                    hint="remove one of them",
                )
            doc.key_marks[path] = key_mark
            result[key] = _build(loader, value_node, path, doc)
        return result
    if isinstance(node, yaml.SequenceNode):
        return [_build(loader, item, (*keys, i), doc) for i, item in enumerate(node.value)]
    return loader.construct_object(node, deep=True)
