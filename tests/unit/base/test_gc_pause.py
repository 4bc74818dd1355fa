"""initorch.gc_pause: the cyclic collector paused for a block, and as it was afterwards."""

from __future__ import annotations

import gc
from collections.abc import Iterator

import pytest

from initorch.gc_pause import gc_paused


@pytest.fixture
def collector_enabled() -> Iterator[None]:
    was = gc.isenabled()
    gc.enable()
    yield
    (gc.enable if was else gc.disable)()


def test_the_collector_is_paused_in_the_block_and_enabled_after(collector_enabled):
    with gc_paused():
        assert not gc.isenabled()
    assert gc.isenabled()


def test_the_collector_is_enabled_again_when_the_block_raises(collector_enabled):
    with pytest.raises(RuntimeError), gc_paused():
        raise RuntimeError("boom")
    assert gc.isenabled()


def test_a_caller_that_disabled_the_collector_keeps_it_disabled(collector_enabled):
    gc.disable()
    with gc_paused():
        assert not gc.isenabled()
    assert not gc.isenabled()


def test_a_process_that_keeps_what_it_builds_freezes_it_as_each_pause_ends(
        collector_enabled, monkeypatch: pytest.MonkeyPatch):
    from initorch import gc_pause

    monkeypatch.setattr(gc_pause._Resume, "freeze", False)
    gc_pause.keep_what_pauses_build()
    before = gc.get_freeze_count()
    try:
        with gc_paused():
            built = [[index] for index in range(1000)]  # lists: always tracked
            assert gc.get_freeze_count() == before  # nothing frozen inside the block
        assert gc.isenabled()
        assert gc.get_freeze_count() >= before + len(built)  # the block's objects among them
        frozen = gc.get_freeze_count()
        with gc_paused():
            with gc_paused():
                more = [[index] for index in range(1000)]
            # The inner pause leaves both the collector and the freezing to the outer one.
            assert not gc.isenabled() and gc.get_freeze_count() == frozen
        assert gc.get_freeze_count() >= frozen + len(more)
    finally:
        gc.unfreeze()
