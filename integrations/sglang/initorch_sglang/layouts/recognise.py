"""Which layout an SGLang tree has, read from the tree itself (never its version string).

Each :class:`~initorch_sglang.layouts.model.Layout` names functions that a tree of it
defines (``markers``) and functions it does not (``absent``); exactly one layout must
match.  None matching, or several, is an unknown layout: the caller says so and never
treats the release as clean.
"""

from __future__ import annotations

from initorch_sglang.follow import find_function
from initorch_sglang.layouts import bootstrap, model_runner, runner_bootstrap
from initorch_sglang.layouts.model import Layout, Marker
from initorch_sglang.source import SourceTree

__all__ = ["LAYOUTS", "layout_named", "recognise"]

LAYOUTS: tuple[Layout, ...] = (model_runner.LAYOUT, runner_bootstrap.LAYOUT, bootstrap.LAYOUT)
"""Oldest first; the last is the newest release's."""


def _defines(tree: SourceTree, marker: Marker) -> bool:
    if not tree.has(marker.file):
        return False
    if not marker.function:
        return True
    module = tree.module(marker.file)
    return module is not None and find_function(module, marker.function) is not None


def recognise(tree: SourceTree) -> Layout | None:
    """The one layout whose markers ``tree`` defines and whose absent functions it does
    not; ``None`` when no layout, or more than one, fits."""
    fitting = [layout for layout in LAYOUTS
               if all(_defines(tree, marker) for marker in layout.markers)
               and not any(_defines(tree, marker) for marker in layout.absent)]
    return fitting[0] if len(fitting) == 1 else None


def layout_named(name: str) -> Layout:
    """The layout called ``name`` (``KeyError`` if none is)."""
    for layout in LAYOUTS:
        if layout.name == name:
            return layout
    raise KeyError(name)
