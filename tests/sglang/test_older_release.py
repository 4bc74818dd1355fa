"""An older SGLang release, 0.5.17, started for real through initorch on this CPU: tp=2,
HiCache with the Mooncake Store backend, a managed master, the tiny model
(``tests/sglang/server.py``), from a venv of its own (``.venv-sglang-old``, built by ``make
sglang-old-venv``; skipped without it, so CI, which does not build it, stays green).

Why 0.5.17: 0.5.20 moved Mooncake's ``TransferEngine.initialize`` into ``run_with_deadline``'s
daemon thread (``srt/distributed/device_communicators/mooncake_transfer_engine.py:211-220``);
of the releases before it, 0.5.16 to 0.5.19 have ``srt/distributed/bootstrap.py`` and
``srt/platforms``, and 0.5.18 and 0.5.19 pin ``cuda-tile==1.6.0rc5``, which PyPI has only as
a stub that downloads the wheel from NVIDIA's index at install time (unreachable here).
0.5.17 is the ``runner_bootstrap`` layout (``initorch_sglang/layouts/runner_bootstrap.py``):
``ModelRunner.__init__`` still starts the parallel runtime, so drive mode, which replaces
``init_parallel_runtime`` (0.5.21 on), refuses it in one line; verify mode records and
checks it.  ``make e2e-sglang-old`` runs this file.
"""

from __future__ import annotations

import json
import re
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.sglang.server import (
    BIND,
    REPO,
    VENV_ENV,
    Master,
    Server,
    assert_nothing_left,
    managed_master,
    report_paths,
    running,
    stock_generation,
)

OLD_RELEASE = "0.5.17"
OLD_VENV = REPO / ".venv-sglang-old"

pytestmark = [
    pytest.mark.e2e,
    pytest.mark.skipif(not (OLD_VENV / "bin" / "python").exists(),
                       reason=f"no SGLang {OLD_RELEASE} venv at {OLD_VENV}: run "
                              "'make sglang-old-venv' (or 'make e2e-sglang-old')"),
]

# SGLang 0.5.17's start-up on a tp=2 CPU run, as initorch's step names: ModelRunner.__init__
# binds the threads (model_runner.py:342-343), sets the device once (:352), builds the shared
# engine (:364), then init_torch_distributed (:368) -> bootstrap._init_parallel_groups (the
# process group, the model-parallel groups); later the model, the KV pool, and HiCache's host
# pool and store.  Unlike 0.5.23, 0.5.17 builds the shared engine for HiCache here, and
# calls TransferEngine.initialize on the rank's main thread (mooncake_transfer_engine.py:205).
OLD_ORDER = ["bind_cpu_threads", "set_device", "init_shared_mooncake_transfer_engine",
             "init_torch_distributed", "init_model_parallel", "sglang_load_model",
             "sglang_alloc_kv_pool", "alloc_host_mem_pool", "init_mooncake_store",
             "register_mem_pool_host"]


@pytest.fixture(scope="module", autouse=True)
def old_venv() -> Iterator[Path]:
    """``INITORCH_SGLANG_VENV`` points at the older release's venv for this module (the
    servers of :mod:`tests.sglang.server` start from it); the venv must hold that release."""
    found = sorted(path.name for path in OLD_VENV.glob("lib/python*/site-packages/"
                                                        "sglang-*.dist-info"))
    assert found == [f"sglang-{OLD_RELEASE}.dist-info"], (
        f"{OLD_VENV} holds {found}, not SGLang {OLD_RELEASE}: rebuild it with "
        "'rm -r .venv-sglang-old && make sglang-old-venv'")
    with pytest.MonkeyPatch.context() as patch:
        patch.setenv(VENV_ENV, str(OLD_VENV))
        yield OLD_VENV


@pytest.fixture(scope="module")
def master(old_venv: Path) -> Iterator[Master]:
    """A master of this module's own (conftest's asks for the 0.5.23 venv)."""
    with managed_master() as started:
        yield started


def timed(mode: str, server: Server) -> str:
    """One line of the start-up's times (``pytest -s`` shows them)."""
    line = (f"SGLang {OLD_RELEASE} {mode}: up after {server.up_after or 0:.1f} s, "
            f"ready after {server.ready_after or 0:.1f} s")
    print(line)
    return line


