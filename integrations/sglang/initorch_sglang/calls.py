"""The call map of the installed SGLang: which SGLang function performs which initorch step.

The maps themselves are data, one module per code layout (:mod:`initorch_sglang.layouts`);
this module picks the one the installed ``sglang`` package has, recognised from its files
(read, never imported: SGLang imports torch), and exports it under the names the rest of
the integration reads: verify mode hooks each ``target`` to record the call as the step's
event; drive mode knows which steps it performs itself; drift follows each ``chain``.
Without an installed SGLang, or with one of no known layout, the newest layout is used
(what :mod:`initorch_sglang.version` accepts is decided apart, by the audit).
"""

from __future__ import annotations

from functools import cache

from initorch_sglang.layouts import (
    DEVICE_MODULE,
    LAYOUTS,
    Hop,
    Layout,
    SGLangCall,
    recognise,
)
from initorch_sglang.version import installed_tree_path

__all__ = ["CALLS", "DEVICE_MODULE", "Hop", "SGLangCall", "call_for", "hook_target",
           "installed_layout", "installed_tree_path"]

CALLS: tuple[SGLangCall, ...]
"""The installed layout's calls (computed on first use, not at import)."""


@cache
def installed_layout() -> Layout:
    """The installed SGLang's layout; the newest when none is installed or it fits none."""
    from initorch_sglang.source import SourceError, SourceTree

    path = installed_tree_path()
    if path is not None:
        try:
            found = recognise(SourceTree.open(path))
        except (SourceError, OSError):
            found = None
        if found is not None:
            return found
    return LAYOUTS[-1]


def __getattr__(name: str) -> object:
    if name == "CALLS":
        return installed_layout().calls
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


def call_for(step: str) -> SGLangCall | None:
    """The installed layout's SGLang call that performs ``step``, if any."""
    return installed_layout().call_for(step)


def hook_target(call: SGLangCall, device_module: str) -> str:
    """``call.target`` with the profile's device module filled in."""
    return call.target.replace(DEVICE_MODULE, device_module)
