"""A plan's graph in the formats of tools: Graphviz dot, Mermaid and JSON
(``initorch graph --format``).

It imports no more than the plan does, so that the CLI can offer the formats
(:data:`GRAPH_FORMATS`) without loading the other renderers.
"""

from __future__ import annotations

import json
from typing import Any

from initorch.resolution.plan import Plan

_EDGE_STYLE = {
    "requires": "solid",
    "wants": "dashed",
    "after": "dotted",
    "before": "dotted",
    "device": "bold",
}


def graph_dot(plan: Plan) -> str:
    """Graphviz source; one node per planned step, one edge per ordering constraint,
    labelled with its kinds, with the declarations' reasons as its tooltip."""
    lines = ["digraph initorch {", "  rankdir=LR;", "  node [shape=box];"]
    for planned in plan.steps:
        lines.append(f'  "{planned.name}" [label="{planned.name}\\nwave {planned.wave}"];')
    for source, target, kinds, reasons in _merged_edges(plan):
        style = _EDGE_STYLE[kinds[0]]
        # The label stays short (the kinds); a reason is a sentence, so it goes in the
        # tooltip, which SVG viewers show on hover.
        tooltip = f', tooltip="{_dot_text("; ".join(reasons))}"' if reasons else ""
        lines.append(f'  "{source}" -> "{target}" [label="{",".join(kinds)}"{tooltip}, '
                     f'style={style}];')
    lines.append("}")
    return "\n".join(lines)


def graph_mermaid(plan: Plan) -> str:
    """Mermaid flowchart source (renders in GitHub markdown)."""
    lines = ["flowchart LR"]
    for planned in plan.steps:
        lines.append(f'  {planned.name}["{planned.name} (wave {planned.wave})"]')
    for source, target, kinds, reasons in _merged_edges(plan):
        arrow = "-.->" if kinds == ["wants"] else "-->"
        label = ",".join(kinds)
        if reasons:  # free text must be quoted
            label = '"' + _mermaid_text(": ".join([label, *reasons])) + '"'
        lines.append(f"  {source} {arrow}|{label}| {target}")
    return "\n".join(lines)


def graph_json(plan: Plan) -> str:
    """Nodes and edges with the location of every declaration."""
    data: dict[str, Any] = {
        "fingerprint": plan.fingerprint,
        "nodes": [{"name": p.name, "wave": p.wave} for p in plan.steps],
        "edges": [
            {"from": e.source, "to": e.target, "kind": e.kind,
             "declared_at": str(e.declared_at), "declared_by": e.declared_by,
             "reason": e.reason}
            for e in plan.graph.edges()
        ],
    }
    return json.dumps(data, indent=2)


def _merged_edges(plan: Plan) -> list[tuple[str, str, list[str], list[str]]]:
    """One entry per (source, target): the kinds and the reasons of its declarations."""
    merged: dict[tuple[str, str], tuple[list[str], list[str]]] = {}
    for edge in plan.graph.edges():
        kinds, reasons = merged.setdefault((edge.source, edge.target), ([], []))
        if edge.kind not in kinds:
            kinds.append(edge.kind)
        if edge.reason and edge.reason not in reasons:
            reasons.append(edge.reason)
    return [(s, t, kinds, reasons) for (s, t), (kinds, reasons) in merged.items()]


def _dot_text(text: str) -> str:
    """Text for a double-quoted Graphviz string."""
    return text.replace("\\", "\\\\").replace('"', '\\"').replace("\n", " ")


def _mermaid_text(text: str) -> str:
    """Text for a quoted Mermaid label: quotes and pipes would end it."""
    return text.replace('"', "#quot;").replace("|", "#124;")


GRAPH_FORMATS = {"dot": graph_dot, "mermaid": graph_mermaid, "json": graph_json}