@pytest.fixture(scope="module")
def stock_tokens(tiny_model: Path, master: Master,
                 tmp_path_factory: pytest.TempPathFactory) -> list[int]:
    """Stock SGLang 0.5.17's greedy tokens (initorch installed, not asked for)."""
    tokens, stock = stock_generation(tiny_model, master,
                                     tmp_path_factory.mktemp("stock-old") / "stock.log")
    timed("stock", stock)
    return tokens


def test_verify_mode_records_and_checks_the_older_release(
        tiny_model: Path, master: Master, tmp_path: Path, stock_tokens: list[int]) -> None:
    environ = {"INITORCH_SGLANG": "verify", **BIND, **report_paths(tmp_path)}
    with running(tiny_model, master, environ, tmp_path / "server.log") as server:
        server.wait_ready()
        tokens = server.generate()
    timed("verify", server)
    assert tokens == stock_tokens
    assert_nothing_left(server)
    log = server.text()
    assert len(re.findall(rf"initorch-sglang: verify ok: {len(OLD_ORDER)} of \d+ planned "
                          "steps", log)) == 2, log[-4000:]
    assert "installed the profile's plain (SGLang's ALLOC_MEMORY_FUNCS has no cpu entry" in log
    for rank in (0, 1):
        report = json.loads((tmp_path / f"report-{rank}.json").read_text())
        assert report["rank"] == rank and report["ok"] and report["executor"] == "sglang-verify"
        calls = report["sglang"]["calls"]
        assert [call["step"] for call in calls] == OLD_ORDER
        assert {call["thread"] for call in calls} == {"MainThread"}
        assert [call["device"] for call in calls] == [None] + [f"cpu:{rank}"] * (len(calls) - 1)
        vendor = report["sglang"]["vendor_calls"]
        assert [made["call"] for made in vendor] == [
            "Mooncake TransferEngine.initialize", "host registration alloc_without_pinning",
            "Mooncake MooncakeDistributedStore.setup",
            *["Mooncake MooncakeDistributedStore.register_buffer"] * (len(vendor) - 3)]
        # No deadline thread before 0.5.20: the engine initialises where the device was set.
        assert {(made["thread"], made["device"]) for made in vendor} == {
            ("MainThread", f"cpu:{rank}")}
        assert vendor[0]["called_from"].startswith(
            "srt/distributed/device_communicators/mooncake_transfer_engine.py:")
        assert report["sglang"]["violations"] == []
        steps = {step["step"]: step for step in report["steps"]}
        # bind_cpu_threads is left out: 0.5.17's ModelRunner.init_threads_binding binds
        # (model_runner.py:342-343, 1276-1279) and returns None whatever it did, which the
        # report reads as 0.5.23's idle _bind_threads_if_cpu ("called by SGLang, did nothing").
        assert all(steps[name]["status"] == "succeeded" for name in OLD_ORDER
                   if name != "bind_cpu_threads")
        assert steps["memory_baseline"]["status"] == "skipped"  # no such call in 0.5.17
        assert report["sglang"]["host_allocator"] == {
            "device": "cpu", "allocator": "plain", "installed_by_initorch": True}


def test_drive_mode_refuses_the_older_release_in_one_line(
        tiny_model: Path, master: Master, tmp_path: Path) -> None:
    """0.5.17 has no ``init_parallel_runtime`` (``ModelRunner.__init__`` starts the parallel
    runtime itself), so there is nothing for drive mode to replace: the launcher stops
    before any rank starts, naming the release and its layout."""
    with running(tiny_model, master, {"INITORCH_SGLANG": "drive", **report_paths(tmp_path)},
                 tmp_path / "drive.log") as driven:
        code = driven.wait_exit()
    assert code != 0
    assert_nothing_left(driven)
    log = driven.text()
    assert (f"initorch-sglang: SGLang {OLD_RELEASE} (layout runner_bootstrap) has no "
            "init_parallel_runtime for drive mode to replace; use INITORCH_SGLANG=verify") in log
    assert "Scheduler" not in log  # no rank was started
    assert not list(tmp_path.glob("report-*.json"))
