"""``initorch sglang drift``: the ``sglang`` profile's ordering claims against SGLang's code.

Reads an SGLang source tree or wheel as text, never importing it.  The tree's layout is
recognised from its own files (:mod:`initorch_sglang.layouts`); the kit's drift
(:func:`initorch.kit.check_drift`) then follows that layout's chains to where each
claim's two calls part and judges the claim by their lines there.  A tree of no known
layout is all drift: nothing of it can be trusted.
"""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING

from initorch.kit import DriftReport, SourceTree
from initorch.kit import check_drift as check_layout
from initorch_sglang.engine import SGLANG
from initorch_sglang.layouts import Layout, recognise

if TYPE_CHECKING:
    from initorch import Plan

__all__ = ["check_drift", "open_tree"]


def open_tree(path: Path) -> SourceTree:
    """The ``sglang`` package of the wheel or tree at ``path``
    (:class:`initorch.kit.SourceError` when there is none)."""
    return SourceTree.open(path, SGLANG)


def check_drift(tree: SourceTree, plan: Plan, layout: Layout | None = None) -> DriftReport:
    """Check every plan edge between two steps SGLang performs, and every hook target
    of the tree's layout (``layout``: the one recognised from ``tree`` by default)."""
    layout = recognise(tree) if layout is None else layout
    if layout is None:
        return DriftReport.unknown_layout(tree, "initorch_sglang/layouts")
    return check_layout(tree, plan, layout)
