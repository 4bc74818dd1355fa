"""The renderers: a plan or a run as text, DOT, Mermaid or JSON, for people and tools.

Each takes the record (a :class:`~initorch.Plan`, a :class:`~initorch.RunReport`) and
returns a string (``plan_json``: the JSON object ``plan --json`` prints); none prints,
so an embedder decides where the text goes.  The CLI's ``plan``, ``graph`` and
``explain`` commands print exactly these.
"""

from initorch.reporting.graph_formats import graph_dot, graph_json, graph_mermaid
from initorch.reporting.render import (
    explain_step_text,
    explain_text,
    plan_text,
    run_summary_text,
)
from initorch.resolution.saved import plan_json

__all__ = [
    "explain_step_text",
    "explain_text",
    "graph_dot",
    "graph_json",
    "graph_mermaid",
    "plan_json",
    "plan_text",
    "run_summary_text",
]
