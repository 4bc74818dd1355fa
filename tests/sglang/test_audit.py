"""``initorch sglang audit`` on published SGLang wheels: the seed bugs where they were.

The releases are the ones each fix or change sits between (read in the wheels, cited in
``initorch_sglang/layouts``): 0.5.10.post1 is the last with the Ascend order bug (engine at
model_runner.py:400, ``init_torch_distributed`` and its ``set_device`` at :403) and without
a ``musa`` allocator entry (mem_cache/memory_pool_host.py:143-148); 0.5.11 the first with
both fixes; 0.5.19 the last calling ``TransferEngine.initialize`` on the calling thread,
0.5.20 the first through ``run_with_deadline``; 0.5.23 the one the integration is run
against.  Each wheel is downloaded once into ``.cache/wheels``.
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path

import pytest

from initorch_sglang.audit import ReleaseAudit, audit_path
from initorch_sglang.cli import cmd_audit
from tests.sglang.server import initorch_in_sglang
from tests.support.wheels import wheel

LAST_ORDER_BUG = "0.5.10.post1"
FIRST_FIXED = "0.5.11"
LAST_DIRECT_INIT = "0.5.19"
FIRST_DEADLINE_THREAD = "0.5.20"
CURRENT = "0.5.23"
RELEASES = (LAST_ORDER_BUG, FIRST_FIXED, LAST_DIRECT_INIT, FIRST_DEADLINE_THREAD, CURRENT)

_AUDITS: dict[tuple[str, str], ReleaseAudit] = {}


def release(version: str) -> Path:
    return wheel("sglang", version).path


def audited(version: str, device: str) -> ReleaseAudit:
    """One release audited for one device (each pair read once per test session)."""
    if (version, device) not in _AUDITS:
        _AUDITS[version, device] = audit_path(release(version), device)
    return _AUDITS[version, device]


def state(version: str, device: str, hazard: str) -> str:
    audit = audited(version, device)
    assert audit.error is None, audit.error
    return next(f.state for f in audit.findings if f.hazard == hazard)


def finding(version: str, device: str, hazard: str) -> tuple[str, tuple[str, ...]]:
    found = next(f for f in audited(version, device).findings if f.hazard == hazard)
    return found.detail, found.where


def run_cli(*arguments: str, capsys: pytest.CaptureFixture[str]) -> tuple[int, str]:
    device, *rest = arguments
    json_out = "--json" in rest
    sources = [Path(word) for word in rest if word != "--json"]
    code = cmd_audit(argparse.Namespace(device=device, json=json_out, sources=sources),
                     registry=None)  # type: ignore[arg-type]
    return code, capsys.readouterr().out


def test_each_release_is_read_with_its_own_layout() -> None:
    layouts = {version: audited(version, "npu").layout for version in RELEASES}
    assert layouts == {LAST_ORDER_BUG: "model_runner", FIRST_FIXED: "model_runner",
                       LAST_DIRECT_INIT: "runner_bootstrap",
                       FIRST_DEADLINE_THREAD: "runner_bootstrap", CURRENT: "bootstrap"}
    supported = {version: audited(version, "npu").supported for version in RELEASES}
    # 0.5.10.post1 has no srt/plugins: no SGLang plugin can load there.
    assert supported == {LAST_ORDER_BUG: False, FIRST_FIXED: True, LAST_DIRECT_INIT: True,
                         FIRST_DEADLINE_THREAD: True, CURRENT: True}
    assert "srt/plugins/hook_registry.py is missing" in audited(LAST_ORDER_BUG,
                                                                "npu").support_detail


def test_the_ascend_order_bug_is_there_until_0_5_10_post1_and_gone_from_0_5_11() -> None:
    assert state(LAST_ORDER_BUG, "npu", "ascend-order") == "hazard"
    detail, where = finding(LAST_ORDER_BUG, "npu", "ascend-order")
    assert "init_shared_mooncake_transfer_engine at :400" in detail
    assert where == ("srt/model_executor/model_runner.py:403",
                     "via init_torch_distributed (srt/model_executor/model_runner.py:889)",
                     "srt/model_executor/model_runner.py:400")
    for version in (FIRST_FIXED, LAST_DIRECT_INIT, FIRST_DEADLINE_THREAD, CURRENT):
        assert state(version, "npu", "ascend-order") == "clear", version
    # No per-thread device on cpu: the same order fails nothing there.
    assert state(LAST_ORDER_BUG, "cpu", "ascend-order") == "clear"


def test_the_process_group_before_the_engine_is_a_difference_not_a_hazard() -> None:
    """0.5.11 (PR 20016) runs init_torch_distributed (:481) before the engine (:484)."""
    audit = audited(FIRST_FIXED, "npu")
    assert not audit.hazards
    assert len(audit.differences) == 1 and "PR 20016's order" in audit.differences[0]
    assert audited(CURRENT, "npu").differences == ()


def test_the_musa_allocator_falls_through_to_cuda_until_0_5_10_post1() -> None:
    assert state(LAST_ORDER_BUG, "musa", "host-allocator") == "hazard"
    detail, where = finding(LAST_ORDER_BUG, "musa", "host-allocator")
    assert "no 'musa' entry (entries: npu)" in detail and "cudaHostRegister" in detail
    assert where == ("srt/mem_cache/memory_pool_host.py:143-148",)
    for version in (FIRST_FIXED, LAST_DIRECT_INIT, FIRST_DEADLINE_THREAD, CURRENT):
        assert state(version, "musa", "host-allocator") == "clear", version
    assert finding(CURRENT, "musa", "host-allocator")[1] == (
        "srt/mem_cache/pool_host/common.py:453-460",)


def test_the_allocator_default_is_right_for_cuda_and_wrong_for_cpu() -> None:
    for version in (LAST_ORDER_BUG, CURRENT):
        assert state(version, "cuda", "host-allocator") == "clear"
        assert state(version, "hip", "host-allocator") == "clear"
        # SGLANG.md: the CPU host pool fails with "Found no NVIDIA driver" (0.5.23).
        assert state(version, "cpu", "host-allocator") == "hazard"


def test_the_deadline_thread_is_there_from_0_5_20_on() -> None:
    for version in (LAST_ORDER_BUG, FIRST_FIXED, LAST_DIRECT_INIT):
        assert state(version, "npu", "unbound-thread") == "clear", version
    for version in (FIRST_DEADLINE_THREAD, CURRENT):
        for device in ("npu", "cuda", "musa", "xpu"):
            assert state(version, device, "unbound-thread") == "hazard", (version, device)
        assert state(version, "cpu", "unbound-thread") == "clear"
    detail, where = finding(CURRENT, "cuda", "unbound-thread")
    assert "run_with_deadline starts, which never sets the device" in detail
    assert where == (
        "srt/distributed/device_communicators/mooncake_transfer_engine.py:211-220",
        "srt/utils/common.py:3755-3775", "srt/utils/common.py:3766")
    assert finding(LAST_DIRECT_INIT, "npu", "unbound-thread")[1] == (
        "srt/distributed/device_communicators/mooncake_transfer_engine.py:210",)


def test_exit_codes(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    # No hazard on npu in 0.5.11 (its process-group-first order is only a difference).
    assert run_cli("npu", str(release(FIRST_FIXED)), capsys=capsys)[0] == 0
    code, out = run_cli("npu", str(release(FIRST_FIXED)), str(release(CURRENT)),
                        capsys=capsys)
    assert code == 1
    rows = [line.split() for line in out.splitlines()[2:4]]
    assert rows == [["0.5.11", "model_runner", "-", "-", "-", "yes"],
                    ["0.5.23", "bootstrap", "-", "-", "HAZARD", "yes"]]
    fake = tmp_path / "sglang-0.5.99-py3-none-any.whl"
    fake.write_text("not a zip file\n")
    code, out = run_cli("npu", str(fake), str(release(FIRST_FIXED)), capsys=capsys)
    assert code == 2
    assert [line for line in out.splitlines() if "UNREADABLE" in line] == [
        f"UNREADABLE: {fake}: not a readable wheel (File is not a zip file)"]


def test_a_layout_no_call_map_knows_is_exit_2_never_clean(
        tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """A tree with SGLang's marker file but none of the functions any layout names."""
    (tmp_path / "sglang" / "srt" / "managers").mkdir(parents=True)
    (tmp_path / "sglang" / "srt" / "managers" / "scheduler.py").write_text(
        "class Scheduler:\n    def __init__(self):\n        pass\n")
    code, out = run_cli("cpu", "--json", str(tmp_path), capsys=capsys)
    assert code == 2
    result = json.loads(out)
    assert result["exit"] == 2 and result["releases"][0]["layout"] is None
    assert "no known call map fits this release's layout" in result["releases"][0]["error"]


