"""``init_shared_mooncake_transfer_engine``: one Mooncake engine per rank.

The engine is device_bound: on Ascend its transport calls ``aclrtGetDevice``
on the calling thread, which fails unless ``set_device`` ran on that thread.
The executor guarantees that; this module builds the engine as SGLang 0.5.23
does (``MooncakeTransferEngine.initialize``: P2P handshake, the host's own
address, the Ascend hostname form of the installed build), checks which
transport Mooncake really installed (:mod:`initorch.steps.transports`), turns
non-zero return codes into errors carrying Mooncake's own log lines, and hands
the engine to later steps (the store, mooncake.pg) as :class:`SharedTransferEngine`.
"""

from __future__ import annotations

import gc
import os
import weakref
from collections.abc import Mapping
from dataclasses import field
from pathlib import Path
from typing import Any

from initorch.plugin import (
    NativeLog,
    PreviewContext,
    StepContext,
    StepError,
    capture_native_stderr,
    non_ascii_problem,
    record,
    setting,
    step,
)
from initorch.steps.engine_hostname import EngineHostname, engine_hostname
from initorch.steps.listeners import listeners, warn_if_exposed
from initorch.steps.mooncake_build import (
    ASCEND_BUILDS,
    WHEEL_CHOICE,
    installed_build,
    metadata_scheme,
)
from initorch.steps.network import host_port
from initorch.steps.rendezvous import MASTER_ADDR
from initorch.steps.set_device import VISIBLE_DEVICES_ENV
from initorch.steps.shared_settings import MOONCAKE_DEVICE_NAME, MOONCAKE_ENABLED, MOONCAKE_PROTOCOL
from initorch.steps.transports import (
    installed_transports,
    note_expected_errors,
    transport_mismatch,
)

MOONCAKE_HOSTNAME = setting(
    "mooncake.hostname", str, default="auto", pattern=r"\S+",
    description="the engine's local host; auto = the local address that reaches the "
                "rendezvous (SGLANG_HOST_IP / HOST_IP win, as in SGLang's get_local_ip_auto)")
# The metadata servers Mooncake can reach: MetadataStoragePlugin::Create
# (mooncake-transfer-engine/src/transfer_metadata_plugin.cpp, 0.3.13) knows etcd
# (also a bare host:port), redis, http and https, and LOG(FATAL)s -- abort(), the
# whole process -- on any other scheme ("Unable to find metadata storage plugin").
# Refused at plan time instead; so is a scheme the installed build was compiled without
# (check_metadata_plugin: no published wheel has redis).
METADATA_SCHEMES = ("etcd", "redis", "http", "https")
METADATA_SERVER = rf"P2PHANDSHAKE|(?:(?:{'|'.join(METADATA_SCHEMES)})://)?(?!\S*://)\S+"
METADATA_SERVER_HELP = ("host:port (etcd) or an etcd://, redis://, http:// or https:// URL "
                        "(Mooncake aborts the process on any other scheme: 'Unable to find "
                        "metadata storage plugin')")
MOONCAKE_METADATA_SERVER = setting(
    "mooncake.metadata_server", str, default="P2PHANDSHAKE", pattern=METADATA_SERVER,
    pattern_help=f"P2PHANDSHAKE, {METADATA_SERVER_HELP}",
    description="the engine's metadata server: P2PHANDSHAKE (SGLang's), or an etcd, redis, "
                "http or https URL (another scheme would abort the process in Mooncake)")
ASCEND_BUILD = setting(
    "mooncake.ascend_build", str, default="auto", choices=("auto", *ASCEND_BUILDS),
    description="npu: which Ascend build of Mooncake to address; auto reads the installed "
                "engine (ascend_direct: plain host; hccl: host:port:npu_<physical id>)")
TRANSPORT_MISMATCH = setting(
    "mooncake.transport_mismatch", str, default="fail", choices=("fail", "warn"),
    description="when Mooncake installs another transport than device.mooncake_protocol")


# Mooncake picks its RPC (handshake) port at random from [MC_MIN_RPC_PORT, MC_MAX_RPC_PORT]
# (default 15000-17000) and, when none can be bound, logs this and returns -1
# (transfer_engine_impl.cpp:144, mooncake-transfer-engine-non-cuda 0.3.13.post1, observed
# here with every port of the range held by listeners).
NO_FREE_RPC_PORT = "No valid port found for local TCP service"
DEFAULT_RPC_PORTS = ("15000", "17000")


