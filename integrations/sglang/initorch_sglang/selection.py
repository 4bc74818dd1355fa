"""From an SGLang launch to an initorch selection: profiles, device and settings.

One mapping serves the three modes and the pre-flight check, so that what
``initorch sglang check`` prints is the plan verify mode checks and drive mode runs.
Only the launch arguments that decide the start-up order and its resources are
mapped; everything else stays SGLang's.
"""

from __future__ import annotations

import os
from collections.abc import Iterator, Mapping
from contextlib import contextmanager, suppress
from typing import TYPE_CHECKING, Any

from initorch.kit import record
from initorch_sglang.options import Options

if TYPE_CHECKING:
    from initorch import Plan, Registry

__all__ = ["DRIVE_OVERLAY", "ELASTIC_EP_OVERLAY", "OVERLAYS", "Selection", "selection_for",
           "validate_launch_settings"]

OVERLAYS = ("sglang",)
"""Layered over the device profile: SGLang's order (it extends the built-in server overlay)."""
DRIVE_OVERLAY = "sglang-drive"
"""Drive mode's overlay: leaves out what SGLang builds itself after the parallel runtime."""
ELASTIC_EP_OVERLAY = "mooncake-ep"
"""The built-in overlay for ``--elastic-ep-backend mooncake``: SGLang builds the shared
engine and hands it to ``mooncake.pg.set_transfer_engine`` before the process group
(``device_communicators/mooncake_transfer_engine.py:315-363``, 0.5.23)."""


@record
class Selection:
    """The initorch selection for one SGLang launch."""

    profiles: tuple[str, ...]
    device: str | None
    settings: tuple[tuple[str, Any], ...]

    def with_overlay(self, overlay: str) -> Selection:
        return Selection((*self.profiles, overlay), self.device, self.settings)

    def plan(self, registry: Registry | None = None) -> Plan:
        """The resolved plan (``initorch.load_plan``), previewed without the outer
        launcher's ``WORLD_SIZE``: SGLang spawns its ranks itself (``entrypoints/
        engine.py:1995``) and counts them as dp x tp x pp (``distributed/bootstrap.py:
        75-87``), never reading ``WORLD_SIZE``, which a Kubeflow or torchrun pod
        exports as its own count."""
        from initorch import load_plan

        with _hidden(LAUNCHER_WORLD):
            return load_plan(list(self.profiles), device=self.device,
                             settings=dict(self.settings), registry=registry)

    def describe(self) -> str:
        """The equivalent ``initorch plan`` command line, for people."""
        parts = ["initorch plan"]
        if self.device is not None:
            parts.append(f"--device {self.device}")
        parts += [f"-p {name}" for name in self.profiles]
        parts += [f"--set {key}={_yaml(value)}" for key, value in self.settings]
        return " ".join(parts)


LAUNCHER_WORLD = ("WORLD_SIZE",)
"""Variables an outer launcher sets that SGLang does not read (hidden while planning)."""


@contextmanager
def _hidden(names: tuple[str, ...]) -> Iterator[None]:
    """``names`` removed from ``os.environ`` for the block, and put back after it."""
    saved = {name: os.environ.pop(name) for name in names if name in os.environ}
    try:
        yield
    finally:
        os.environ.update(saved)


def _yaml(value: Any) -> str:
    if isinstance(value, bool):
        return "true" if value else "false"
    return str(value)


def _uses_mooncake(args: Any) -> bool:
    """Whether SGLang builds the shared Mooncake engine: PD disaggregation over mooncake,
    HiCache's mooncake backend, encoder disaggregation over mooncake, and elastic EP
    (``maybe_init_shared_mooncake_transfer_engine``, mooncake_transfer_engine.py:315-340).
    HiCache's store builds an engine of its own when the shared one is off
    (``SGLANG_HICACHE_MOONCAKE_REUSE_TE``, the ``mooncake.store.reuse_engine`` setting)."""
    hicache = bool(getattr(args, "enable_hierarchical_cache", False)) and \
        getattr(args, "hicache_storage_backend", None) == "mooncake"
    disaggregated = getattr(args, "disaggregation_mode", "null") != "null" and \
        getattr(args, "disaggregation_transfer_backend", None) == "mooncake"
    encoder = (bool(getattr(args, "encoder_only", False))
               or bool(getattr(args, "language_only", False))) and \
        getattr(args, "encoder_transfer_backend", None) == "mooncake"
    elastic = getattr(args, "elastic_ep_backend", None)
    backup = bool(getattr(args, "enable_elastic_expert_backup", False)) and elastic is not None
    return hicache or disaggregated or encoder or backup or elastic == "mooncake"


