"""SGLang's Mooncake environment, read as SGLang 0.5.23 reads it, as setting values.

A real SGLang deployment configures its Mooncake store through variables
(``srt/environ.py:880-888``) read by ``MooncakeStoreConfig`` (``mem_cache/storage/
mooncake_store/mooncake_store.py:104-270``): with ``SGLANG_HICACHE_MOONCAKE_CONFIG_PATH``
set, from that JSON file (``from_file``, :138-198); otherwise from ``MOONCAKE_MASTER``,
``MOONCAKE_PROTOCOL``, ``MOONCAKE_DEVICE``, ``MOONCAKE_TE_META_DATA_SERVER``,
``MOONCAKE_GLOBAL_SEGMENT_SIZE`` (plain bytes or ``<N>gb``, :80-93) and
``MOONCAKE_LOCAL_HOSTNAME`` (``load_from_env``, :199-230).  The local hostname is
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
``MOONCAKE_CLIENT`` (SGLang's standalone store client) is read as SGLang reads it
(:func:`read_master`).  Addresses are ASCII or refused, naming the character.  A
refusal here counts only when a planned step reads the setting (resolution decides:
``initorch plan -p cpu --set hicache.enabled=false`` needs no store variable).
``SGLANG_HOST_IP`` / ``HOST_IP`` are read where the address is chosen
(:mod:`initorch.steps.network`).
"""

from __future__ import annotations

import json
from collections.abc import Callable, Mapping
from typing import Any

from initorch.steps.network import ascii_address

CONFIG_PATH = "SGLANG_HICACHE_MOONCAKE_CONFIG_PATH"
MIB = 2**20
GIB = 2**30

Reader = Callable[[Mapping[str, str]], "tuple[Any, str] | None"]


def segment_bytes(value: object, where: str) -> int:
    """SGLang's ``_parse_global_segment_size`` (``mooncake_store.py:80-93``), step for
    step: an int as it is; text stripped and lower-cased, ``<N>gb`` as N GiB, else
    ``int()`` of it (which also takes ``1_000`` and non-ASCII decimal digits, as
    SGLang does).  Raises ValueError naming ``where`` for what SGLang cannot parse."""
    if isinstance(value, int):
        return value
    try:
        if isinstance(value, str):
            text = value.strip().lower()
            if text.endswith("gb"):
                number = text[:-2].strip()
                if not number:
                    raise ValueError("missing number before 'gb'")
                return int(number) * GIB
            return int(text)
        if isinstance(value, float):  # a JSON number with a fraction or an exponent
            return int(value)
        raise TypeError(type(value).__name__)  # SGLang's int(value) fails on the rest
    except (TypeError, ValueError):
        raise ValueError(f"{where}={value!r} is neither bytes nor <N>gb") from None


def segment_mib(value: object, where: str) -> int:
    """The segment SGLang reads (:func:`segment_bytes`), in whole MiB, rounded down:
    ``mooncake.store.global_segment_mb`` counts MiB, and SGLang accepts any byte count
    (``1000000000``); the store then gets at most one MiB less than SGLang's would.
    Under 1 MiB (0, a negative number) is refused: initorch's store needs a segment
    (a negative one would fail at SGLang's ``setup`` too, as a size_t)."""
    nbytes = segment_bytes(value, where)
    if nbytes < MIB:
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


def _address(value: Any, where: str) -> str:
    return ascii_address(str(value), where)


STANDALONE_VARIABLE = "MOONCAKE_STANDALONE_STORAGE"


def read_master(environ: Mapping[str, str]) -> tuple[Any, str] | None:
    """The master SGLang's store sets up against: ``master_server_address`` of the
    config file, else ``MOONCAKE_MASTER``.

    ``MOONCAKE_CLIENT`` (the file's ``client_server_address``) is the address of a
    standalone ``mooncake_client`` process; SGLang uses it only with
    ``MOONCAKE_STANDALONE_STORAGE`` (``standalone_storage``), where its store calls
    ``setup_dummy(size, buffer, client_server_address)`` and names no master
    (``mooncake_store.py:498-510``).  So: a master beside a client is the master, as
    in SGLang; a client without standalone storage and without a master is refused,
    since SGLang would call ``setup`` with no master (``master_server_address`` is
    ``MOONCAKE_MASTER``'s default, None: :208-227, setup :567-580); and standalone
    storage is refused because initorch's ``init_mooncake_store`` has no
    ``setup_dummy`` path (the SGLang integration, whose store is SGLang's, passes the
    address itself).  A config file with neither address SGLang refuses (:152-158).
    These refusals count only where the store is planned."""
    found = config_file(environ)
    if found is not None:
        config, label = found
        master, client = config.get("master_server_address"), config.get("client_server_address")
        standalone = bool(config.get("standalone_storage", False))
        where = f"{label} (master_server_address)"
        if master is None and client is None:
            raise ValueError(f"{label}: the file has neither master_server_address nor "
                             "client_server_address, which SGLang refuses "
                             "(mooncake_store.py:152-158)")
    else:
        master, client = environ.get("MOONCAKE_MASTER"), environ.get("MOONCAKE_CLIENT")
        standalone = env_bool(environ.get(STANDALONE_VARIABLE, "false"), STANDALONE_VARIABLE)
        where = "MOONCAKE_MASTER"
        if master is None and client is None:
            return None
    if standalone:
        raise ValueError(f"{'standalone_storage' if found else STANDALONE_VARIABLE} asks "
                         f"for SGLang's standalone store client (setup_dummy against "
                         f"{client!r}, mooncake_store.py:498-510), which initorch's "
                         "init_mooncake_store does not run")
    if master is None:
        raise ValueError("MOONCAKE_CLIENT is set but no master: without standalone storage "
                         "SGLang's store calls setup with master None "
                         "(mooncake_store.py:208-227, 567-580) and fails; set "
                         f"MOONCAKE_MASTER, or {STANDALONE_VARIABLE}=true")
    return _address(master, where), where


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
            return _address(environ[variable], variable), variable
    found = config_file(environ)
    if found is not None and found[0].get("local_hostname"):
        where = f"{found[1]} (local_hostname)"
        return _address(found[0]["local_hostname"], where), where
    return None


def read_reuse_engine(environ: Mapping[str, str]) -> tuple[Any, str] | None:
    variable = "SGLANG_HICACHE_MOONCAKE_REUSE_TE"
    if variable not in environ:
        return None
    return env_bool(environ[variable], variable), variable


READ_METADATA_SERVER = store_field("MOONCAKE_TE_META_DATA_SERVER", "metadata_server",
                                   _address)
READ_DEVICE = store_field("MOONCAKE_DEVICE", "device_name")
READ_GLOBAL_SEGMENT = store_field("MOONCAKE_GLOBAL_SEGMENT_SIZE", "global_segment_size",
                                  segment_mib)
