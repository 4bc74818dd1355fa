"""``initorch validate``: lint profiles and report every problem found.

With a selection it validates exactly what ``plan`` would resolve.  Without one
it checks every available profile: device profiles are resolved fully; overlays
and abstract profiles (no ``device.type``) are checked for what can be checked
on their own — format and the step names they mention.
"""

from __future__ import annotations

from collections.abc import Sequence

from initorch.api import load_plan
from initorch.errors import InitorchError, Problem, ProfileError
from initorch.loading.compose import ComposedProfile, compose
from initorch.location import SourceLocation
from initorch.plugins import Registry

Finding = tuple[str, InitorchError]


def validate_selection(registry: Registry, profiles: Sequence[str], device: str | None,
                       settings: Sequence[str]) -> list[Finding]:
    """Problems with one selection (as ``plan`` would resolve it)."""
    label = " + ".join(profiles) or str(device)
    try:
        load_plan(profiles, device=device, settings=settings, registry=registry)
    except InitorchError as error:
        return [(label, error)]
    return []


def validate_all(registry: Registry) -> list[Finding]:
    """Problems in every available profile, in name order."""
    findings: list[Finding] = []
    for name in registry.profiles.names():
        try:
            composed = compose(registry.profiles, [name])
            if "device.type" in composed.settings:
                load_plan([name], registry=registry)
                continue
            problems = _unknown_step_names(registry, composed)
            if problems:
                raise ProfileError(f"{len(problems)} problem(s)", problems=problems)
        except InitorchError as error:
            findings.append((name, error))
    return findings


def _unknown_step_names(registry: Registry, composed: ComposedProfile) -> list[Problem]:
    """Every step an overlay mentions (as entry or edge target) that no plugin registered."""
    mentioned: list[tuple[str, SourceLocation]] = []
    for name, entries in composed.step_entries.items():
        mentioned.append((name, entries[0].location))
        mentioned += [(c.target, c.location) for e in entries for c in e.changes]
    problems: list[Problem] = []
    for name, location in mentioned:
        if name not in registry.steps:
            try:
                registry.steps.get(name, location)
            except InitorchError as error:
                problems.extend(error.problems)
    return problems
