"""The host pool's memory check against SGLang 0.5.23's ``host_memory_budget_bytes``.

SGLang's function runs in its venv with the machine figure and the rank count it
would ask torch.distributed for supplied per case (``pool_host/base.py:68-108``);
initorch's :func:`host_memory_budget` gets the same numbers.  The machine figure
itself is compared too: both read this host's available memory.
"""

from __future__ import annotations

import pytest

from initorch.steps.host_pool import host_memory_budget
from initorch.steps.topology import host_available_bytes
from tests.sglang.oracle import ask

pytestmark = pytest.mark.sglang

GIB = 2**30
RESERVE = 10 * GIB  # hicache.host_memory_reserve_mb's default, SGLang's constant

BUDGET_SCRIPT = r'''
import json, sys
from sglang.srt.mem_cache import host_memory
from sglang.srt.mem_cache.pool_host import base
import psutil
answers = {"reserve": base.HICACHE_HOST_MEMORY_RESERVE_BYTES,
           "machine": host_memory.available_host_memory_bytes(allow_cgroup_fallback=True),
           "own_rss": psutil.Process().memory_info().rss,  # sglang and torch, loaded
           "budgets": []}
for available, ranks in json.loads(sys.argv[1]):
    base.available_host_memory_bytes = lambda allow_cgroup_fallback=False: available
    base.ranks_per_host = lambda: ranks
    answers["budgets"].append(base.host_memory_budget_bytes(0))
print(json.dumps(answers))
'''

CASES = [(64 * GIB, 1), (64 * GIB, 8), (64 * GIB + 7, 3), (12 * GIB, 2), (9 * GIB, 1),
         (10 * GIB, 4), (1024 * GIB, 16)]


def test_each_rank_gets_sglangs_share_of_host_memory() -> None:
    sglang = ask(BUDGET_SCRIPT, CASES)
    assert sglang["reserve"] == RESERVE
    ours = [host_memory_budget(available, RESERVE, ranks) for available, ranks in CASES]
    assert ours == sglang["budgets"]


def test_both_read_the_same_available_memory_on_this_host() -> None:
    sglang = ask(BUDGET_SCRIPT, [])
    # Read seconds apart by two processes, the oracle's holding SGLang and torch: ours is
    # SGLang's figure plus at most the oracle's own memory, up to what moved meanwhile.
    ours, slack = host_available_bytes(), 256 * 2**20
    assert sglang["machine"] - slack <= ours <= sglang["machine"] + sglang["own_rss"] + slack, (
        ours, sglang)
