"""The call map of the installed SGLang: which SGLang function performs which initorch step.

The maps themselves are data, one module per code layout (:mod:`initorch_sglang.layouts`);
this module picks the one the installed ``sglang`` package has, recognised from its files
(read, never imported: SGLang imports torch; the audit's cached verdict names it), and
exports it under the names the rest of the integration reads: verify mode hooks each
``target`` to record the call as the step's event; drive mode knows which steps it
performs itself; drift follows each ``chain``.
Without an installed SGLang, or with one of no known layout, the newest layout is used
(what :mod:`initorch_sglang.version` accepts is decided apart, by the audit).
"""

from __future__ import annotations

from functools import cache

from initorch.kit import EngineCall
from initorch_sglang.layouts import LAYOUTS, Layout, layout_named

__all__ = ["CALLS", "installed_layout"]

CALLS: tuple[EngineCall, ...]
"""The installed layout's calls (computed on first use, not at import)."""


@cache
def installed_layout() -> Layout:
    """The installed SGLang's layout; the newest when none is installed or it fits none.

    Taken from the installed release's cached verdict (:func:`~initorch_sglang.version.
    installed_verdict`, a file read once it is cached) rather than re-recognised in every rank
    (about 0.2 s of ``ast`` for 0.5.23)."""
    from initorch_sglang.version import installed_verdict

    verdict = installed_verdict()
    if verdict.layout is not None:
        try:
            return layout_named(verdict.layout)
        except KeyError:  # a cache written by another version of this integration
            pass
    return LAYOUTS[-1]


def __getattr__(name: str) -> object:
    if name == "CALLS":
        return installed_layout().calls
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")

