"""The real Mooncake master, engine and store torn down side by side, repeated: the
same outcome as the sequential teardown every time, nothing left behind."""

from __future__ import annotations

import json

import pytest

from tests.e2e.test_cpu import LEAK_CHECK, TORN_DOWN
from tests.support.commands import run_python

REPEATS = 3


def real_run(mode: str) -> dict:
    script = LEAK_CHECK.replace("__EXECUTOR__", "sequential").replace(
        "diagnoses=registry.diagnoses)", f"teardown={mode!r}, diagnoses=registry.diagnoses)")
    script = script.replace('"teardown": [t.step for t in report.teardown],',
                            '"teardown": [[t.step, t.status, t.thread] for t in report.teardown],')
    result = run_python(script)
    assert result.returncode == 0, result.stderr[-3000:]
    return json.loads(result.stdout.strip().splitlines()[-1])


@pytest.mark.parametrize("attempt", range(REPEATS))
def test_the_real_stack_torn_down_side_by_side_as_sequentially(attempt):
    side = real_run("side-by-side")
    sequential = real_run("sequential")
    for facts in (side, sequential):
        assert facts["ok"] and set(facts["statuses"].values()) == {"succeeded"}
        assert facts["listening_after"] == []
        assert facts["master_after"] == [False, [False, False, False]]
        assert facts["non_daemon_threads"] == ["MainThread"]
    assert side["statuses"] == sequential["statuses"]
    assert sorted((step, status) for step, status, _ in side["teardown"]) == \
        sorted((step, status) for step, status, _ in sequential["teardown"]) == \
        sorted((step, "succeeded") for step in TORN_DOWN)
    order = [step for step, _, _ in side["teardown"]]  # entries in the order they ended
    for first, then in (("register_mem_pool_host", "init_mooncake_store"),
                        ("init_mooncake_store", "mooncake_master"),
                        ("init_torch_distributed", "init_shared_mooncake_transfer_engine"),
                        ("init_torch_distributed", "rendezvous")):
        assert order.index(first) < order.index(then)
    assert {thread for _, _, thread in sequential["teardown"]} == {"MainThread"}
