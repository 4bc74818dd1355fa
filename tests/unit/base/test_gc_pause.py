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