def no_free_rpc_port(native_log: str, environ: Mapping[str, str]) -> StepError | None:
    """The error for an engine that found no free RPC port, if that is why it failed:
    it names the range and keeps Mooncake's own line (the generic "initialize returned
    -1" would send the user looking for RDMA devices)."""
    said = [line for line in native_log.splitlines() if NO_FREE_RPC_PORT in line]
    if not said:
        return None
    low = environ.get("MC_MIN_RPC_PORT", DEFAULT_RPC_PORTS[0])
    high = environ.get("MC_MAX_RPC_PORT", DEFAULT_RPC_PORTS[1])
    return StepError(
        f"the transfer engine found no free port for its RPC service: every port from "
        f"MC_MIN_RPC_PORT={low} to MC_MAX_RPC_PORT={high} is taken (Mooncake: "
        f"{said[0].strip()})",
        native_log=native_log,
        hint="free a port in that range (ss -ltnp), or widen it with MC_MIN_RPC_PORT / "
             "MC_MAX_RPC_PORT (a range Mooncake finds invalid is replaced by 15000-17000, "
             "with an 'Invalid port range' warning)")


@record(frozen=False)
class SharedTransferEngine:
    """The rank's transfer engine plus how peers reach it."""

    engine: Any
    hostname: EngineHostname
    protocol: str
    ib_device: str | None
    metadata_server: str
    rpc_port: int = 0
    transports: list[str] = field(default_factory=list)

    @property
    def device_name(self) -> str:
        """What ``initialize`` gets for the device: SGLang passes ``""`` for no device."""
        return self.ib_device or ""

    @property
    def session_id(self) -> str:
        """What a peer passes to ``transfer_sync_*`` (IPv6 as ``[addr]:port``)."""
        return host_port(self.hostname.host, self.rpc_port)

    def call(self, method: str, *args: Any) -> NativeLog:
        """Call an engine method returning a status code; non-zero raises :class:`StepError`.

        Returns what Mooncake logged meanwhile."""
        with capture_native_stderr() as native:
            rc = int(getattr(self.engine, method)(*args))
        if rc != 0:
            shown = ", ".join(hex(a) if isinstance(a, int) and a > 4096 else repr(a) for a in args)
            raise StepError(f"TransferEngine.{method}({shown}) returned {rc}",
                            native_log=native.error_lines())
        return native

    def close(self) -> None:
        """Release the engine now: its destructor closes sockets and segments.  Dropping
        the last reference runs it at once; only an engine caught in a reference cycle
        needs a full collection (about 0.2 s once torch is loaded, so not by default)."""
        engine, self.engine = self.engine, None
        if engine is None:
            return
        alive = weakref.ref(engine)
        del engine
        if alive() is not None:
            gc.collect()


def import_transfer_engine() -> Any:
    try:
        from mooncake.engine import TransferEngine
    except ImportError as exc:
        raise StepError(
            f"cannot import mooncake.engine: {exc}",
            hint=f"pip install {WHEEL_CHOICE}; set mooncake.enabled=false to run without "
                 "Mooncake",
        ) from exc
    return TransferEngine


def malformed_metadata_server(value: str) -> tuple[str, str] | None:
    """What is wrong with a metadata server Mooncake would misread, and the fix; None when
    it reads as meant.  Mooncake compares ``P2PHANDSHAKE`` case-sensitively and takes any
    value without ``://`` as etcd endpoints (``parseConnectionString``,
    ``transfer_metadata_plugin.cpp:525-543``, 0.3.13), so ``p2phandshake`` or
    ``etcd:/host`` would become an etcd client that never connects, and the engine fails
    15 s later with an unrelated RDMA diagnosis; a non-ASCII look-alike (P2PHANDSHAKE whose P
    is a Cyrillic ER, U+0420) is misread the same way."""
    foreign = non_ascii_problem(value, "the metadata server")
    if foreign is not None:
        return (foreign.removeprefix(f"the metadata server {value!r} "),
                "type it in ASCII: P2PHANDSHAKE, or a scheme:// URL")
    if value != "P2PHANDSHAKE" and value.upper() == "P2PHANDSHAKE":
        return ("is not Mooncake's literal: it compares P2PHANDSHAKE case-sensitively and "
                "would take this value as an etcd host", "did you mean 'P2PHANDSHAKE'?")
    if "://" in value:
        return None
    scheme, colon, rest = value.partition(":")
    if colon and scheme.lower() in METADATA_SCHEMES and not rest[:1].isdigit():
        return (f"has no '://' after {scheme}:, so Mooncake would take all of it as an "
                "etcd host:port", f"did you mean '{scheme.lower()}://{rest.lstrip('/')}'?")
    if "/" in value:
        return ("has a path but no scheme, so Mooncake would take all of it as an etcd "
                "host:port",
                "write host:port for etcd, or a URL: etcd://HOST:PORT, "
                "http://HOST:PORT/metadata")
    return None


