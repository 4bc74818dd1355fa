"""The rows of ``initorch profiles``, ``steps`` and ``settings``: ``--json`` prints them as
they are, :mod:`initorch.cli.tables` as text."""

from __future__ import annotations

from typing import Any

from initorch.errors import InitorchError
from initorch.loading.settle import SettledSettings
from initorch.location import display_path
from initorch.model.settings import SettingSpec
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
            description = doc.description if not doc.problems else (
                f"INVALID: {len(doc.problems)} problem(s), first: {doc.problems[0]}")
            row.update(device=doc.device_type.value if doc.device_type else None,
                       extends=[ref for ref, _ in doc.extends], description=description)
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
            "reads": list(s.reads),
            "when": s.when,
            "device_bound": s.device_bound,
            "binds_device": s.binds_device,
            "job_store": s.job_store,
            "barrier": s.barrier,
            "timeout": s.timeout,
            "retries": s.retries,
            "retry_on": [t.__name__ for t in s.retry_on],
            "teardown": s.teardown is not None,
            "settings": [spec.key for spec in s.settings],
            "defined_at": str(s.defined_at),
        }
        for s in sorted(registry.steps, key=lambda s: s.name)
    ]


def setting_rows(registry: Registry, settled: SettledSettings | None = None
                 ) -> list[dict[str, Any]]:
    """One row per declared setting, by key; with ``settled`` (a selection's
    settings) also its value there and where that value came from."""
    rows = []
    for spec in registry.settings:
        row = {**_spec_fields(spec),
               "declared_by": [str(d) for d in registry.settings.declarations(spec.key)]}
        if settled is not None:
            given = settled.values.get(spec.key)
            row["value"] = given.value if given is not None else None
            row["origin"] = given.origin if given is not None else "not set (required)"
        rows.append(row)
    return rows


def _spec_fields(spec: SettingSpec) -> dict[str, Any]:
    return {
        "key": spec.key,
        "type": spec.kind,
        "default": spec.default_value,
        "required": spec.required,
        "nullable": spec.nullable,
        "choices": list(spec.choices),
        "minimum": spec.minimum,
        "exclusive_minimum": spec.exclusive_minimum,
        "maximum": spec.maximum,
        "pattern": spec.pattern,
        "description": spec.description,
        "allowed": spec.describe_kind(),
    }
