"""A start-up regression injected into real vLLM through a test plugin, caught by verify.

The TEST plugin of ``site-regression/`` makes each worker build its KV connector inside
``init_device``, before the process group.  Stock vLLM would start anyway (without a KV
transfer config the connector does nothing); verify mode stops the worker at the
connector, naming both calls and the ``vllm`` overlay's chain of edges with their
reasons, and the worker's report keeps the violation.  (The plugin is on ``PYTHONPATH``,
so vLLM loads it before initorch's: initorch's hook on ``init_device`` is the outer one,
and ``init_device`` is running when the connector starts.)
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from tests.vllm.server import running

pytestmark = pytest.mark.usefixtures("vllm_python")

SITE = Path(__file__).with_name("site-regression")
VIOLATION = ("vLLM 0.32.0 called vllm_kv_connector but vllm_init_device was still running "
             "when it started: the plan orders vllm_init_device before vllm_kv_connector")


def test_connector_before_the_process_group_stops_the_worker(tiny_model: Path,
                                                            tmp_path: Path) -> None:
    extra = {"INITORCH_VLLM": "verify", "PYTHONPATH": str(SITE),
             "INITORCH_VLLM_REPORT": str(tmp_path / "report-{rank}.json")}
    with running(tiny_model, extra, tmp_path / "vllm.log") as server:
        with pytest.raises(RuntimeError, match="before it was ready"):
            server.wait_ready()
        log = server.text()
    assert server.leftovers == []
    assert VIOLATION in log
    assert ("v1/engine/core.py _initialize_kv_caches: determine_available_memory (:315) "
            "before initialize_from_config (:377)" in log)  # the edge's reason
    report = json.loads((tmp_path / "report-0.json").read_text())
    [violation] = report["vllm"]["violations"]
    assert violation.startswith(VIOLATION)
    assert report["vllm"]["error"].startswith("OrderViolation: ")
    assert [call["step"] for call in report["vllm"]["calls"]] == ["vllm_init_device",
                                                                 "vllm_kv_connector"]