def check_metadata_plugin(ctx: PreviewContext, name: str) -> list[str]:
    """Refuse a metadata server whose plugin the installed Mooncake lacks: Mooncake would
    abort the whole process at engine init (``transfer_metadata_plugin.cpp:592``
    LOG(FATAL)), after torch and the other ranks started.  The build is read from the
    installed binaries (no import), only when a plugin is needed at all."""
    value = str(ctx.setting(name))
    malformed = malformed_metadata_server(value)
    if malformed is not None:
        problem, hint = malformed
        ctx.reject(f"{name} {value!r} {problem}", setting=name, hint=hint)
    scheme = metadata_scheme(value)
    if scheme is None:
        return []
    build = installed_build()
    if build.binary is None:
        return [f"{name}: Mooncake is not installed here, so its {scheme} plugin is unchecked"]
    if scheme not in build.metadata_schemes:
        ctx.reject(f"{name} {value!r} needs Mooncake's {scheme} metadata plugin, which the "
                   f"installed build lacks ({build.describe()}): Mooncake would abort the "
                   "process ('Unable to find metadata storage plugin')",
                   setting=name,
                   hint="use P2PHANDSHAKE or a scheme this build has: "
                        f"{', '.join(sorted(build.metadata_schemes)) or 'none'}")
    return [f"{name}: {scheme} plugin present in {Path(build.binary).name}'s build"]


def ib_device_for(configured: str) -> str | None:
    """The engine's RDMA device as SGLang 0.5.23 keeps it (``MooncakeTransferEngine.
    __init__``, ``mooncake_transfer_engine.py:131-136``): ``""`` when ``MC_FORCE_TCP=1``
    makes devices irrelevant, ``None`` when none is configured (``parse_ib_device_config``
    :30-31 turns a blank value into ``None``), else the configured value.  The store
    compares it with its own device, so ``None`` and ``""`` differ."""
    if os.environ.get("MC_FORCE_TCP") == "1":
        return ""
    return configured.strip() or None


def check_transport(ctx: StepContext, shared: SharedTransferEngine, native: NativeLog) -> None:
    """Fail (or warn, with ``mooncake.transport_mismatch: warn``) when Mooncake installed
    another transport than the profile's protocol."""
    shared.transports = installed_transports(native.text)
    if not shared.transports:
        ctx.log.warning("transport_unconfirmed", expected=shared.protocol,
                        why="Mooncake logged no transport (is GLOG_minloglevel set?)")
        return
    problem = transport_mismatch(shared.protocol, shared.transports)
    if problem is None:
        return
    if ctx.setting("mooncake.transport_mismatch") == "warn":
        ctx.log.warning("transport_mismatch", expected=shared.protocol,
                        installed=shared.transports, problem=problem)
        return
    shared.close()
    raise StepError(problem, hint="or set mooncake.transport_mismatch: warn to accept it")


@step(
    "init_shared_mooncake_transfer_engine",
    description="Initialise this rank's Mooncake transfer engine (P2P handshake) and check "
                "its transport",
    requires=["import_backend"],
    device_bound=True,
    when="mooncake.enabled",
    settings=(MOONCAKE_ENABLED, MOONCAKE_PROTOCOL, MOONCAKE_HOSTNAME, MOONCAKE_METADATA_SERVER,
              MOONCAKE_DEVICE_NAME, ASCEND_BUILD, TRANSPORT_MISMATCH, MASTER_ADDR,
              VISIBLE_DEVICES_ENV),
)
def init_shared_mooncake_transfer_engine(ctx: StepContext) -> SharedTransferEngine:
    engine_type = import_transfer_engine()
    protocol = str(ctx.setting("device.mooncake_protocol"))
    hostname = engine_hostname(ctx, protocol, installed_build)
    shared = SharedTransferEngine(engine_type(), hostname, protocol,
                                  ib_device_for(str(ctx.setting("mooncake.device_name"))),
                                  str(ctx.setting("mooncake.metadata_server")))
    before = listeners()
    try:
        native = shared.call("initialize", hostname.argument, shared.metadata_server, protocol,
                             shared.device_name)
    except StepError as failed:
        shared.close()  # release it now, so its shutdown logs come before the diagnosis
        exhausted = no_free_rpc_port(failed.native_log, os.environ)
        if exhausted is not None:
            raise exhausted from None  # the generic "returned -1" would be diagnosed instead
        raise
    shared.rpc_port = int(shared.engine.get_rpc_port())
    warn_if_exposed(ctx, "transfer engine", hostname.host, before)
    note_expected_errors(ctx.log, "transfer engine", native.text)
    check_transport(ctx, shared, native)
    ctx.log.info("transfer_engine_ready", hostname=hostname.argument, protocol=protocol,
                 transports=shared.transports, session_id=shared.session_id,
                 ascend_build=hostname.ascend_build)
    return shared


@init_shared_mooncake_transfer_engine.preview
def preview_transfer_engine(ctx: PreviewContext) -> list[str]:
    return check_metadata_plugin(ctx, "mooncake.metadata_server")


@init_shared_mooncake_transfer_engine.teardown
def release_transfer_engine(ctx: StepContext, shared: SharedTransferEngine) -> None:
    shared.close()


STEPS = (init_shared_mooncake_transfer_engine,)
