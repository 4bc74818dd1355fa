"""``init_shared_mooncake_transfer_engine``: one Mooncake engine per rank.

The engine is device_bound: on Ascend its transport calls ``aclrtGetDevice``
on the calling thread, which fails with 107002 unless ``set_device`` ran on
that thread.  The executor guarantees that; this module only builds the
engine, turns non-zero return codes into errors carrying Mooncake's own log
lines, and hands the engine to later steps through :class:`SharedTransferEngine`.
"""

from __future__ import annotations

import gc
from dataclasses import dataclass
from typing import Any

from initorch import StepContext, StepError, setting, step
from initorch.steps.device import VISIBLE_DEVICES_ENV, device_index, visible_devices
from initorch.steps.distributed import free_port
from initorch.steps.native_log import capture_native_stderr

MOONCAKE_ENABLED = setting(
    "mooncake.enabled", bool, default=True,
    description="the switch: false skips every Mooncake step (and plugin steps that follow it)")
# Mooncake picks the transport from its build, topology and environment as well
# (Mooncake 0.3.13 transfer_engine.cpp); the names vary by build, so no fixed list.
MOONCAKE_PROTOCOL = setting(
    "device.mooncake_protocol", str, required=True, pattern=r"[a-z][a-z0-9_]*",
    description="Mooncake transfer protocol (tcp, rdma, ascend, ...)")
MOONCAKE_HOSTNAME = setting(
    "mooncake.hostname", str, default="127.0.0.1", pattern=r"\S+",
    description="local hostname the engine registers (Ascend adds :port:npu_<phy id>)")
MOONCAKE_METADATA_SERVER = setting(
    "mooncake.metadata_server", str, default="P2PHANDSHAKE", pattern=r"\S+",
    description="Mooncake metadata server: P2PHANDSHAKE, or an etcd/http URL")
MOONCAKE_DEVICE_NAME = setting(
    "mooncake.device_name", str, default="",
    description="RDMA device(s) for the rdma protocol; empty lets Mooncake choose")


@dataclass(slots=True)
class SharedTransferEngine:
    """The rank's transfer engine plus how peers reach it."""

    engine: Any
    hostname: str
    protocol: str
    rpc_port: int

    @property
    def session_id(self) -> str:
        """What a peer passes to ``transfer_sync_*`` to reach this engine."""
        host = self.hostname.split(":")[0]
        return f"{host}:{self.rpc_port}"

    def call(self, method: str, *args: Any) -> int:
        """Call an engine method returning a status code; non-zero raises :class:`StepError`."""
        with capture_native_stderr() as native:
            rc = int(getattr(self.engine, method)(*args))
        if rc != 0:
            shown = ", ".join(hex(a) if isinstance(a, int) and a > 4096 else repr(a) for a in args)
            raise StepError(f"TransferEngine.{method}({shown}) returned {rc}",
                            native_log=native.error_lines())
        return rc

    def close(self) -> None:
        """Release the engine (its destructor closes sockets and segments)."""
        self.engine = None
        gc.collect()


def import_transfer_engine() -> Any:
    try:
        from mooncake.engine import TransferEngine
    except ImportError as exc:
        raise StepError(
            f"cannot import mooncake.engine: {exc}",
            hint="pip install mooncake-transfer-engine (CUDA machines) or "
                 "mooncake-transfer-engine-non-cuda (CPU), never both; set "
                 "mooncake.enabled=false to run without Mooncake",
        ) from exc
    return TransferEngine


def engine_hostname(ctx: StepContext, protocol: str) -> str:
    """The local hostname the engine registers; Ascend wants ``host:port:npu_<phy id>``."""
    host = str(ctx.setting("mooncake.hostname"))
    if protocol != "ascend":
        return host
    index = device_index(ctx)
    visible = visible_devices(ctx)
    physical = visible[index] if visible is not None else str(index)
    return f"{host}:{free_port(host)}:npu_{physical}"


@step(
    "init_shared_mooncake_transfer_engine",
    description="Initialise this rank's Mooncake transfer engine with the profile's protocol",
    requires=["import_backend"],
    device_bound=True,
    when="mooncake.enabled",
    settings=(MOONCAKE_ENABLED, MOONCAKE_PROTOCOL, MOONCAKE_HOSTNAME, MOONCAKE_METADATA_SERVER,
              MOONCAKE_DEVICE_NAME, VISIBLE_DEVICES_ENV),
)
def init_shared_mooncake_transfer_engine(ctx: StepContext) -> SharedTransferEngine:
    engine_type = import_transfer_engine()
    protocol = str(ctx.setting("device.mooncake_protocol"))
    hostname = engine_hostname(ctx, protocol)
    metadata = str(ctx.setting("mooncake.metadata_server"))
    device_name = str(ctx.setting("mooncake.device_name") or "")
    shared = SharedTransferEngine(engine_type(), hostname, protocol, 0)
    try:
        shared.call("initialize", hostname, metadata, protocol, device_name)
    except StepError:
        shared.close()  # release it now, so its shutdown logs come before the diagnosis
        raise
    shared.rpc_port = int(shared.engine.get_rpc_port())
    ctx.log.info("transfer_engine_ready", hostname=hostname, protocol=protocol,
                 rpc_port=shared.rpc_port)
    return shared


@init_shared_mooncake_transfer_engine.teardown
def release_transfer_engine(ctx: StepContext, shared: SharedTransferEngine) -> None:
    shared.close()


STEPS = (init_shared_mooncake_transfer_engine,)
