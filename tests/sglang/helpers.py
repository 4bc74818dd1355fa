"""Plans of the ``sglang`` overlay for unit tests, without SGLang installed."""

from __future__ import annotations

from typing import Any

from initorch import Plan, Registry, load_plan


def sglang_registry() -> Registry:
    """The installed plugins plus the ``sglang`` plugin of ``integrations/sglang``."""
    from initorch_sglang.registration import register

    registry = Registry.with_plugins()
    if "sglang_load_model" not in registry.steps:  # not installed as a plugin here
        register(registry)
    return registry


def sglang_plan(*overlays: str, device: str = "cpu", **settings: Any) -> Plan:
    values = {"parallel.tp_size": 2, "memory.balance_check": True,
              "mooncake.master": "127.0.0.1:1"} | settings
    return load_plan(["sglang", *overlays], device=device, settings=values,
                     registry=sglang_registry())
