"""Pausing Python's cyclic garbage collector while a large graph of objects is built.

Resolving or loading a plan of 100k steps allocates millions of container
objects that stay alive (the plan) and form no reference cycles.  Each
allocation burst makes the cyclic collector scan the young objects again, and
every so often the whole heap: a third of the time of a large resolve went to
scans that could free nothing.  Reference counting still frees everything
temporary; only the cycle detector waits until the work is done.
"""

from __future__ import annotations

import gc
from collections.abc import Iterator
from contextlib import contextmanager


@contextmanager
def gc_paused() -> Iterator[None]:
    """Disable the cyclic collector for the block, if it is enabled, and enable it
    again afterwards (also when the block raises).  A caller that disabled it
    itself keeps it disabled.  The setting is process-wide: another thread that
    allocates meanwhile is not collected either, for as long as the block runs."""
    if not gc.isenabled():
        yield
        return
    gc.disable()
    try:
        yield
    finally:
        gc.enable()
