"""From SGLang's server arguments to initorch's selection (the same in every mode)."""

from __future__ import annotations

import json
from pathlib import Path
from types import SimpleNamespace

import pytest

from initorch import InitorchError
from initorch_sglang.options import Options, OptionsError
from initorch_sglang.selection import selection_for, validate_launch_settings
from tests.sglang.helpers import sglang_registry


def server_args(**given: object) -> SimpleNamespace:
    defaults = {"tp_size": 2, "pp_size": 1, "device": "cpu", "enable_hierarchical_cache": True,
                "hicache_storage_backend": "mooncake", "hicache_mem_layout": "page_first",
                "hicache_io_backend": "kernel", "hicache_ratio": 2.0,
                "disaggregation_mode": "null"}
    return SimpleNamespace(**(defaults | given))


def test_a_hicache_launch_maps_to_the_sglang_overlay() -> None:
    selection = selection_for(server_args(), Options("verify"),
                              {"MOONCAKE_MASTER": "127.0.0.1:5"})
    assert selection.profiles == ("sglang",) and selection.device == "cpu"
    assert dict(selection.settings) == {
        "parallel.tp_size": 2, "parallel.pp_size": 1, "memory.balance_check": True,
        "hicache.enabled": True, "hicache.storage_backend": "mooncake",
        "hicache.layout": "page_first", "hicache.io_backend": "kernel",
        "hicache.host_pool_ratio": 2.0, "mooncake.enabled": True,
        "mooncake.master": "127.0.0.1:5"}
    plan = selection.plan(sglang_registry())
    assert plan.order.index("sglang_alloc_kv_pool") < plan.order.index("alloc_host_mem_pool")


def test_one_rank_without_hicache_plans_no_mooncake_and_no_balance_check() -> None:
    selection = selection_for(server_args(tp_size=1, enable_hierarchical_cache=False),
                              Options("drive", profile="cpu", settings=("cpu_binding.threads=1",)),
                              {})
    settings = dict(selection.settings)
    assert selection.profiles == ("cpu", "sglang") and selection.device is None
    assert settings["memory.balance_check"] is False and settings["mooncake.enabled"] is False
    assert settings["cpu_binding.threads"] == 1 and "mooncake.master" not in settings
    assert selection.describe().startswith("initorch plan -p cpu -p sglang --set "
                                           "parallel.tp_size=1")


# -- the device, the elastic-EP overlay ------------------------------------------------------

def test_cuda_on_a_hip_torch_selects_the_rocm_profile(monkeypatch: pytest.MonkeyPatch) -> None:
    """SGLang's device on ROCm is ``cuda``; the installed torch says which it is."""
    import initorch_sglang.selection as selection

    monkeypatch.setattr(selection, "torch_hip_version", lambda: "6.2.41133")
    chosen = selection_for(server_args(device="cuda", enable_hierarchical_cache=False),
                           Options("verify"), {})
    assert chosen.device == "rocm"
    assert chosen.plan(sglang_registry()).device.type == "rocm"
    monkeypatch.setattr(selection, "torch_hip_version", lambda: None)
    assert selection_for(server_args(device="cuda"), Options("verify"), {}).device == "cuda"


def test_elastic_ep_over_mooncake_selects_the_mooncake_ep_overlay(
        monkeypatch: pytest.MonkeyPatch) -> None:
    """``--elastic-ep-backend mooncake`` builds the shared engine and hands it to
    mooncake.pg before the process group (mooncake_transfer_engine.py:315-363)."""
    import initorch_sglang.selection as selection

    monkeypatch.setattr(selection, "torch_hip_version", lambda: None)
    chosen = selection_for(server_args(device="cuda", enable_hierarchical_cache=False,
                                       elastic_ep_backend="mooncake"), Options("verify"), {})
    assert chosen.profiles == ("sglang", "mooncake-ep")
    assert dict(chosen.settings)["mooncake.enabled"] is True
    plan = chosen.plan(sglang_registry())
    assert plan.order.index("set_mooncake_pg_engine") < plan.order.index("init_torch_distributed")
    assert selection_for(server_args(), Options("verify"), {}).profiles == ("sglang",)


