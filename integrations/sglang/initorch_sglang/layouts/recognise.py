"""Which layout an SGLang tree has, read from the tree itself (never its version string).

Each :class:`~initorch_sglang.layouts.model.Layout` names functions that a tree of it
defines (``markers``) and functions it does not (``absent``); exactly one layout must
match.  None matching, or several, is an unknown layout: the caller says so and never
treats the release as clean.
"""

from __future__ import annotations

from initorch.kit import SourceTree
from initorch.kit import layout_named as layout_in
from initorch.kit import recognise as recognise_in
from initorch_sglang.layouts import bootstrap, model_runner, runner_bootstrap
from initorch_sglang.layouts.model import Layout

__all__ = ["LAYOUTS", "layout_named", "recognise"]

LAYOUTS: tuple[Layout, ...] = (model_runner.LAYOUT, runner_bootstrap.LAYOUT, bootstrap.LAYOUT)
"""Oldest first; the last is the newest release's."""


def recognise(tree: SourceTree) -> Layout | None:
    """The one layout whose markers ``tree`` defines and whose absent functions it does
    not; ``None`` when no layout, or more than one, fits."""
    return recognise_in(tree, LAYOUTS)


def layout_named(name: str) -> Layout:
    """The layout called ``name`` (``KeyError`` if none is)."""
    return layout_in(LAYOUTS, name)
