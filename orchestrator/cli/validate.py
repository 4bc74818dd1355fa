"""``initorch validate``: lint profiles and report every problem found.

With a selection it validates exactly what ``plan`` would resolve.  Without one
it checks every available profile: device profiles are resolved fully; overlays
and abstract profiles (no ``device.type``) are checked for what can be checked
on their own — format, settings, the steps they mention and their conditions.
A problem in a shared parent (``base``) is reported once, not once per child.
"""

from __future__ import annotations

from collections.abc import Sequence

from initorch.api import load_plan
from initorch.errors import InitorchError, Problem, ProfileError
from initorch.loading.compose import compose
from initorch.plugins import Registry
from initorch.resolution.resolve import lint

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
    """Problems in every available profile, in name order, each reported once."""
    findings: list[Finding] = []
    seen: set[str] = set()
    for name in registry.profiles.names():
        try:
            composed = compose(registry.profiles, [name])
            if "device.type" in composed.settings:
                load_plan([name], registry=registry)
                continue
            problems = lint(composed, registry.steps)
            if problems:
                raise ProfileError(f"{len(problems)} problem(s)", problems=problems)
        except InitorchError as error:
            fresh = _unseen(error, seen)
            if fresh is not None:
                findings.append((name, fresh))
    return findings


def _unseen(error: InitorchError, seen: set[str]) -> InitorchError | None:
    """``error`` without the problems an earlier finding reported (None if none is left)."""
    fresh: list[Problem] = [p for p in error.problems if str(p) not in seen]
    seen.update(str(p) for p in fresh)
    if len(fresh) == len(error.problems):
        return error
    if not fresh:
        return None
    return InitorchError(f"{len(fresh)} problem(s)", problems=fresh)