# -- the store's configuration, as SGLang's _load_config reads it -----------------------------

def test_a_master_in_the_extra_config_beats_the_variables(tmp_path: Path) -> None:
    extra = json.dumps({"master_server_address": "10.0.0.7:50051",
                        "global_segment_size": "2gb"})
    chosen = dict(selection_for(
        server_args(hicache_storage_backend_extra_config=extra), Options("verify"),
        {"MOONCAKE_MASTER": "10.0.0.9:1", "MOONCAKE_GLOBAL_SEGMENT_SIZE": "lots"}).settings)
    assert chosen["mooncake.master"] == "10.0.0.7:50051"
    assert chosen["mooncake.store.global_segment_mb"] == 2048  # the variable is not read
    assert chosen["mooncake.store.metadata_server"] == "P2PHANDSHAKE"  # SGLang's default
    config = tmp_path / "store.json"
    config.write_text(json.dumps({"master_server_address": "10.0.0.8:50051"}))
    from_file = dict(selection_for(server_args(), Options("verify"), {
        "SGLANG_HICACHE_MOONCAKE_CONFIG_PATH": str(config),
        "MOONCAKE_MASTER": "10.0.0.9:1"}).settings)
    assert from_file["mooncake.master"] == "10.0.0.8:50051"
    standalone = dict(selection_for(server_args(), Options("verify"), {
        "MOONCAKE_CLIENT": "10.0.0.6:50052", "MOONCAKE_STANDALONE_STORAGE": "true"}).settings)
    assert standalone["mooncake.master"] == "10.0.0.6:50052"  # where SGLang's store connects


# -- INITORCH_SGLANG_SET, checked in the launcher ----------------------------------------------

def test_launch_settings_are_resolved_before_any_rank_starts() -> None:
    registry = sglang_registry()
    validate_launch_settings(Options("verify"), registry)  # nothing asked
    validate_launch_settings(Options("verify", settings=("hicache.host_pool_mb=128",)), registry)
    with pytest.raises(OptionsError) as caught:
        validate_launch_settings(Options("verify", settings=("hicache.host_pool_mb=lots",)),
                                 registry)
    said = str(caught.value)
    assert said.startswith("initorch-sglang: INITORCH_SGLANG_SET: ") and "\n" not in said
    assert "hicache.host_pool_mb" in said and "'lots'" in said
    with pytest.raises(OptionsError, match=r"no such setting \(did you mean "
                                           r"hicache\.host_pool_mb\?\); device\.type: only"):
        validate_launch_settings(Options("verify", settings=("hicache.host_pol_mb=1",
                                                             "device.type=npu")), registry)


def test_a_look_alike_letter_in_a_set_address_is_refused_at_plan_time() -> None:
    look_alike = "\u04202PHANDSHAKE"  # a Cyrillic ER for the P
    chosen = selection_for(server_args(), Options(
        "verify", settings=(f"mooncake.store.metadata_server={look_alike}",)),
        {"MOONCAKE_MASTER": "127.0.0.1:5"})
    with pytest.raises(InitorchError) as caught:
        chosen.plan(sglang_registry())
    assert "U+0420 CYRILLIC CAPITAL LETTER ER" in str(caught.value)
    assert "at position 1" in str(caught.value)


def test_the_plan_ignores_the_outer_launchers_world_size(monkeypatch: pytest.MonkeyPatch) -> None:
    """A Kubeflow pod exports WORLD_SIZE as the pod count; SGLang never reads it."""
    monkeypatch.setenv("WORLD_SIZE", "4")
    chosen = selection_for(server_args(enable_hierarchical_cache=False), Options("verify"), {})
    assert chosen.plan(sglang_registry()).settings["parallel.tp_size"].value == 2
    import os

    assert os.environ["WORLD_SIZE"] == "4"  # put back
