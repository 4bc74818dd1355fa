"""``init_mooncake_store``: the Mooncake Store client HiCache writes its pages to.

As SGLang 0.5.23 sets it up (``srt/mem_cache/storage/mooncake_store/mooncake_store.py``
``MooncakeStore.__init__``): ``MooncakeDistributedStore().setup(local_hostname,
metadata_server, global_segment_size // (tp*pp), 16 MiB local buffer, protocol,
device_name, master_server_address, engine)``, then a warm-up put/get.  The
shared engine is reused only where SGLang reuses it (``mooncake_store.py:523-537``):
the metadata server is ``P2PHANDSHAKE``, the protocol is ``rdma`` and the store's
device (``MOONCAKE_DEVICE``, default ``""``: ``mooncake.store.device_name``) equals
the engine's RDMA device, which is ``None`` unless one is configured and ``""``
under ``MC_FORCE_TCP=1`` (:func:`~initorch.steps.transfer_engine.ib_device_for`).
So on CUDA without a configured device SGLang builds a second engine for the
store, and so does initorch; ``tests/sglang/test_oracle_store.py`` runs SGLang's
own ``MooncakeStore.__init__`` against this rule.  The store then registers under
the engine's session id.  Otherwise the store creates its own engine, which
installs the transport the protocol names (``client_service.cpp
InitTransferEngine``: no auto-discovery for tcp).

Device-bound: with the ascend protocol the store's own engine asks
``aclrtGetDevice`` on the calling thread, as the shared engine does.
"""

from __future__ import annotations

import os
import time
import uuid
from collections.abc import Callable
from typing import Any

from initorch.plugin import (
    PreviewContext,
    StepContext,
    StepError,
    capture_native_stderr,
    record,
    setting,
    step,
)
from initorch.steps.engine_hostname import local_host
from initorch.steps.listeners import listeners, warn_if_exposed
from initorch.steps.mooncake_env import (
    READ_DEVICE,
    READ_GLOBAL_SEGMENT,
    READ_METADATA_SERVER,
    read_local_hostname,
    read_reuse_engine,
)
from initorch.steps.mooncake_master import MasterEndpoint, stand_in_if_died
from initorch.steps.network import ascii_address, is_ipv6, split_host_port
from initorch.steps.shared_settings import (
    HICACHE_ENABLED,
    MOONCAKE_ENABLED,
    MOONCAKE_PROTOCOL,
    STORAGE_BACKEND,
)
from initorch.steps.transfer_engine import (
    METADATA_SERVER,
    METADATA_SERVER_HELP,
    SharedTransferEngine,
    check_metadata_plugin,
)
from initorch.steps.transports import note_expected_errors

# Mooncake 0.3.14 (the cuda13 wheel) makes mooncake.store a package that imports its
# implementation by MOONCAKE_STORE_BACKEND: "cpp" (default, mooncake._store) or "rs"
# (mooncake/store/__init__.py); 0.3.13 has only store.so, the cpp one.
STORE_BACKEND_VARIABLE = "MOONCAKE_STORE_BACKEND"
CHECKED_STORE_BACKEND = "cpp"
WARMUP_BYTES = 4 * 1024  # what SGLang's MooncakeStore.warmup puts
WARMUP_ATTEMPTS = 10  # SGLang 0.5.23 mooncake_store.py:726 max_retries
WARMUP_DELAY_S = 1.0  # mooncake_store.py:727 retry_delay
# The step's default timeout.  A setup normally takes well under a second, and the warm-up
# at most WARMUP_ATTEMPTS s; a master that stops answering after the readiness probe held
# setup for about 10 minutes (Mooncake: 30 s per RPC, 20 retries).  A profile's
# ``steps: init_mooncake_store: {timeout: N}`` changes it (a slow RDMA registration).
STORE_TIMEOUT_S = 120.0

# Mooncake 0.3.13's socket handshake resolves a peer as IPv4 unless this is set
# (transfer_metadata_plugin.cpp:1099 "failed to get IP address of peer server").
USE_IPV6_VARIABLE = "MC_USE_IPV6"

