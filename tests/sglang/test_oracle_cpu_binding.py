"""CPU binding against SGLang 0.5.23's own ``init_threads_binding`` on this machine.

SGLang binds threads only on device cpu (``bootstrap.py:75-87``): a NUMA node per rank,
or the rank's entry of ``SGLANG_CPU_OMP_THREADS_BIND``.  initorch reads the variable
the same way; where SGLang refuses more ranks than NUMA nodes, initorch splits the
cores instead, and the test asserts that difference.
"""

from __future__ import annotations

import os

import pytest

from initorch.steps.cpu_binding import plan_shares, sglang_thread_bind
from initorch.steps.topology import parse_cpu_list, read_numa_nodes
from tests.sglang.oracle import ask

pytestmark = pytest.mark.sglang

BIND_SCRIPT = r'''
import json, os, sys
from sglang.srt.utils import numa_utils
answers = []
for bind, index, world in json.loads(sys.argv[1]):
    os.environ.pop("SGLANG_CPU_OMP_THREADS_BIND", None)
    if bind is not None:
        os.environ["SGLANG_CPU_OMP_THREADS_BIND"] = bind
    try:
        answers.append({"cpus": numa_utils.init_threads_binding(numa_index=index,
                                                                world_size=world)})
    except AssertionError as exc:
        answers.append({"refused": str(exc)})
print(json.dumps(answers))
'''

ALLOWED = sorted(os.sched_getaffinity(0))


def test_the_rank_gets_its_sglang_cpu_omp_threads_bind_entry() -> None:
    first, last = ALLOWED[0], ALLOWED[-1]
    binds = [f"{first}|{last}", f"{first}-{last}", f"{first},{last}|{first}"]
    cases = [(bind, index, len(bind.split("|"))) for bind in binds
             for index in range(len(bind.split("|")))]
    for (bind, index, _), sglang in zip(cases, ask(BIND_SCRIPT, cases), strict=True):
        share = sglang_thread_bind({"SGLANG_CPU_OMP_THREADS_BIND": bind}, index, ALLOWED)
        assert share is not None
        assert list(share.cpus) == sorted(set(parse_cpu_list(sglang["cpus"]))), (bind, index)


def test_more_cpu_ranks_than_numa_nodes_sglang_refuses_initorch_splits() -> None:
    nodes = len(read_numa_nodes(ALLOWED))
    [sglang] = ask(BIND_SCRIPT, [(None, 0, nodes + 1)])
    assert "SGLANG_CPU_OMP_THREADS_BIND is not set" in sglang["refused"]
    assert sglang_thread_bind({}, 0, ALLOWED) is None  # unset: initorch's own split
    assert len(plan_shares(nodes + 1, ALLOWED)) == nodes + 1
