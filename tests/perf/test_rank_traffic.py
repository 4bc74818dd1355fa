"""The growth guard of the job's store traffic: simulated ranks at a size CI affords.

``bench/ranks.py`` runs N simulated ranks (threads, 32 per process, each running
initorch's own :class:`~initorch.execution.peers.JobPeers`) against torch's real
TCPStore on loopback, and counts every store call their code makes.  This guard runs
32 and 256 of them and fails when the operations or bytes per beat grow faster than
the ranks (exponent above 1.15, or more than two operations per rank and beat, plus
the watcher's few), or when a guarantee is broken at 256: every rank agrees, names a
killed rank, a killed process's ranks and a killed watcher with where each was last
seen, and names a mismatch key by key (``broken``, which the bench checks at every
size).  Counts, never wall-clock times.
"""

from __future__ import annotations

import importlib.util
import sys
from types import ModuleType
from typing import Any

import pytest

from tests.support.paths import REPO

SMALL, LARGE = 32, 256


def _bench_ranks() -> ModuleType:
    """bench/ranks.py (bench/ is not a package)."""
    spec = importlib.util.spec_from_file_location("bench_ranks", REPO / "bench" / "ranks.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module  # its dataclasses look their module up there
    spec.loader.exec_module(module)
    return module


@pytest.fixture(scope="module")
def bench() -> ModuleType:
    return _bench_ranks()


@pytest.fixture(scope="module")
def measured(bench: ModuleType) -> dict[int, Any]:
    return {size: bench.measure(size, agreements=1) for size in (SMALL, LARGE)}  # counts, not times


def test_store_operations_per_beat_grow_linearly(bench, measured):
    small, large = measured[SMALL], measured[LARGE]
    for m in (small, large):  # a write and a read per rank, the watcher's reads besides
        assert m.ops_per_beat <= 2 * m.ranks + 8, m.ops_by_kind
        assert set(m.ops_by_kind) <= {"set", "get", "multi_get"}, m.ops_by_kind
    assert bench.growth(small.ops_per_beat, large.ops_per_beat, (SMALL, LARGE)) <= 1.15
    assert bench.growth(small.bytes_per_beat, large.bytes_per_beat, (SMALL, LARGE)) <= 1.15


def test_every_guarantee_holds_at_the_larger_size(bench, measured):
    """The guarantees ``bench/ranks.py`` checks at every size (``broken``): every rank
    agrees, names the killed rank with its last step, then a killed process's ranks and
    the killed watcher, and names the mismatch key by key."""
    m = measured[LARGE]
    assert bench.broken(m) == []
    assert len(m.rank_lost_texts) == LARGE - 1
    assert len(m.watcher_lost_texts) == len(m.process_lost_texts) - 1  # rank 0 itself
