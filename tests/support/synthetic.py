"""Synthetic steps and the plans made of them alone, for the tests of ordering and runs."""

from __future__ import annotations

from collections.abc import Callable, Iterable
from pathlib import Path
from typing import Any

from initorch import Registry
from initorch.loading.compose import compose
from initorch.model.step import StepDefinition
from initorch.plugin import StepContext, setting, step
from initorch.resolution.plan import Plan
from initorch.resolution.resolve import resolve

# Switches synthetic steps declare for their `when:` conditions.
FLAGS_ENABLED = setting("flags.enabled", bool, default=True,
                        description="synthetic switch for gated test steps")
FLAG = setting("flag", bool, default=True, description="synthetic switch for test steps")


def noop(ctx: StepContext) -> None:
    """A step action that does nothing (for ordering tests)."""


def define(name: str, action: Callable[[StepContext], Any] = noop, **fields: Any
           ) -> StepDefinition:
    """A step definition for synthetic plans."""
    return step(name, description=f"synthetic step {name}", **fields)(action)


def synthetic_plan(definitions: Iterable[StepDefinition], tmp_path: Path,
                   extra_yaml: str = "") -> Plan:
    """Resolve ``definitions`` as the only steps of a cpu-typed profile in ``tmp_path``."""
    registry = Registry()
    names = []
    for definition in definitions:
        registry.steps.add(definition)
        names.append(definition.fields["name"])
    profile = tmp_path / "synthetic.yaml"
    steps_yaml = "\n".join(f"  {name}: {{}}" for name in names)
    profile.write_text(f"device:\n  type: cpu\nsteps:\n{steps_yaml}\n{extra_yaml}",
                       encoding="utf-8")
    return resolve(compose(registry.profiles, [str(profile)]), registry.steps)
