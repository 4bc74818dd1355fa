"""SGLang's Mooncake environment, read as SGLang 0.5.23 reads it, as setting values.

A real SGLang deployment configures its Mooncake store through variables
(``srt/environ.py:880-888``) read by ``MooncakeStoreConfig`` (``mem_cache/storage/
mooncake_store/mooncake_store.py:104-270``): with ``SGLANG_HICACHE_MOONCAKE_CONFIG_PATH``
set, from that JSON file (``from_file``, :138-185); otherwise from ``MOONCAKE_MASTER``,
``MOONCAKE_PROTOCOL``, ``MOONCAKE_DEVICE``, ``MOONCAKE_TE_META_DATA_SERVER``,
``MOONCAKE_GLOBAL_SEGMENT_SIZE`` (plain bytes or ``<N>gb``, :80-93) and
``MOONCAKE_LOCAL_HOSTNAME`` (``load_from_env``, :187-215).  The local hostname is
``MOONCAKE_LOCAL_HOSTNAME``, then ``LOCAL_HOSTNAME``, then the file's
(``_resolve_local_hostname``, :120-136).  ``SGLANG_HICACHE_MOONCAKE_REUSE_TE``
(``environ.py:881``, read as ``EnvBool``, :143-150) decides whether the shared engine
exists for HiCache.

Each reader below is a setting's ``from_environment``: a variable that is set beats
the profiles and loses to ``--set``, and ``initorch settings`` names it as the
value's origin (``$MOONCAKE_PROTOCOL``).  Two deliberate differences: a variable that
is not set leaves the profile's value (SGLang takes its own default: ``rdma``,
``localhost``, ``4gb``); and initorch has one protocol for the engine and the store
(SGLang's engine also reads ``MOONCAKE_PROTOCOL``, ``mooncake_transfer_engine.py:209``,
except with ``ENABLE_ASCEND_TRANSFER_WITH_MOONCAKE=1``, where it is ``ascend``).
``MOONCAKE_CLIENT`` (SGLang's standalone store client) is not supported and is
refused rather than ignored.  ``SGLANG_HOST_IP`` / ``HOST_IP`` are
read where the address is chosen (:mod:`initorch.steps.network`).
"""

from __future__ import annotations

import json
from collections.abc import Callable, Mapping
from typing import Any

CONFIG_PATH = "SGLANG_HICACHE_MOONCAKE_CONFIG_PATH"
MIB = 2**20
GIB = 2**30

Reader = Callable[[Mapping[str, str]], "tuple[Any, str] | None"]


def segment_mib(value: object, where: str) -> int:
    """SGLang's ``_parse_global_segment_size`` (bytes, or ``<N>gb``), in whole MiB."""
    text = str(value).strip().lower()
    try:
        nbytes = int(text[:-2].strip()) * GIB if text.endswith("gb") else int(text)
    except ValueError:
        raise ValueError(f"{where}={value!r} is neither bytes nor <N>gb") from None
    if nbytes <= 0 or nbytes % MIB:
        raise ValueError(f"{where}={value!r} is not a whole, positive number of MiB "
                         "(mooncake.store.global_segment_mb)")
    return nbytes // MIB


def env_bool(text: str, where: str) -> bool:
    """SGLang's ``EnvBool.parse``."""
    value = text.lower()
    if value in ("true", "1", "yes", "y"):
        return True
    if value in ("false", "0", "no", "n"):
        return False
    raise ValueError(f'{where}="{text}" is not a valid boolean value')


def config_file(environ: Mapping[str, str]) -> tuple[dict[str, Any], str] | None:
    """SGLang's JSON store config and its label, when ``CONFIG_PATH`` names one."""
    path = environ.get(CONFIG_PATH)
    if path is None:
        return None
    try:
        with open(path, encoding="utf-8") as handle:
            config = json.load(handle)
    except (OSError, ValueError) as exc:
        raise ValueError(f"{CONFIG_PATH}={path}: cannot read the config: {exc}") from None
    if not isinstance(config, dict):
        raise ValueError(f"{CONFIG_PATH}={path}: the config is not a JSON object")
    return config, f"{CONFIG_PATH}={path}"


def store_field(variable: str, json_key: str,
                parse: Callable[[Any, str], Any] = lambda value, _: value) -> Reader:
    """A store setting SGLang takes from ``json_key`` of the config file when there is
    one, else from ``variable``."""
    def read(environ: Mapping[str, str]) -> tuple[Any, str] | None:
        found = config_file(environ)
        if found is not None:
            config, label = found
            if json_key not in config:
                return None
            where = f"{label} ({json_key})"
            return parse(config[json_key], where), where
        if variable not in environ:
            return None
        return parse(environ[variable], variable), variable
    return read


def read_master(environ: Mapping[str, str]) -> tuple[Any, str] | None:
    """``MOONCAKE_MASTER`` (or the file's ``master_server_address``); SGLang's
    standalone ``MOONCAKE_CLIENT`` mode is refused."""
    if "MOONCAKE_CLIENT" in environ and "MOONCAKE_MASTER" not in environ:
        raise ValueError("MOONCAKE_CLIENT (SGLang's standalone store client) is set, which "
                         "initorch does not support; set MOONCAKE_MASTER instead")
    return store_field("MOONCAKE_MASTER", "master_server_address")(environ)


def read_protocol(environ: Mapping[str, str]) -> tuple[Any, str] | None:
    """The file's ``protocol``, else ``MOONCAKE_PROTOCOL`` (SGLang's ``from_file``
    falls back to the variable: ``config.get("protocol", envs.MOONCAKE_PROTOCOL.get())``)."""
    found = store_field("MOONCAKE_PROTOCOL", "protocol")(environ)
    if found is None and "MOONCAKE_PROTOCOL" in environ:
        return environ["MOONCAKE_PROTOCOL"], "MOONCAKE_PROTOCOL"
    return found


def read_local_hostname(environ: Mapping[str, str]) -> tuple[Any, str] | None:
    """``MOONCAKE_LOCAL_HOSTNAME``, then ``LOCAL_HOSTNAME``, then the file's."""
    for variable in ("MOONCAKE_LOCAL_HOSTNAME", "LOCAL_HOSTNAME"):
        if environ.get(variable):
            return environ[variable], variable
    found = config_file(environ)
    if found is not None and found[0].get("local_hostname"):
        return found[0]["local_hostname"], f"{found[1]} (local_hostname)"
    return None


def read_reuse_engine(environ: Mapping[str, str]) -> tuple[Any, str] | None:
    variable = "SGLANG_HICACHE_MOONCAKE_REUSE_TE"
    if variable not in environ:
        return None
    return env_bool(environ[variable], variable), variable


READ_METADATA_SERVER = store_field("MOONCAKE_TE_META_DATA_SERVER", "metadata_server")
READ_DEVICE = store_field("MOONCAKE_DEVICE", "device_name")
READ_GLOBAL_SEGMENT = store_field("MOONCAKE_GLOBAL_SEGMENT_SIZE", "global_segment_size",
                                  segment_mib)