STORE_HOSTNAME = setting(
    "mooncake.store.hostname", str, default="auto", pattern=r"\S+",
    from_environment=read_local_hostname,
    description="the store client's local host; auto = the local address that reaches the "
                "master (SGLang: MOONCAKE_LOCAL_HOSTNAME)")
STORE_METADATA_SERVER = setting(
    "mooncake.store.metadata_server", str, default="P2PHANDSHAKE", pattern=METADATA_SERVER,
    from_environment=READ_METADATA_SERVER,
    pattern_help=f"P2PHANDSHAKE, master, {METADATA_SERVER_HELP}",
    description="the store's metadata server: P2PHANDSHAKE (SGLang's default), an etcd/http "
                "URL, or master (the managed master's own HTTP metadata server) (SGLang: "
                "MOONCAKE_TE_META_DATA_SERVER)")
GLOBAL_SEGMENT_MB = setting(
    "mooncake.store.global_segment_mb", int, default=64, minimum=1, maximum=2**24,
    from_environment=READ_GLOBAL_SEGMENT,
    description="memory this instance gives the store, split over the ranks (SGLang: "
                "MOONCAKE_GLOBAL_SEGMENT_SIZE, 4gb)")
LOCAL_BUFFER_MB = setting(
    "mooncake.store.local_buffer_mb", int, default=16, minimum=1, maximum=2**20,
    description="the store client's local buffer (SGLang's DEFAULT_LOCAL_BUFFER_SIZE, 16 MiB)")
STORE_DEVICE_NAME = setting(
    "mooncake.store.device_name", str, default="", from_environment=READ_DEVICE,
    description="the store client's RDMA device(s) (SGLang's MOONCAKE_DEVICE, default \"\"); "
                "the shared engine is reused only when it equals the engine's device")
REUSE_ENGINE = setting(
    "mooncake.store.reuse_engine", bool, default=True, from_environment=read_reuse_engine,
    description="SGLANG_HICACHE_MOONCAKE_REUSE_TE: reuse the shared engine where SGLang does "
                "(rdma, P2PHANDSHAKE, same device names)")


@record(frozen=False)
class StoreClient:
    """A set-up store client, and whether it rides on the shared engine."""

    store: Any
    hostname: str
    protocol: str
    reused_engine: bool


def import_store() -> Any:
    try:
        from mooncake.store import MooncakeDistributedStore
    except ImportError as exc:
        raise StepError(f"cannot import mooncake.store: {exc}",
                        hint="install a Mooncake wheel with the store (the -non-cuda, CUDA "
                             "and npu wheels have it), or set hicache.storage_backend: none"
                        ) from exc
    return MooncakeDistributedStore


def store_reuses_engine(engine_ib_device: str | None, store_device: str, metadata: str,
                        protocol: str) -> bool:
    """SGLang 0.5.23's condition, ``mooncake_store.py:527-532``, on the same values."""
    return engine_ib_device == store_device and metadata == "P2PHANDSHAKE" \
        and protocol == "rdma"


def reusable_engine(ctx: StepContext, metadata: str, protocol: str, device_name: str
                    ) -> SharedTransferEngine | None:
    """The shared engine when SGLang would reuse it, and on the legacy HCCL build, else
    None.  That build's store cannot have an engine of its own: the store names its
    engine ``host:port`` (Mooncake ``real_client.cpp:797-860``), without the
    ``:npu_<physical id>`` its ``HcclTransport`` needs (``transfer_engine_impl.cpp:100-112``);
    SGLang's rule would give it one there and fail, so initorch reuses the shared engine,
    whose hostname has the id (a deliberate difference)."""
    if not ctx.has_output("init_shared_mooncake_transfer_engine"):
        return None
    shared: SharedTransferEngine = ctx.output("init_shared_mooncake_transfer_engine")
    legacy = protocol == "ascend" and shared.hostname.ascend_build == "hccl"
    if not ctx.setting("mooncake.store.reuse_engine"):
        if legacy:
            raise StepError("the legacy HCCL build's store cannot have an engine of its own: "
                            "it would name it host:port, without the :npu_<id> its "
                            "transport needs (Mooncake real_client.cpp:797-860)",
                            hint="set mooncake.store.reuse_engine: true")
        return None
    if store_reuses_engine(shared.ib_device, device_name, metadata, protocol):
        return shared
    if legacy:
        if metadata != shared.metadata_server:
            raise StepError(
                f"the legacy HCCL build's store must reuse the shared engine, but its metadata "
                f"server ({metadata}) is not the engine's ({shared.metadata_server})",
                hint="give mooncake.store.metadata_server the engine's value")
        ctx.log.info("store_reuses_hccl_engine", session_id=shared.session_id,
                     why="the store's own engine would get host:port without :npu_<id>")
        return shared
    return None


