"""From SGLang's server arguments to initorch's selection (the same in every mode)."""

from __future__ import annotations

from types import SimpleNamespace

from initorch_sglang.options import Options
from initorch_sglang.selection import selection_for
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
