"""A call map's chains followed through an engine's tree, and two chains ordered.

A chain (:class:`~initorch.kit.callmap.Hop` after hop) leads from a function the engine
runs to the call of a step.  Each hop is found with every call site it has
(:func:`~initorch.kit.follow.call_sites`), and two chains are ordered where they part,
inside one function: "A before B" holds only if A's first call comes before B's first in
every run of that function, that is if the latest site that can be A's first call (its
first unconditional one, else its last) precedes B's earliest site.  Shared by drift
(a profile's claims) and an audit (the hazards of a release).
"""

from __future__ import annotations

from typing import Literal

from initorch.kit.callmap import Hop
from initorch.kit.follow import CallLine, MissingCall, call_sites
from initorch.kit.source import SourceTree
from initorch.records import record

__all__ = ["MissingCall", "Order", "Site", "locate", "locate_chain", "order"]


@record
class Site:
    """Every site of ``hop``'s call in its function."""

    hop: Hop
    sites: tuple[CallLine, ...]

    @property
    def first(self) -> int:
        """The earliest line that can make the call."""
        return min(site.line for site in self.sites)

    @property
    def latest_first(self) -> int:
        """The latest line that can still be the first call: the first unconditional
        site, or the last site when every one is conditional."""
        ordered = sorted(self.sites, key=lambda site: site.line)
        return next((site.line for site in ordered if site.unconditional), ordered[-1].line)

    def __str__(self) -> str:
        return f"{self.hop.file}:{self.first}"


def locate(tree: SourceTree, hop: Hop) -> Site:
    """``hop``'s call sites; :class:`MissingCall` if it has none."""
    sites = call_sites(tree, hop.file, hop.function, hop.calls)
    if not sites:
        raise MissingCall(f"{hop.file} {hop.function} no longer calls {hop.calls}")
    return Site(hop, tuple(sites))


def locate_chain(tree: SourceTree, chain: tuple[Hop, ...]) -> list[Site]:
    """Every hop of ``chain`` located; :class:`MissingCall` at the first that is not."""
    return [locate(tree, hop) for hop in chain]


@record
class Order:
    """Where two chains part and which call comes first there (``separate``: they start
    in different functions, so the source alone cannot order them)."""

    verdict: Literal["before", "not-before", "separate"]
    evidence: str


def order(first: list[Site], second: list[Site]) -> Order:
    """Whether the call at the end of ``first`` always comes before ``second``'s."""
    shared = 0
    for a, b in zip(first, second, strict=False):
        if (a.hop.file, a.hop.function) != (b.hop.file, b.hop.function):
            break
        if a.hop.calls == b.hop.calls:
            shared += 1
            continue
        where = (f"{a.hop.file} {a.hop.function}: {a.hop.calls} at {_lines(a)}, "
                 f"{b.hop.calls} at {_lines(b)}")
        return Order("before" if a.latest_first < b.first else "not-before", where)
    if shared:
        through = first[shared - 1]
        rest = [f"{chain[shared].hop.function} ({chain[shared]})" if len(chain) > shared
                else f"{through.hop.calls} itself" for chain in (first, second)]
        return Order("separate", f"both go through {through.hop.function} -> "
                                 f"{through.hop.calls} ({through}); from there {rest[0]} and "
                                 f"{rest[1]} are separate call chains")
    return Order("separate", f"{first[0].hop.function} ({first[0]}) and "
                             f"{second[0].hop.function} ({second[0]}) are separate call chains")


def _lines(site: Site) -> str:
    marks = [f":{s.line}" + ("" if s.unconditional else "?") for s in
             sorted(site.sites, key=lambda s: s.line)]
    return ", ".join(marks)