def metadata_server(ctx: StepContext, master: MasterEndpoint) -> str:
    """``P2PHANDSHAKE``, a URL as given, or ``master``: the managed master's own."""
    value = str(ctx.setting("mooncake.store.metadata_server"))
    if value != "master":
        return value
    if master.metadata_url is None:
        raise StepError("mooncake.store.metadata_server is 'master', but the master is not "
                        "managed by initorch, so its metadata URL is unknown",
                        hint="give the URL (http://HOST:PORT/metadata), or P2PHANDSHAKE")
    return master.metadata_url


def check_ipv6_handshake(ctx: StepContext, host: str, metadata: str) -> None:
    """Refuse, before setup, an IPv6 store client that peers reach by P2P handshake without
    ``MC_USE_IPV6``: its puts would fail with -800 whenever they land in another rank's
    segment, so a start-up would pass or fail by chance (where the master places them)."""
    if ctx.rank.world_size == 1 or metadata != "P2PHANDSHAKE" or not is_ipv6(host) \
            or os.environ.get(USE_IPV6_VARIABLE):
        return
    raise StepError(f"the store client's address {host} is IPv6, and Mooncake's P2P "
                    f"handshake resolves peers as IPv4 unless {USE_IPV6_VARIABLE} is set: "
                    "every put into another rank's segment would fail ('failed to get IP "
                    "address of peer server', ret=-800)",
                    hint=f"set {USE_IPV6_VARIABLE}: \"1\" in the profile's env: (or the "
                         "environment of every rank), or give mooncake.store.hostname an "
                         "IPv4 address")


