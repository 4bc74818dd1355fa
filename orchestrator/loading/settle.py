"""Settling settings: declared defaults, overlaid by profiles, overlaid by ``--set``.

Every value a profile or ``--set`` gives is checked against its declaration
(:class:`~initorch.model.settings.SettingSpec`): an undeclared key is reported
with a did-you-mean at the key's ``file:line:col``, a value of the wrong kind or
out of bounds at the value's.  Declared settings nobody gave take their default,
with the declaring step as their origin, so a plan holds every setting its steps
read and says where each value came from.  Required settings nobody gave are
listed in ``missing``: whether that is a problem depends on which steps the plan
runs, so resolution decides.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import field
from typing import Any

from initorch.errors import Problem
from initorch.loading.compose import (
    ENVIRONMENT,
    ENVIRONMENT_HINT,
    ComposedProfile,
    UnreadableVariable,
)
from initorch.loading.document import Setting
from initorch.model.names import non_ascii_problem
from initorch.model.settings import SettingCatalog, SettingSpec
from initorch.printable import shown
from initorch.records import record


@record
class SettledSettings:
    """Checked values by key (given or default), required ones nobody gave, keys whose
    given value was refused (``rejected``: they have no value), and the problems.
    A value read from the environment and refused is in ``unread`` instead: it has
    no value either, and it is a problem only where a planned step reads it."""

    values: Mapping[str, Setting]
    missing: Mapping[str, SettingSpec]
    problems: tuple[Problem, ...]
    rejected: frozenset[str] = frozenset()
    # Values read from the environment and refused, by key: a problem only where a
    # planned step (or a condition) reads the setting, so resolution decides.
    unread: Mapping[str, Problem] = field(default_factory=dict)

    def for_conditions(self) -> dict[str, Any]:
        """What ``when:`` conditions read: every value, ``None`` for missing ones and for
        unread ones (a step whose condition then holds reads the setting, and its
        refusal is reported)."""
        values = {key: setting.value for key, setting in self.values.items()}
        return {**dict.fromkeys(self.missing), **dict.fromkeys(self.unread), **values}


def settle(composed: ComposedProfile, catalog: SettingCatalog) -> SettledSettings:
    """Check ``composed``'s values against ``catalog`` and fill in the defaults."""
    problems: list[Problem] = []
    values: dict[str, Setting] = {}
    rejected: set[str] = set()
    unread: dict[str, Problem] = {}
    for key, given in composed.settings.items():
        spec = catalog.get(key)
        if spec is None:
            problems.append(_unknown(given, catalog))
            continue
        problem = given.value.message if isinstance(given.value, UnreadableVariable) \
            else spec.check(given.value)
        if problem is not None:
            if given.source == ENVIRONMENT:
                where = "" if problem.startswith(key) else f"{key} from the environment: "
                unread[key] = Problem(where + problem, given.location, ENVIRONMENT_HINT)
                continue
            problems.append(Problem(problem, given.location))
            rejected.add(key)
            continue
        values[key] = Setting(key, spec.normalise(given.value), given.location, given.source,
                              given.key_location)
    missing: dict[str, SettingSpec] = {}
    for spec in catalog:
        if spec.key in composed.settings:
            continue
        if spec.required:
            missing[spec.key] = spec
            continue
        first = catalog.declarations(spec.key)[0]
        values[spec.key] = Setting(spec.key, spec.default_value, first.where, first.by,
                                   is_default=True)
    ordered = {key: values[key] for key in sorted(values)}
    return SettledSettings(ordered, missing, tuple(problems), frozenset(rejected), unread)


def _unknown(given: Setting, catalog: SettingCatalog) -> Problem:
    """An undeclared key: a look-alike character, a section, a value used as a
    section, or a misspelling (with the closest declared key)."""
    key = given.key
    where = given.key_location or given.location
    if not isinstance(key, str):  # load_plan(settings={...}) from Python
        return Problem(f"setting keys are text, got {type(key).__name__} {key!r}", where)
    label = f"--set {shown(key)}: no such setting" if given.source == "--set" \
        else f"unknown setting '{shown(key)}'"
    lookalike = non_ascii_problem(key, "setting key")
    if lookalike is not None:
        return Problem(f"{label}: {lookalike}", where, "retype the key in ASCII")
    below = catalog.section(key)
    if below:
        listed = ", ".join(below[:4]) + (", ..." if len(below) > 4 else "")
        return Problem(f"{label}: '{shown(key)}' is a section of settings ({listed}), not a "
                       "value",
                       where, "give the settings below it one by one")
    parents = [key[:i] for i in range(len(key)) if key[i] == "." and key[:i] in catalog]
    if parents:
        return Problem(f"{label}: '{parents[0]}' is a setting, not a section", where,
                       f"give '{parents[0]}' a plain value")
    guess = catalog.closest(key)
    hint = f"did you mean '{guess}'?" if guess \
        else "see 'initorch settings' for the declared settings"
    return Problem(label, where, hint)