def torch_hip_version() -> str | None:
    """``torch.version.hip`` of the installed torch: SGLang's device on ROCm is ``cuda``
    (a HIP build of torch exposes HIP as ``torch.cuda``), so the profile comes from the
    build.  Called only for ``--device cuda``, inside SGLang's process, which has
    imported torch already; initorch's own dry run never calls it."""
    import torch

    hip: str | None = getattr(torch.version, "hip", None)
    return hip


def device_for(args: Any) -> str:
    """initorch's device for SGLang's ``--device``: ``rocm`` for ``cuda`` on a HIP torch."""
    device = str(args.device)
    if device == "cuda" and torch_hip_version():
        return "rocm"
    return device


def _store_settings(args: Any, environ: Mapping[str, str]) -> dict[str, Any]:
    """The store's settings as SGLang's store would read them
    (:func:`~initorch_sglang.store_config.store_source`).  ``mooncake.master`` is the
    address SGLang's store connects to (the standalone client with standalone storage).
    From the extra-config flag, every store field is passed, SGLang's defaults for the
    ones it omits (the variables are not read then); from the file or the variables,
    initorch's own readers read the rest (``initorch.steps.mooncake_env``)."""
    from initorch_sglang.store_config import EXTRA_CONFIG_FLAG, store_source

    source = store_source(args, environ)
    settings: dict[str, Any] = {}
    if source.problem is None and source.address is not None:
        settings["mooncake.master"] = source.address
    if source.origin != EXTRA_CONFIG_FLAG or source.fields is None:
        return settings
    from initorch.steps import segment_mib

    fields = source.fields
    settings["mooncake.store.metadata_server"] = str(fields.get("metadata_server",
                                                                "P2PHANDSHAKE"))
    settings["mooncake.store.device_name"] = str(fields.get("device_name", ""))
    with suppress(ValueError):  # SGLang would refuse it: pre-flight's segment check says so
        settings["mooncake.store.global_segment_mb"] = segment_mib(
            fields.get("global_segment_size", "4gb"), f"{EXTRA_CONFIG_FLAG} global_segment_size")
    hostname = fields.get("local_hostname")
    if hostname and not environ.get("MOONCAKE_LOCAL_HOSTNAME") \
            and not environ.get("LOCAL_HOSTNAME"):  # the variables win (mooncake_store.py:120-136)
        settings["mooncake.store.hostname"] = str(hostname)
    return settings


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
        if backend == "mooncake":
            settings.update(_store_settings(args, environ))
    settings["mooncake.enabled"] = _uses_mooncake(args)
    for item in options.settings:
        key, _, value = item.partition("=")
        settings[key.strip()] = _typed(value.strip())
    profiles = ((options.profile,) if options.profile else ()) + OVERLAYS
    if getattr(args, "elastic_ep_backend", None) == "mooncake":
        profiles += (ELASTIC_EP_OVERLAY,)
    device = None if options.profile else device_for(args)
    return Selection(profiles, device, tuple(settings.items()))


def validate_launch_settings(options: Options, registry: Registry | None = None) -> None:
    """Resolve the ``INITORCH_SGLANG_SET`` settings the integration would pass, in the
    launcher: each key must be a declared setting and each value (typed as YAML, as
    :func:`selection_for` types it) must pass its declaration's check.
    ``hicache.host_pool_mb=lots`` would otherwise pass the launcher and fail every rank
    about 30 s later.  Raises :class:`~initorch_sglang.options.OptionsError` with one
    line naming every problem."""
    import difflib

    from initorch import Registry
    from initorch_sglang.options import SET_ENV, OptionsError

    if not options.settings:
        return
    if registry is None:
        registry = Registry.with_plugins()
    catalog = registry.settings
    problems: list[str] = []
    for item in options.settings:
        key, sep, text = (part.strip() for part in item.partition("="))
        if not sep or not key:
            problems.append(f"{item!r} is not KEY=VALUE")
            continue
        spec = catalog.get(key)
        if key in ("device.type", "device.aliases"):  # initorch's CORE_KEYS: profiles only
            problems.append(f"{key}: only a profile sets it (INITORCH_SGLANG_PROFILE)")
            continue
        if spec is None:
            close = difflib.get_close_matches(key, [known.key for known in catalog], n=1)
            problems.append(f"{key}: no such setting"
                            + (f" (did you mean {close[0]}?)" if close else ""))
            continue
        try:
            value = _typed(text)
        except Exception as error:  # yaml's own errors
            problems.append(f"{key}: cannot read {text!r} ({type(error).__name__})")
            continue
        problem = spec.check(value)
        if problem is not None:
            problems.append(f"{key}: {problem}")
    if problems:
        raise OptionsError(f"initorch-sglang: {SET_ENV}: "
                           + "; ".join(" ".join(text.split()) for text in problems))


def _typed(text: str) -> Any:
    """A ``--set`` value typed as YAML, as initorch types them."""
    import yaml

    return yaml.safe_load(text) if text else ""
