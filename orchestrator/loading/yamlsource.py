"""Safe YAML parsing that remembers where every key and value came from.

PyYAML's safe loader builds plain Python values and throws away the positions;
profile errors must point at ``file:line:column``, so this module reads the
document with the safe loader's parser and keeps a map from each key path to its
position.  Duplicate keys (which PyYAML silently accepts, keeping the last) are
rejected, since a profile that says a thing twice is almost always a mistake.

Two readers share that contract.  Most profiles are plain: no anchors, aliases,
explicit tags or merge keys, and nothing wrong.  :func:`_read_plain` builds those
straight from the parser's events, resolving each distinct plain scalar once,
without a node tree (the node tree and PyYAML's constructor were most of the time
of reading a large profile).  Anything else -- an anchor, an alias, a tag, a merge
key, a second document, a duplicate or non-string key, a value nested too deeply,
a scalar the constructor refuses -- sends the whole document to :class:`_Builder`,
which composes the node tree and owns every refusal and its message.  So a
problem is always reported by the same code, with the same position, and the
alias bounds hold: aliases never reach the plain reader.
"""

from __future__ import annotations

from dataclasses import field
from typing import Any

import yaml
from yaml.events import (
    MappingEndEvent,
    MappingStartEvent,
    ScalarEvent,
    SequenceEndEvent,
    SequenceStartEvent,
    StreamEndEvent,
)

from initorch.errors import ProfileError
from initorch.gc_pause import gc_paused
from initorch.location import SourceLocation
from initorch.records import record

KeyPath = tuple[str | int, ...]
# A 0-based (line, column), as the parser's marks give it; a SourceLocation (1-based,
# with the path) is made only for the positions somebody asks for.
Position = tuple[int, int]

_Loader: type[yaml.SafeLoader] = getattr(yaml, "CSafeLoader", yaml.SafeLoader)


@record
class YamlDocument:
    """A parsed YAML document: plain ``data`` plus positions by key path."""

    path: str
    data: Any
    value_marks: dict[KeyPath, Position] = field(default_factory=dict)
    key_marks: dict[KeyPath, Position] = field(default_factory=dict)

    def where(self, *keys: str | int) -> SourceLocation:
        """Location of the value at ``keys``; falls back to the nearest enclosing one."""
        found = self.value_marks.get(keys)
        if found is not None:  # nearly always: asked about a value that was written
            return SourceLocation(self.path, found[0] + 1, found[1] + 1)
        end = len(keys)
        while found is None and end:
            end -= 1
            found = self.value_marks.get(keys[:end])
        return self.location(found)

    def key_where(self, *keys: str | int) -> SourceLocation:
        """Location of the mapping key at ``keys`` (where a misspelt key should be reported)."""
        found = self.key_marks.get(keys)
        return self.where(*keys) if found is None else self.location(found)

    def location(self, position: Position | None) -> SourceLocation:
        """``position`` in this document as a 1-based location (the file alone for None)."""
        if position is None:
            return SourceLocation(self.path)
        return SourceLocation(self.path, position[0] + 1, position[1] + 1)


def _position(mark: Any) -> Position:
    return (mark.line, mark.column)


def parse_yaml(text: str, path: str) -> YamlDocument:
    """Parse one YAML document safely; raise :class:`ProfileError` with a position."""
    with gc_paused():  # the document and its positions form no cycle
        try:
            return _parse(text, path)
        except yaml.MarkedYAMLError as exc:
            mark = exc.problem_mark or exc.context_mark
            raise ProfileError(
                f"invalid YAML: {exc.problem or exc.context}",
                location=SourceLocation(path, mark.line + 1, mark.column + 1) if mark
                else SourceLocation(path),
                hint="check indentation and quoting around this position",
            ) from None
        except yaml.YAMLError as exc:
            # A reader error (a control character) is two lines; the first says it all.
            first = str(exc).splitlines()[0] if str(exc) else type(exc).__name__
            raise ProfileError(f"invalid YAML: {first}", location=SourceLocation(path)) from None
        except RecursionError:
            raise ProfileError(f"invalid YAML: values nest more than {MAX_DEPTH} levels deep",
                               location=SourceLocation(path), hint=DEPTH_HINT) from None