def warm_up(store: Any, sleep: Callable[[float], None] = time.sleep) -> None:
    """SGLang's warm-up (``mooncake_store.py:721-745``): put 4 KiB, up to
    ``WARMUP_ATTEMPTS`` times ``WARMUP_DELAY_S`` apart (the engine may still be
    connecting), then check that it reads back equal.  SGLang also sleeps after the
    last failed put; initorch fails at once instead."""
    key = f"initorch_mooncake_store_warmup_{uuid.uuid4().hex}"
    value = bytes(range(256)) * (WARMUP_BYTES // 256)
    with capture_native_stderr() as native:
        for attempt in range(1, WARMUP_ATTEMPTS + 1):
            rc = store.put(key, value)
            if rc == 0 or attempt == WARMUP_ATTEMPTS:
                break
            sleep(WARMUP_DELAY_S)
        back = store.get(key) if rc == 0 else b""
        store.remove(key)
    if rc != 0:
        raise StepError(f"Warmup put failed after {WARMUP_ATTEMPTS} attempts (last ret={rc}), "
                        "Transfer Engine might not be ready", native_log=native.error_lines())
    if bytes(back) != value:
        raise StepError("the store's warm-up value did not read back equal",
                        native_log=native.error_lines())


@step(
    "init_mooncake_store",
    description="Set up the Mooncake Store client (MooncakeDistributedStore.setup), reusing "
                "the shared engine where SGLang does",
    requires=["mooncake_master"],
    wants=["init_shared_mooncake_transfer_engine"],
    reads=["mooncake_master", "init_shared_mooncake_transfer_engine"],
    device_bound=True,
    timeout=STORE_TIMEOUT_S,
    when="hicache.enabled and mooncake.enabled and hicache.storage_backend == 'mooncake'",
    settings=(HICACHE_ENABLED, MOONCAKE_ENABLED, STORAGE_BACKEND, MOONCAKE_PROTOCOL,
              STORE_DEVICE_NAME, STORE_HOSTNAME, STORE_METADATA_SERVER, GLOBAL_SEGMENT_MB,
              LOCAL_BUFFER_MB, REUSE_ENGINE),
)
def init_mooncake_store(ctx: StepContext) -> StoreClient:
    master: MasterEndpoint = ctx.output("mooncake_master")
    store_type = import_store()
    protocol = str(ctx.setting("device.mooncake_protocol"))
    device_name = str(ctx.setting("mooncake.store.device_name"))
    metadata = metadata_server(ctx, master)
    shared = reusable_engine(ctx, metadata, protocol, device_name)
    master_host, _ = split_host_port(master.address)
    hostname = shared.session_id if shared else \
        local_host(str(ctx.setting("mooncake.store.hostname")), master_host)
    host = split_host_port(hostname)[0] if shared else hostname
    check_ipv6_handshake(ctx, host, metadata)
    segment = int(ctx.setting("mooncake.store.global_segment_mb")) * 2**20 // ctx.rank.world_size
    local_buffer = int(ctx.setting("mooncake.store.local_buffer_mb")) * 2**20
    store = store_type()
    before = listeners()
    with capture_native_stderr() as native:
        rc = store.setup(hostname, metadata, segment, local_buffer, protocol, device_name,
                         master.address, shared.engine.get_engine() if shared else None)
    if rc != 0:
        raise StepError(f"Failed to setup Mooncake store, error code: {rc}",
                        native_log=native.error_lines())
    warn_if_exposed(ctx, "store client", host, before)
    note_expected_errors(ctx.log, "store client", native.text)
    client = StoreClient(store, hostname, protocol, shared is not None)
    try:
        warm_up(store)
    except StepError:
        store.close()
        raise
    ctx.log.info("mooncake_store_ready", hostname=hostname, master=master.address,
                 metadata_server=metadata, global_segment_bytes=segment,
                 reused_engine=client.reused_engine,
                 implementation=os.environ.get(STORE_BACKEND_VARIABLE, CHECKED_STORE_BACKEND))
    return client


@init_mooncake_store.preview
def preview_mooncake_store(ctx: PreviewContext) -> list[str]:
    backend = ctx.environ.get(STORE_BACKEND_VARIABLE, CHECKED_STORE_BACKEND)
    if backend != CHECKED_STORE_BACKEND:
        ctx.reject(f"{STORE_BACKEND_VARIABLE}={backend!r} selects a Mooncake Store "
                   "implementation initorch has not checked (only 'cpp': store.so in 0.3.13, "
                   "mooncake._store in 0.3.14)",
                   hint=f"unset {STORE_BACKEND_VARIABLE}, or set it to cpp")
    for name in ("mooncake.store.metadata_server", "mooncake.store.hostname"):
        try:
            ascii_address(str(ctx.setting(name)), name)
        except ValueError as problem:  # a look-alike letter: Mooncake reads bytes
            ctx.reject(str(problem), setting=name, hint="retype it in ASCII")
    if ctx.setting("mooncake.store.metadata_server") == "master":
        return []  # the managed master's own HTTP metadata server, known at run time
    return check_metadata_plugin(ctx, "mooncake.store.metadata_server")


@init_mooncake_store.teardown
def close_mooncake_store(ctx: StepContext, client: StoreClient) -> None:
    """Close the client; against a stand-in when the managed master died (its close would
    otherwise wait about 15 s on Mooncake's RPC retries: :func:`stand_in_if_died`)."""
    with stand_in_if_died(ctx.log, ctx.output("mooncake_master")):
        client.store.close()


STEPS = (init_mooncake_store,)
