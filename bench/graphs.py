"""Graphs of synthetic steps for the scaling benchmarks, and the same graph for graphlib.

A shape gives each step the steps it requires (always earlier ones, so the
graph is acyclic).  :func:`setup` registers one no-op step per node and writes a
profile that lists them all, so that ``resolve`` does everything it does for a
real profile (selection, overrides, conditions, device binding, ordering, waves,
fingerprint); ``graphlib.TopologicalSorter`` gets the same dependencies as a
plain mapping.
"""

from __future__ import annotations

import random
from collections.abc import Callable
from pathlib import Path

from initorch import Registry
from initorch.loading.compose import ComposedProfile, compose
from initorch.model.registry import StepCatalog
from initorch.plugin import StepContext, step

Shape = Callable[[int], dict[str, tuple[str, ...]]]


def name(index: int) -> str:
    return f"s{index:06d}"


def random_dag(size: int, degree: int = 3, seed: int = 11) -> dict[str, tuple[str, ...]]:
    """Each step requires up to ``degree`` distinct earlier steps, drawn at random."""
    draw = random.Random(seed)
    return {name(i): tuple(sorted({name(draw.randrange(i)) for _ in range(degree)}))
            if i else () for i in range(size)}


def chain(size: int) -> dict[str, tuple[str, ...]]:
    return {name(i): (name(i - 1),) if i else () for i in range(size)}


def fan_out(size: int) -> dict[str, tuple[str, ...]]:
    """One root that every other step requires."""
    return {name(i): (name(0),) if i else () for i in range(size)}


SHAPES: dict[str, Shape] = {"random": random_dag, "chain": chain, "fan-out": fan_out}


def _noop(ctx: StepContext) -> None:
    return None


def setup(dependencies: dict[str, tuple[str, ...]], folder: Path
          ) -> tuple[ComposedProfile, StepCatalog]:
    """The steps registered with their ``requires`` and one profile listing them all."""
    registry = Registry()
    for step_name, requires in dependencies.items():
        registry.steps.add(step(step_name, description="a synthetic step",
                                requires=requires)(_noop))
    profile = folder / "generated.yaml"
    lines = ["device: {type: cpu}", "steps:"] + [f"  {n}: {{}}" for n in dependencies]
    profile.write_text("\n".join(lines) + "\n", encoding="utf-8")
    return compose(registry.profiles, [str(profile)]), registry.steps


def profile_text(dependencies: dict[str, tuple[str, ...]]) -> str:
    """A profile that gives every step's ``requires`` itself (steps registered bare)."""
    lines = ["device: {type: cpu}", "steps:"] + [
        f"  {n}: {{requires: [{', '.join(requires)}]}}" if requires else f"  {n}: {{}}"
        for n, requires in dependencies.items()]
    return "\n".join(lines) + "\n"
