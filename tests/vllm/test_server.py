"""The real vLLM 0.32.0 OpenAI-compatible server on this CPU, with initorch's plugin.

Each launch is first checked by ``initorch vllm check`` with the same arguments and
environment (accepted: exit 0), then started; it answers ``/v1/completions``, and
nothing of it is left after its stop.  Stock vLLM (the plugin installed, not asked for)
and verify mode at tp=1 and tp=2 give the same greedy tokens; verify mode writes each
worker's report and trace, with vLLM's own start-up calls in the ``vllm`` overlay's
order, each with its thread and device.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from pathlib import Path

import pytest

from tests.sglang.server import assert_nothing_left
from tests.vllm.server import (
    BIND,
    assert_verified,
    initorch_in_vllm,
    running,
    server_arguments,
    verify_environment,
)

pytestmark = pytest.mark.usefixtures("vllm_python")

def checked_and_served(model: Path, extra: Mapping[str, str | None], log: Path, *,
                       tp: int) -> list[int]:
    """Pre-flight accepts the launch, which then serves a completion and stops clean."""
    check = initorch_in_vllm("vllm", "check", "--", *server_arguments(model, tp=tp),
                             **{key: value for key, value in extra.items()
                                if value is not None})
    assert check.returncode == 0, check.stderr[-3000:]
    assert "pre-flight: ok" in check.stdout
    with running(model, extra, log, tp=tp) as server:
        server.wait_ready()
        tokens = server.generate()
    assert_nothing_left(server)
    assert len(tokens) == 8
    return tokens


@pytest.fixture(scope="module")
def stock_tokens(tiny_model: Path, tmp_path_factory: pytest.TempPathFactory) -> list[int]:
    log = tmp_path_factory.mktemp("stock") / "vllm.log"
    tokens = checked_and_served(tiny_model, {}, log, tp=1)
    assert "initorch" not in log.read_text()  # installed, not asked for: not there
    return tokens


def test_verify_tp1(tiny_model: Path, tmp_path: Path, stock_tokens: list[int]) -> None:
    tokens = checked_and_served(tiny_model, verify_environment(tmp_path),
                                tmp_path / "vllm.log", tp=1)
    assert tokens == stock_tokens
    assert_verified(tmp_path, 0)
    # The worker's lines are vLLM's, in its format (logger.py:28-32): process, level, time.
    log = (tmp_path / "vllm.log").read_text()
    assert re.search(r"^\(Worker(_TP0)? pid=\d+\) INFO \d\d-\d\d [\d:]+ \[session\.py:\d+\] "
                     r"initorch-vllm: verify ok: 9 of \d+ planned steps seen in vLLM's order",
                     log, re.MULTILINE), log[-3000:]


def test_verify_tp2(tiny_model: Path, tmp_path: Path, stock_tokens: list[int]) -> None:
    tokens = checked_and_served(tiny_model, verify_environment(tmp_path) | BIND,
                                tmp_path / "vllm.log", tp=2)
    assert tokens == stock_tokens  # tp=2 gives tp=1's greedy tokens
    for rank in (0, 1):
        assert_verified(tmp_path, rank, world=2)
