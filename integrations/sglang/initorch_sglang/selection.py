"""From an SGLang launch to an initorch selection: profiles, device and settings.

One mapping serves the three modes and the pre-flight check, so that what
``initorch sglang check`` prints is the plan verify mode checks and drive mode runs.
Only the launch arguments that decide the start-up order and its resources are
mapped; everything else stays SGLang's.
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from initorch_sglang.options import Options

if TYPE_CHECKING:
    from initorch import Plan, Registry

__all__ = ["DRIVE_OVERLAY", "OVERLAYS", "Selection", "selection_for"]

OVERLAYS = ("sglang",)
"""Layered over the device profile: SGLang's order (it extends the built-in server overlay)."""
DRIVE_OVERLAY = "sglang-drive"
"""Drive mode's overlay: leaves out what SGLang builds itself after the parallel runtime."""


@dataclass(frozen=True, slots=True)
class Selection:
    """The initorch selection for one SGLang launch."""

    profiles: tuple[str, ...]
    device: str | None
    settings: tuple[tuple[str, Any], ...]

    def with_overlay(self, overlay: str) -> Selection:
        return Selection((*self.profiles, overlay), self.device, self.settings)

    def plan(self, registry: Registry | None = None) -> Plan:
        """The resolved plan (``initorch.load_plan``)."""
        from initorch import load_plan

        return load_plan(list(self.profiles), device=self.device, settings=dict(self.settings),
                         registry=registry)

    def describe(self) -> str:
        """The equivalent ``initorch plan`` command line, for people."""
        parts = ["initorch plan"]
        if self.device is not None:
            parts.append(f"--device {self.device}")
        parts += [f"-p {name}" for name in self.profiles]
        parts += [f"--set {key}={_yaml(value)}" for key, value in self.settings]
        return " ".join(parts)


def _yaml(value: Any) -> str:
    if isinstance(value, bool):
        return "true" if value else "false"
    return str(value)


def _uses_mooncake(args: Any) -> bool:
    """SGLang builds Mooncake engines for HiCache's mooncake backend and for PD
    disaggregation over mooncake (mooncake_transfer_engine.py:315-340)."""
    hicache = bool(getattr(args, "enable_hierarchical_cache", False)) and \
        getattr(args, "hicache_storage_backend", None) == "mooncake"
    disaggregated = getattr(args, "disaggregation_mode", "null") != "null" and \
        getattr(args, "disaggregation_transfer_backend", None) == "mooncake"
    return hicache or disaggregated


def selection_for(args: Any, options: Options,
                  environ: Mapping[str, str] | None = None) -> Selection:
    """The selection for SGLang server arguments ``args`` (a ``ServerArgs``)."""
    environ = os.environ if environ is None else environ
    settings: dict[str, Any] = {
        "parallel.tp_size": int(args.tp_size),
        "parallel.pp_size": int(getattr(args, "pp_size", 1) or 1),
        # SGLang checks the balance only when tp > 1 (distributed/bootstrap.py:214).
        "memory.balance_check": int(args.tp_size) > 1,
    }
    hicache = bool(getattr(args, "enable_hierarchical_cache", False))
    settings["hicache.enabled"] = hicache
    if hicache:
        backend = getattr(args, "hicache_storage_backend", None)
        settings["hicache.storage_backend"] = "mooncake" if backend == "mooncake" else "none"
        for key, attribute in (("hicache.layout", "hicache_mem_layout"),
                               ("hicache.io_backend", "hicache_io_backend")):
            value = getattr(args, attribute, None)
            if value is not None:
                settings[key] = value
        ratio = getattr(args, "hicache_ratio", None)
        if ratio:
            settings["hicache.host_pool_ratio"] = float(ratio)
    settings["mooncake.enabled"] = _uses_mooncake(args)
    master = environ.get("MOONCAKE_MASTER")  # what SGLang's store reads (mooncake_store.py)
    if master:
        settings["mooncake.master"] = master
    for item in options.settings:
        key, _, value = item.partition("=")
        settings[key.strip()] = _typed(value.strip())
    profiles = ((options.profile,) if options.profile else ()) + OVERLAYS
    device = None if options.profile else str(args.device)
    return Selection(profiles, device, tuple(settings.items()))


def _typed(text: str) -> Any:
    """A ``--set`` value typed as YAML, as initorch types them."""
    import yaml

    return yaml.safe_load(text) if text else ""