def test_json_carries_file_and_line(capsys: pytest.CaptureFixture[str]) -> None:
    code, out = run_cli("musa", "--json", str(release(LAST_ORDER_BUG)), capsys=capsys)
    assert code == 1
    (entry,) = json.loads(out)["releases"]
    assert entry["version"] == LAST_ORDER_BUG
    hazards = {f["hazard"]: f["where"] for f in entry["findings"] if f["state"] == "hazard"}
    assert hazards == {
        "ascend-order": ["srt/model_executor/model_runner.py:403",
                         "via init_torch_distributed (srt/model_executor/model_runner.py:889)",
                         "srt/model_executor/model_runner.py:400"],
        "host-allocator": ["srt/mem_cache/memory_pool_host.py:143-148"]}


def test_the_command_is_wired_and_reads_without_importing() -> None:
    result = initorch_in_sglang("sglang", "audit", "--device", "npu", str(release(CURRENT)))
    assert result.returncode == 1, result.stderr
    assert "0.5.23: unbound-thread: TransferEngine.initialize runs on the thread " \
           "run_with_deadline starts" in result.stdout


def test_the_layout_data_names_the_deadline_helper_and_the_table_where_they_are() -> None:
    """What other modules read from a layout: the names resolve in the releases' trees."""
    from initorch.kit import resolve_target
    from initorch_sglang.drift import open_tree
    from initorch_sglang.layouts import layout_named

    for version, layout in ((FIRST_DEADLINE_THREAD, "runner_bootstrap"), (CURRENT, "bootstrap")):
        helper = layout_named(layout).deadline_helper
        assert helper == "sglang.srt.utils.common.run_with_deadline"
        assert resolve_target(open_tree(release(version)), helper) is not None
    assert resolve_target(open_tree(release(LAST_DIRECT_INIT)),
                          "sglang.srt.utils.common.run_with_deadline") is None
    assert layout_named("model_runner").deadline_helper is None
    table = layout_named("bootstrap").allocator.dotted()[0]
    assert table == "sglang.srt.mem_cache.pool_host.common.ALLOC_MEMORY_FUNCS"
    assert finding(CURRENT, "musa", "host-allocator")[1][0].startswith(
        table.removeprefix("sglang.").rsplit(".", 1)[0].replace(".", "/") + ".py:")
