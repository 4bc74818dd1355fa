"""Where SGLang 0.5.23's Mooncake Store takes its configuration from, as it decides.

``MooncakeBaseStore._load_config`` (``mem_cache/storage/mooncake_store/
mooncake_store.py:324-344``) takes, in this order:

1. ``--hicache-storage-backend-extra-config`` (JSON, or ``@file`` with ``.json``,
   ``.toml``, ``.yaml``: ``HybridCacheController.parse_storage_backend_extra_config``,
   ``mem_cache/hybrid_cache/hybrid_cache_controller.py:378-402``) when it names a
   ``master_server_address`` or a ``client_server_address`` (``load_from_extra_config``,
   :231-282);
2. else the JSON file of ``SGLANG_HICACHE_MOONCAKE_CONFIG_PATH`` (``from_file``,
   :138-198), which must name one of the two (:152-158);
3. else the variables (``load_from_env``, :199-230): ``MOONCAKE_MASTER`` or
   ``MOONCAKE_CLIENT`` must be set (:208-211).

The first two take every field they omit from SGLang's defaults (not the
variables), except ``protocol``, which falls back to ``MOONCAKE_PROTOCOL``.  With
``standalone_storage`` the store calls ``setup_dummy`` against
``client_server_address`` (a standalone ``mooncake_client`` process, :498-510);
otherwise ``setup`` against ``master_server_address`` (:567-580), which is ``None``
when only a client was given, and then fails.  This module reads the same sources
without importing SGLang (the selection runs in every rank), and
``tests/sglang/test_preflight_hostile.py`` checks it against SGLang's own
``_load_config``.
"""

from __future__ import annotations

import importlib
import json
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from initorch.kit import record

__all__ = ["CONFIG_PATH_ENV", "StoreSource", "store_source"]

CONFIG_PATH_ENV = "SGLANG_HICACHE_MOONCAKE_CONFIG_PATH"
EXTRA_CONFIG_FLAG = "--hicache-storage-backend-extra-config"
_TRUE = ("true", "1", "yes", "y")  # SGLang's EnvBool (environ.py)
_FALSE = ("false", "0", "no", "n")


@record
class StoreSource:
    """What SGLang's store would connect to, and from where it read it.

    ``origin`` names the source (the flag, ``SGLANG_HICACHE_MOONCAKE_CONFIG_PATH=...``
    or ``environment``); ``address`` is the master, or with ``standalone`` the
    standalone client; ``fields`` are the store fields that source gave (to pass to
    the plan when the variables are not the source); ``problem`` is SGLang's refusal,
    with its line, when the store could not start."""

    origin: str
    master: str | None = None
    client: str | None = None
    standalone: bool = False
    fields: Mapping[str, Any] | None = None
    problem: str | None = None

    @property
    def address(self) -> str | None:
        return self.client if self.standalone else self.master

    @property
    def address_name(self) -> str:
        """How the user wrote the address: a variable, or a key of the source."""
        if self.origin == "environment":
            return "MOONCAKE_CLIENT" if self.standalone else "MOONCAKE_MASTER"
        key = "client_server_address" if self.standalone else "master_server_address"
        return f"{self.origin} ({key})"


def store_source(args: Any, environ: Mapping[str, str]) -> StoreSource:
    """SGLang's choice for server arguments ``args`` and ``environ``."""
    flag = getattr(args, "hicache_storage_backend_extra_config", None)
    if flag:
        try:
            extra = _extra_config(str(flag))
        except (OSError, ValueError) as error:
            return StoreSource(EXTRA_CONFIG_FLAG, problem=(
                f"{EXTRA_CONFIG_FLAG}: SGLang cannot read it ({error}); it would fail when "
                "HiCache builds its storage (hybrid_cache_controller.py:378-402)"))
        if extra.get("master_server_address") is not None or \
                extra.get("client_server_address") is not None:
            return _from_mapping(extra, EXTRA_CONFIG_FLAG)
    path = environ.get(CONFIG_PATH_ENV)
    if path is not None:
        origin = f"{CONFIG_PATH_ENV}={path}"
        try:
            config = json.loads(Path(path).read_text(encoding="utf-8"))
        except (OSError, ValueError) as error:
            return StoreSource(origin, problem=(
                f"{origin}: SGLang cannot load it ({error}; mooncake_store.py:145-150)"))
        if not isinstance(config, dict) or ("master_server_address" not in config
                                            and "client_server_address" not in config):
            return StoreSource(origin, problem=(
                f"{origin}: the file names neither master_server_address nor "
                "client_server_address, which SGLang refuses (mooncake_store.py:152-158)"))
        return _from_mapping(config, origin)
    master, client = environ.get("MOONCAKE_MASTER"), environ.get("MOONCAKE_CLIENT")
    standalone = environ.get("MOONCAKE_STANDALONE_STORAGE", "false").strip().lower()
    if standalone not in _TRUE + _FALSE:
        return StoreSource("environment", master, client, problem=(
            f'MOONCAKE_STANDALONE_STORAGE="{standalone}" is not a valid boolean value '
            "(SGLang's EnvBool)"))
    source = StoreSource("environment", master, client, standalone in _TRUE)
    if master is None and client is None:
        return _with_problem(source, "MOONCAKE_MASTER is not set: SGLang's Mooncake Store "
                             "needs a master (HOST:PORT of mooncake_master's RPC port), or "
                             "MOONCAKE_CLIENT (mooncake_store.py:208-211)")
    return _checked(source)


def _extra_config(flag: str) -> dict[str, Any]:
    """The flag's value as SGLang parses it (JSON, or ``@path`` by its suffix)."""
    if not flag.startswith("@"):
        loaded = json.loads(flag)
    else:
        path = Path(flag[1:])
        suffix = path.suffix.lower()
        if suffix == ".json":
            loaded = json.loads(path.read_text(encoding="utf-8"))
        elif suffix == ".toml":  # tomllib: Python 3.11+, as SGLang imports it
            loaded = importlib.import_module("tomllib").loads(path.read_text(encoding="utf-8"))
        elif suffix in (".yaml", ".yml"):
            import yaml

            loaded = yaml.safe_load(path.read_text(encoding="utf-8"))
        else:
            raise ValueError(f"Unsupported config file {path} (config format: {suffix})")
    if not isinstance(loaded, dict):
        raise ValueError("it is not a mapping")
    return loaded


def _from_mapping(config: Mapping[str, Any], origin: str) -> StoreSource:
    fields = {key: config[key] for key in ("metadata_server", "global_segment_size",
                                           "protocol", "device_name", "local_hostname")
              if key in config}
    master, client = config.get("master_server_address"), config.get("client_server_address")
    return _checked(StoreSource(origin, None if master is None else str(master),
                                None if client is None else str(client),
                                bool(config.get("standalone_storage", False)), fields))


def _checked(source: StoreSource) -> StoreSource:
    if source.standalone and source.client is None:
        return _with_problem(source, "standalone storage without a client address: SGLang "
                             "calls setup_dummy with None (mooncake_store.py:498-510)")
    if not source.standalone and source.master is None:
        return _with_problem(source, f"{source.origin} gives a client address but no master "
                             "and no standalone storage: SGLang's store calls setup with "
                             "master None (mooncake_store.py:567-580) and fails; give a "
                             "master, or standalone storage")
    return source


def _with_problem(source: StoreSource, problem: str) -> StoreSource:
    return StoreSource(source.origin, source.master, source.client, source.standalone,
                       source.fields, problem)
