"""The text tables of ``initorch profiles``, ``steps`` and ``settings``, from the rows of
:mod:`initorch.cli.listing` (which ``--json`` prints as they are)."""

from __future__ import annotations

from typing import Any

from initorch.model.settings import show_value


def profile_lines(rows: list[dict[str, Any]]) -> list[str]:
    """A line per profile: name, device, plugin, description (and what it replaces)."""
    width = max(len(r["name"]) for r in rows) if rows else 4
    lines = []
    for row in rows:
        replaced = row["replaces"]
        note = (f"  (replaces the profile of {replaced['plugin'] or 'code'})" if replaced
                else "")
        lines.append(f"{row['name']:<{width}}  {row['device'] or '-':<8}  "
                     f"{_plugin_cell(row, rows)}  {row['description']}{note}")
    return lines


def step_lines(rows: list[dict[str, Any]]) -> list[str]:
    """A line per step (name, plugin, description), and one more with its edges and
    condition when it has any."""
    width = max(len(r["name"]) for r in rows) if rows else 4
    lines = []
    for row in rows:
        deps = ", ".join(f"{k} {','.join(row[k])}" for k in ("requires", "wants", "after",
                                                             "before", "wanted_by")
                         if row[k])
        lines.append(f"{row['name']:<{width}}  {_plugin_cell(row, rows)}  {row['description']}")
        if deps or row["when"]:
            when = f"  when {row['when']}" if row["when"] else ""
            lines.append(f"{'':<{width}}    {deps}{when}")
    return lines


def _plugin_cell(row: dict[str, Any], rows: list[dict[str, Any]]) -> str:
    """The plugin that provides ``row`` ('-' when added in code), padded for ``rows``."""
    width = max(len(r["plugin"] or "-") for r in rows)
    return f"{row['plugin'] or '-':<{width}}"


def setting_lines(rows: list[dict[str, Any]]) -> list[str]:
    """The text of ``initorch settings``: key, default (or value), description, then
    what is allowed and who declared it (or where the value came from)."""
    width = max([len(row["key"]) for row in rows] + [3])
    selected = bool(rows) and "value" in rows[0]
    lines = [f"{'setting':<{width}}  {'value' if selected else 'default':<20}  description"]
    for row in rows:
        value = row["value"] if selected else row["default"]
        shown = "(required)" if row["required"] and value is None else show_value(value)
        lines.append(f"{row['key']:<{width}}  {shown:<20}  {row['description']}")
        readers = ", ".join(d.split(" at ")[0] for d in row["declared_by"])
        where = f"from {row['origin']}" if selected else f"declared by {readers}"
        lines.append(f"{'':<{width}}    {row['allowed']}; {where}")
    return lines
