"""Pausing Python's cyclic garbage collector while a large graph of objects is built.

Resolving or loading a plan of 100k steps allocates millions of container
objects that stay alive (the plan) and form no reference cycles.  Each
allocation burst makes the cyclic collector scan the young objects again, and
every so often the whole heap: a third of the time of a large resolve went to
scans that could free nothing.  Reference counting still frees everything
temporary; only the cycle detector waits until the work is done.

Even paused, the collector counts what was allocated, and the first allocation
after the pause makes it scan every object the block built, once: 15 ms after
registering 20,000 steps.  A process that keeps what it builds until it exits (the
console script) says so with :func:`keep_what_pauses_build`: each pause then ends
by freezing what is alive (:func:`gc.freeze`, a constant-time move to the
generation the collector never scans) instead.
"""

from __future__ import annotations

import gc
from collections.abc import Iterator
from contextlib import contextmanager


class _Resume:
    """How a pause ends in this process: by freezing what is alive, or not."""

    freeze = False


def keep_what_pauses_build() -> None:
    """From now on, every pause ends by freezing the objects alive (this process keeps
    what it builds until it exits).  Only for a process that owns its collector: the
    frozen objects are never scanned again, so a reference cycle among them that
    later becomes garbage stays in memory until the process ends."""
    _Resume.freeze = True


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
        if _Resume.freeze:
            gc.freeze()
        gc.enable()
