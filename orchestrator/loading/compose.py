"""Composing profiles: ``extends`` (inheritance) and ``--profile`` layering.

Documents are applied in one order: each profile's parents depth-first and
left to right, then the profile itself; layered profiles follow one another.
A document shared by several paths is applied once, at its first occurrence.
Later documents override earlier ones, setting by setting.

One rule keeps layering honest: ``device.type`` may only be changed by a
profile that descends from the one that set it.  ``--profile npu --profile
musa`` therefore fails, naming both files, instead of silently running NPU
steps with MUSA settings.

Composition only layers values; whether a key is declared and a value valid is
decided against the steps' declarations by :mod:`initorch.loading.settle`, which
also fills in the declared defaults.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from dataclasses import field
from typing import Any

from initorch.errors import ConflictError, Problem, ProfileError
from initorch.loading.catalog import ProfileCatalog
from initorch.loading.document import EnvEntry, ProfileDocument, Setting, StepEntry
from initorch.loading.yamlsource import parse_yaml
from initorch.location import COMMAND_LINE, SourceLocation
from initorch.model.settings import CORE_KEYS, SettingCatalog
from initorch.records import record


@record
class ComposedProfile:
    """The result of applying every document in order, plus ``--set`` overrides.

    ``settings`` holds the values the profiles and ``--set`` give (not yet checked,
    no defaults); ``problems`` the format problems of every document, which
    resolution reports together with its own.
    """

    documents: tuple[ProfileDocument, ...]
    settings: Mapping[str, Setting]
    step_entries: Mapping[str, tuple[StepEntry, ...]] = field(default_factory=dict)
    env: Mapping[str, EnvEntry] = field(default_factory=dict)

    @property
    def problems(self) -> tuple[Problem, ...]:
        return tuple(problem for doc in self.documents for problem in doc.problems)

    @property
    def names(self) -> tuple[str, ...]:
        return tuple(doc.name for doc in self.documents)

    def value(self, key: str, default: Any = None) -> Any:
        setting = self.settings.get(key)
        return default if setting is None else setting.value

    def values(self) -> dict[str, Any]:
        """Flat ``{dotted key: value}`` of every setting."""
        return {key: setting.value for key, setting in self.settings.items()}


def compose(
    catalog: ProfileCatalog,
    refs: Sequence[str],
    overrides: Iterable[Override] = (),
) -> ComposedProfile:
    """Load ``refs`` (layered left to right) with their parents, then apply ``overrides``."""
    documents: list[ProfileDocument] = []
    ancestors: dict[str, set[str]] = {}
    for ref in refs:
        _expand(catalog, ref, None, COMMAND_LINE, (), documents, ancestors)
    settings: dict[str, Setting] = {}
    entries: dict[str, list[StepEntry]] = {}
    env: dict[str, EnvEntry] = {}
    for doc in documents:
        _apply_settings(doc, settings, ancestors)
        for entry in doc.steps:
            entries.setdefault(entry.name, []).append(entry)
        for variable in doc.env:  # a later profile's value wins; null drops it
            env.pop(variable.name, None)
            if variable.value is not None:
                env[variable.name] = variable
    composed = ComposedProfile(
        tuple(documents), settings, {name: tuple(e) for name, e in entries.items()}, env
    )
    return with_overrides(composed, overrides)


def with_overrides(composed: ComposedProfile, overrides: Iterable[Override]
                   ) -> ComposedProfile:
    """``composed`` with ``--set`` style overrides applied (a new object)."""
    settings = dict(composed.settings)
    _apply_overrides(settings, overrides)
    return ComposedProfile(composed.documents, settings, composed.step_entries, composed.env)


def _expand(
    catalog: ProfileCatalog,
    ref: str,
    referrer: ProfileDocument | None,
    location: SourceLocation,
    chain: tuple[str, ...],
    documents: list[ProfileDocument],
    ancestors: dict[str, set[str]],
) -> str:
    doc = catalog.load(ref, relative_to=referrer.path if referrer else None, location=location)
    if doc.path in chain:
        loop = " -> ".join((*chain[chain.index(doc.path):], doc.path))
        raise ProfileError(f"'extends' loop: {loop}", location=location,
                           hint="a profile cannot extend itself, directly or through parents")
    if doc.path not in ancestors:
        parents: set[str] = set()
        for parent_ref, parent_at in doc.extends:
            parent = _expand(catalog, parent_ref, doc, parent_at, (*chain, doc.path), documents,
                             ancestors)
            parents |= {parent, *ancestors[parent]}
        ancestors[doc.path] = parents
        documents.append(doc)
    return doc.path


def _apply_settings(doc: ProfileDocument, settings: dict[str, Setting],
                    ancestors: Mapping[str, set[str]]) -> None:
    for setting in doc.settings:
        previous = settings.get(setting.key)
        if setting.key == "device.type" and previous is not None \
                and previous.value != setting.value \
                and previous.location.path not in ancestors[doc.path]:
            raise ConflictError(
                "profiles disagree on device.type",
                problems=(
                    Problem(f"profile '{setting.source}' sets device.type "
                            f"'{setting.value}'", setting.location,
                            f"but '{previous.source}' already set '{previous.value}' at "
                            f"{previous.location}; layer only overlays that set no device, "
                            "or extend the other profile"),
                ),
            )
        settings[setting.key] = setting


Override = tuple[str, Any] | Setting
"""A ``--set`` value (``key``, ``value``), or a value read from elsewhere with its origin."""

ENVIRONMENT = "environment"
ENVIRONMENT_HINT = "fix the variable, or give the value with --set"


@record
class UnreadableVariable:
    """A setting's value that its ``from_environment`` reader refused to read.

    Another program's variables (SGLang's ``MOONCAKE_*``) are set for that program,
    and a store this plan does not run does not need them: the refusal is kept as
    the setting's value, and resolution reports it only when a planned step reads
    the setting (like a required setting nobody gave)."""

    message: str


def environment_settings(catalog: SettingCatalog, environ: Mapping[str, str],
                         skip: Iterable[str] = ()) -> list[Setting]:
    """The values declared settings read from ``environ`` (``from_environment``), as
    overrides: over the profiles, under ``--set`` (the keys in ``skip``); each
    located at ``$VARIABLE``.  A variable the reader refuses becomes an
    :class:`UnreadableVariable` located at ``<environment>``: whether it is a
    problem depends on which steps the plan runs, so resolution decides."""
    skipped = set(skip)
    found: list[Setting] = []
    for spec in catalog:
        if spec.from_environment is None or spec.key in skipped:
            continue
        try:
            read = spec.from_environment(environ)
        except ValueError as exc:
            found.append(Setting(spec.key,
                                 UnreadableVariable(f"{spec.key} from the environment: {exc}"),
                                 SourceLocation("<environment>"), ENVIRONMENT))
            continue
        if read is not None:
            value, variable = read
            found.append(Setting(spec.key, value, SourceLocation(f"${variable}"), ENVIRONMENT))
    return found


def _apply_overrides(settings: dict[str, Setting], overrides: Iterable[Override]) -> None:
    """Record ``--set`` values over the profiles' (checked later, with the rest)."""
    for item in overrides:
        if isinstance(item, Setting):
            settings[item.key] = item
            continue
        key, value = item
        if key in CORE_KEYS:
            raise ProfileError(f"--set cannot change {key}", location=COMMAND_LINE,
                               hint="select the device with --device or --profile")
        settings[key] = Setting(key, value, COMMAND_LINE, "--set")