def _parse(text: str, path: str) -> YamlDocument:
    document = YamlDocument(path, None)
    loader = _Loader(text)
    try:
        object.__setattr__(document, "data", _read_plain(loader, document))
        return document
    except _Irregular:
        document.value_marks.clear()
        document.key_marks.clear()
    finally:
        loader.dispose()
    loader = _Loader(text)
    try:
        root = loader.get_single_node()
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


class _Irregular(Exception):
    """The document needs the node builder (see the module's docstring)."""


_YAML_TAG_PREFIX = "tag:yaml.org,2002:"
_STR_TAG = f"{_YAML_TAG_PREFIX}str"
_COLLECTION_TAGS = frozenset({f"{_YAML_TAG_PREFIX}seq", f"{_YAML_TAG_PREFIX}map"})
# Plain scalars the safe constructor turns into immutable values, so that one built
# value can stand for every occurrence of the same text.  Any other tag a plain
# scalar resolves to ('<<' merge, '=' value) is left to the node builder.
_PLAIN_TAGS = frozenset(f"tag:yaml.org,2002:{kind}"
                        for kind in ("null", "bool", "int", "float", "timestamp"))
_MISSING = object()


def _read_plain(loader: Any, document: YamlDocument) -> Any:
    """The data of a plain document, straight from the parser's events, recording
    positions in ``document``; raises :class:`_Irregular` at anything else.

    Each distinct plain scalar is resolved (the safe loader's own implicit
    resolver) and constructed once per document; the results are immutable, so
    one value serves every occurrence.
    """
    get_event = loader.get_event
    values, keys_at = document.value_marks, document.key_marks
    plain: dict[str, Any] = {}
    # The implicit resolvers by the first character they read: a plain scalar that
    # starts with no such character is a string (most keys, step names among them),
    # unless a resolver reads every scalar or a path resolver is installed.
    resolvers = loader.yaml_implicit_resolvers
    firsts_decide = None not in resolvers and not loader.yaml_path_resolvers

    def scalar(event: Any) -> Any:
        text = event.value
        if event.tag is not None or event.anchor is not None:
            raise _Irregular
        if not event.implicit[0]:  # quoted
            if loader.resolve(yaml.ScalarNode, text, event.implicit) != _STR_TAG:
                raise _Irregular
            return text
        if firsts_decide and text[:1] not in resolvers:
            return text
        value = plain.get(text, _MISSING)
        if value is _MISSING:
            value = plain[text] = _construct_plain(loader, text, event)
        return value

    def build(event: Any, path: KeyPath) -> Any:
        mark = event.start_mark
        values[path] = (mark.line, mark.column)
        kind = event.__class__
        if kind is ScalarEvent:
            return scalar(event)
        # An alias has an anchor; a collection this deep may hold a value too deep.
        if event.anchor is not None or len(path) >= MAX_DEPTH:
            raise _Irregular
        if kind is MappingStartEvent and event.tag is None:
            mapping: dict[str, Any] = {}
            while (event := get_event()).__class__ is not MappingEndEvent:
                key = scalar(event) if event.__class__ is ScalarEvent else None
                if key.__class__ is not str or key in mapping:
                    raise _Irregular
                child = (*path, key)
                mark = event.start_mark
                keys_at[child] = (mark.line, mark.column)
                mapping[key] = build(get_event(), child)
            return mapping
        if kind is SequenceStartEvent and event.tag is None:
            sequence: list[Any] = []
            while (event := get_event()).__class__ is not SequenceEndEvent:
                sequence.append(build(event, (*path, len(sequence))))
            return sequence
        raise _Irregular

    get_event()  # the stream's start
    if get_event().__class__ is StreamEndEvent:
        return None  # no document
    data = build(get_event(), ())
    get_event()  # the document's end
    if get_event().__class__ is not StreamEndEvent:
        raise _Irregular  # a second document: the node builder reports it
    return data


