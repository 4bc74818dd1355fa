"""Rows for ``initorch profiles`` and ``initorch steps`` (text and JSON)."""

from __future__ import annotations

from typing import Any

from initorch.errors import InitorchError
from initorch.location import display_path
from initorch.model.step import EDGE_KINDS
from initorch.plugins import Registry


def profile_rows(registry: Registry) -> list[dict[str, Any]]:
    """One row per available profile; a profile that fails to parse says so."""
    rows = []
    for name in registry.profiles.names():
        source = registry.profiles.source(name)
        replaced = source.replaces
        row: dict[str, Any] = {"name": name, "plugin": source.plugin,
                               "path": display_path(str(source.file)),
                               "replaces": None if replaced is None else {
                                   "plugin": replaced.plugin,
                                   "path": display_path(str(replaced.file))}}
        try:
            doc = registry.profiles.load(name)
        except InitorchError as error:
            row.update(device=None, extends=[], description=f"INVALID: {error}")
        else:
            row.update(device=doc.device_type.value if doc.device_type else None,
                       extends=[ref for ref, _ in doc.extends], description=doc.description)
        rows.append(row)
    return rows


def step_rows(registry: Registry) -> list[dict[str, Any]]:
    """One row per registered step with its declared fields."""
    return [
        {
            "name": s.name,
            "plugin": registry.steps.plugin_of(s.name),
            "description": s.description,
            **{kind: list(s.edges(kind)) for kind in EDGE_KINDS},
            "wanted_by": list(s.wanted_by),
            "when": s.when,
            "device_bound": s.device_bound,
            "binds_device": s.binds_device,
            "timeout": s.timeout,
            "retries": s.retries,
            "retry_on": [t.__name__ for t in s.retry_on],
            "teardown": s.teardown is not None,
            "defined_at": str(s.defined_at),
        }
        for s in sorted(registry.steps, key=lambda s: s.name)
    ]