SHOWN_VALUE = 60
"""How much of a ``--set`` value an error repeats (a value may be 200,000 brackets)."""


def parse_assignment(text: str) -> tuple[str, Any]:
    """Parse ``key=value`` from ``--set``; the value is typed the way YAML types it,
    by the profiles' own parser (the same refusals: aliases, depth, tags)."""
    key, sep, raw = text.partition("=")
    key = key.strip()
    if not sep or not key:
        raise ProfileError(f"--set {text!r}: expected KEY=VALUE", location=COMMAND_LINE,
                           hint="e.g. --set hicache.host_pool_mb=128")
    try:
        value = parse_yaml(raw, COMMAND_LINE.path).data if raw.strip() else ""
    except ProfileError as exc:
        shown = raw if len(raw) <= SHOWN_VALUE else raw[:SHOWN_VALUE] + "..."
        raise ProfileError(f"--set {key}: cannot read value {shown!r}: "
                           f"{exc.problems[0].message.removeprefix('invalid YAML: ')}",
                           location=COMMAND_LINE,
                           hint=f"quote it to pass text: --set {key}='\"...\"'") from None
    if isinstance(value, dict):
        raise ProfileError(f"--set {key}: value must be a scalar or a list",
                           location=COMMAND_LINE, hint="set nested keys one by one")
    return key, value