def _construct_plain(loader: Any, text: str, event: Any) -> Any:
    tag = loader.resolve(yaml.ScalarNode, text, event.implicit)
    if tag == _STR_TAG:
        return text
    if tag not in _PLAIN_TAGS:
        raise _Irregular
    try:
        return loader.construct_object(
            yaml.ScalarNode(tag, text, event.start_mark, event.end_mark))
    except (yaml.YAMLError, ValueError):  # reported by the node builder
        raise _Irregular from None


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
        self.doc.value_marks[keys] = position = _position(node.start_mark)
        if id(node) in self.built:
            self.expanded += 1
            if self.expanded > self.budget:
                raise ProfileError(f"aliases expand to more than {self.budget} values",
                                   location=self.doc.location(position),
                                   hint="aliases nest too deeply; write it out")
        self.built.add(id(node))
        if len(keys) > MAX_DEPTH:
            raise ProfileError(f"values nest more than {MAX_DEPTH} levels deep",
                               location=self.doc.location(position), hint=DEPTH_HINT)
        if id(node) in self.active:
            raise ProfileError("recursive alias: a value contains itself",
                               location=self.doc.location(position),
                               hint="remove the alias that refers to its own anchor")
        if isinstance(node, yaml.CollectionNode) and node.tag not in _COLLECTION_TAGS:
            # The scalars' constructor refuses unknown tags; on a list or mapping the tag
            # would be dropped silently (!!python/object:os.system [1] became [1]).
            shown = node.tag.replace(_YAML_TAG_PREFIX, "!!", 1)
            kind = "list" if isinstance(node, yaml.SequenceNode) else "mapping"
            raise ProfileError(f"unsupported YAML tag {shown!r} on a {kind}",
                               location=self.doc.location(position),
                               hint="profiles hold plain strings, numbers, booleans, lists "
                                    "and mappings; remove the tag")
        self.active.add(id(node))
        try:
            if isinstance(node, yaml.MappingNode):
                return self._mapping(node, keys)
            if isinstance(node, yaml.SequenceNode):
                return [self.build(item, (*keys, i)) for i, item in enumerate(node.value)]
            return self._scalar(node, position)
        finally:
            self.active.discard(id(node))

    def _scalar(self, node: yaml.Node, position: Position) -> Any:
        try:
            return self.loader.construct_object(node, deep=True)
        except yaml.MarkedYAMLError as exc:
            raise ProfileError(f"unsupported YAML value: {exc.problem}",
                               location=self.doc.location(position),
                               hint="profiles hold plain strings, numbers, booleans, lists "
                                    "and mappings; quote the value") from None
        except ValueError:  # an integer past Python's 4,300-digit conversion limit
            raise ProfileError(f"unsupported YAML value: a number of {len(node.value)} "
                               "characters", location=self.doc.location(position),
                               hint="quote it to pass it as text") from None

    def _mapping(self, node: yaml.MappingNode, keys: KeyPath) -> dict[str, Any]:
        explicit = {id(pair) for pair in node.value}
        try:
            self.loader.flatten_mapping(node)
        except yaml.MarkedYAMLError as exc:
            raise ProfileError(f"invalid merge key: {exc.problem}",
                               location=self.doc.location(_position(node.start_mark))) from None
        result: dict[str, Any] = {}
        merged_keys: set[str] = set()
        for pair in node.value:
            key_node, value_node = pair
            key_position = _position(key_node.start_mark)
            key = self._scalar(key_node, key_position)
            if not isinstance(key, str):
                raise ProfileError(
                    f"mapping keys must be strings, not {type(key).__name__} {key!r}",
                    location=self.doc.location(key_position),
                    hint="quote the key",
                )
            path = (*keys, key)
            # Keys merged in with '<<' may be overridden by the mapping's own keys.
            if key in result and key not in merged_keys:
                first = self.doc.key_marks[path][0] + 1
                raise ProfileError(
                    f"duplicate key '{key}' (first given at line {first})",
                    location=self.doc.location(key_position),
                    hint="remove one of them",
                )
            merged_keys.discard(key)
            if id(pair) not in explicit:
                merged_keys.add(key)
            self.doc.key_marks[path] = key_position
            result[key] = self.build(value_node, path)
        return result
