"""A resolved plan: exactly what will run, in which order, and why.

A :class:`Plan` is what ``initorch plan`` prints and what executors run; its
``fingerprint`` (sha256 over a canonical JSON of the steps, their effective
fields, the order and the settings) lets a launcher check that what runs is
what was reviewed, like a saved Terraform plan.  File paths are left out of the
fingerprint so that the same profiles give the same fingerprint on every
machine.
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from initorch.errors import ResolveError
from initorch.loading.document import Setting
from initorch.model.devices import DeviceRef
from initorch.model.step import EDGE_KINDS, Step
from initorch.resolution.graph import Edge, StepGraph
from initorch.suggest import closest


@dataclass(frozen=True, slots=True)
class PlannedStep:
    """A step that will run: its effective declaration, wave, and why it is in the plan.

    ``notes`` are what the step's preview says it will do on this machine (not
    part of the fingerprint)."""

    step: Step
    wave: int
    reasons: tuple[str, ...]
    notes: tuple[str, ...] = ()

    @property
    def name(self) -> str:
        return self.step.name


@dataclass(frozen=True, slots=True)
class SkippedStep:
    """A step that was considered and will not run, with the reason."""

    name: str
    reason: str


@dataclass(frozen=True, slots=True)
class Plan:
    """The outcome of resolution.  Immutable; executors never change it."""

    profiles: tuple[str, ...]
    device: DeviceRef
    settings: Mapping[str, Setting]
    steps: tuple[PlannedStep, ...]
    skipped: tuple[SkippedStep, ...]
    graph: StepGraph
    fingerprint: str

    @property
    def order(self) -> tuple[str, ...]:
        return tuple(planned.name for planned in self.steps)

    @property
    def waves(self) -> tuple[tuple[str, ...], ...]:
        waves: dict[int, list[str]] = {}
        for planned in self.steps:
            waves.setdefault(planned.wave, []).append(planned.name)
        return tuple(tuple(sorted(waves[i])) for i in sorted(waves))

    def __str__(self) -> str:
        """The dry run as ``initorch plan`` prints it: ordered steps with waves and
        reasons, then skipped steps, then the fingerprint."""
        width = max([len(p.name) for p in self.steps] + [len(s.name) for s in self.skipped]
                    + [4])
        lines = [
            f"profiles: {' -> '.join(self.profiles)}",
            f"device:   {self.device}",
            f"plan:     {len(self.steps)} steps in {len(self.waves)} waves, "
            f"{len(self.skipped)} skipped",
            "",
            f"  #  wave  {'step':<{width}}  why",
        ]
        for number, planned in enumerate(self.steps, 1):
            details = []
            if planned.step.device_bound:
                details.append("device-bound")
            if planned.step.timeout:
                details.append(f"timeout {planned.step.timeout:g}s")
            if planned.step.retries:
                details.append(f"retries {planned.step.retries}")
            suffix = f"  [{', '.join(details)}]" if details else ""
            lines.append(f"{number:>3}  {planned.wave:>4}  {planned.name:<{width}}  "
                         f"{'; '.join(planned.reasons)}{suffix}")
            lines += [f"{'':>11}  | {note}" for note in planned.notes]
        if self.skipped:
            lines += ["", "skipped:"]
            lines += [f"  {s.name:<{width}}  {s.reason}" for s in self.skipped]
        lines += ["", f"fingerprint: {self.fingerprint}"]
        return "\n".join(lines)

    def step(self, name: str) -> PlannedStep:
        for planned in self.steps:
            if planned.name == name:
                return planned
        raise KeyError(name)

    def config(self) -> dict[str, Any]:
        """Flat ``{dotted key: value}`` of every setting (what steps read)."""
        return {key: setting.value for key, setting in self.settings.items()}

    def explain(self, first: str, second: str) -> list[Edge]:
        """The chain of edges that makes ``first`` run before ``second``.

        Raises :class:`ResolveError` when either step is not in the plan or no
        constraint orders them (then they may run in the same wave).
        """
        for name in (first, second):
            if name not in self.order:
                skipped = next((s for s in self.skipped if s.name == name), None)
                if skipped is not None:
                    raise ResolveError(f"step '{name}' is not in the plan: skipped "
                                       f"({skipped.reason})")
                guess = closest(name, self.order)
                raise ResolveError(f"step '{name}' is not in the plan",
                                   hint=f"did you mean '{guess}'?" if guess
                                   else f"planned steps: {', '.join(self.order)}")
        if first == second:
            raise ResolveError(f"explain needs two different steps, got '{first}' twice",
                               hint="e.g. explain set_device init_torch_distributed")
        chain = self.graph.path(first, second)
        if chain is None:
            reverse = self.graph.path(second, first)
            hint = (f"the reverse holds: try 'explain {second} {first}'" if reverse
                    else "no constraint orders them; they may run concurrently")
            raise ResolveError(f"nothing makes '{first}' run before '{second}'", hint=hint)
        return chain

    def to_dict(self) -> dict[str, Any]:
        """The JSON shape of ``initorch plan --json`` (stable keys)."""
        return {
            "profiles": list(self.profiles),
            "device": self.device.type,
            "device_index": self.device.index,
            "order": list(self.order),
            "waves": [list(w) for w in self.waves],
            "steps": [
                {
                    "name": p.name,
                    "wave": p.wave,
                    "description": p.step.description,
                    "why": list(p.reasons),
                    "preview": list(p.notes),
                    **_step_fields(p.step),
                }
                for p in self.steps
            ],
            "skipped": [{"step": s.name, "reason": s.reason} for s in self.skipped],
            "settings": {key: s.value for key, s in sorted(self.settings.items())},
            "setting_origins": {key: s.origin for key, s in sorted(self.settings.items())},
            "fingerprint": self.fingerprint,
        }


def _step_fields(step: Step) -> dict[str, Any]:
    return {
        **{kind: list(step.edges(kind)) for kind in EDGE_KINDS},
        "when": step.when,
        "device_bound": step.device_bound,
        "binds_device": step.binds_device,
        "timeout": step.timeout,
        "retries": step.retries,
        "teardown": step.teardown is not None,
        "settings": [spec.key for spec in step.settings],
    }


def fingerprint(
    profiles: tuple[str, ...],
    device: DeviceRef,
    settings: Mapping[str, Setting],
    steps: tuple[PlannedStep, ...],
    skipped: tuple[SkippedStep, ...],
) -> str:
    """sha256 of everything that determines what runs, independent of file paths."""
    canonical = {
        "profiles": list(profiles),
        "device": [device.type, device.index],
        "settings": {key: s.value for key, s in sorted(settings.items())},
        "steps": [{"name": p.name, "wave": p.wave, **_step_fields(p.step)} for p in steps],
        "skipped": sorted(s.name for s in skipped),
    }
    blob = json.dumps(canonical, sort_keys=True, separators=(",", ":"), default=repr)
    return hashlib.sha256(blob.encode()).hexdigest()
