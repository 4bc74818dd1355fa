"""The local hostname a rank's Mooncake engine registers under.

SGLang 0.5.23 (``distributed/device_communicators/mooncake_transfer_engine.py``)
passes the host's own address (``get_local_ip_auto``) and, only when
``ENABLE_ASCEND_TRANSFER_WITH_MOONCAKE=1``, the legacy Ascend form
``host:<free port>:npu_<id>`` with the id from ``ASCEND_NPU_PHY_ID`` (else the
device index).  Which form is right depends on the installed build, not on a
variable: the shipped ``mooncake-transfer-engine-npu`` wheel is ascend-direct
and takes a plain host (it asks ``aclrtGetDevice`` for the device); only the
legacy HCCL build parses ``:npu_<physical id>`` (``parseHostNameWithPortAscend``,
``transfer_engine_impl.cpp``).  ``mooncake.ascend_build: auto`` therefore reads
the build from the engine binary (:mod:`initorch.steps.mooncake_build`).
"""

from __future__ import annotations

import os
from collections.abc import Callable

from initorch.plugin import StepContext, StepError, record, split_host_port
from initorch.steps.mooncake_build import ASCEND_BUILDS, AscendBuild, MooncakeBuild
from initorch.steps.network import free_port, local_address_towards
from initorch.steps.set_device import device_index, visible_devices

LEGACY_SWITCH = "ENABLE_ASCEND_TRANSFER_WITH_MOONCAKE"
PHYSICAL_ID = "ASCEND_NPU_PHY_ID"


@record
class EngineHostname:
    """What ``initialize`` gets (``argument``) and the bare host peers dial (``host``)."""

    argument: str
    host: str
    ascend_build: AscendBuild | None = None


def rendezvous_host(ctx: StepContext) -> str:
    """The host every rank reaches: the launcher's rendezvous (``--dist-init-addr``,
    ``MASTER_ADDR``, SLURM's first node), else the profile's."""
    if ctx.rank.rendezvous is not None:
        return split_host_port(ctx.rank.rendezvous)[0]
    return str(ctx.setting("distributed.master_addr"))


def local_host(setting: str, peer: str) -> str:
    """``auto`` -> the local address that reaches ``peer``; anything else as written."""
    if setting != "auto":
        return setting
    try:
        return local_address_towards(peer)
    except OSError as exc:  # an unresolvable name, no route
        raise StepError(f"cannot find the local address that reaches {peer}: {exc}",
                        hint="check the address, or set the hostname setting (or HOST_IP) "
                             "to this host's address") from exc


def choose_ascend_build(setting: str, build: MooncakeBuild) -> AscendBuild:
    """The Ascend build to address: the configured one, else the installed one."""
    legacy_requested = os.environ.get(LEGACY_SWITCH) == "1"
    configured = next((name for name in ASCEND_BUILDS if name == setting), None)
    if configured is None and setting != "auto":
        raise StepError(f"mooncake.ascend_build is {setting!r}",
                        hint="use auto, ascend_direct or hccl")
    if configured is not None:
        if build.ascend is not None and build.ascend != configured:
            raise StepError(
                f"mooncake.ascend_build is {configured}, but the installed Mooncake is the "
                f"{build.ascend} build ({build.describe()})",
                hint="set mooncake.ascend_build: auto, or install the build you configured")
        return configured
    if build.ascend is not None:
        if legacy_requested and build.ascend == "ascend_direct":
            raise StepError(
                f"{LEGACY_SWITCH}=1 asks for the legacy host:port:npu_<id> hostname, but the "
                f"installed Mooncake is the ascend-direct build, which takes a plain host",
                hint=f"unset {LEGACY_SWITCH} (the npu wheel needs no switch), or install a "
                     "legacy HCCL build of Mooncake")
        return build.ascend
    return "hccl" if legacy_requested else "ascend_direct"


def physical_device_id(ctx: StepContext) -> int:
    """``ASCEND_NPU_PHY_ID`` when set (as SGLang reads it), else the physical id behind
    this rank's device index.  SGLang falls back to the logical index, which names the
    wrong card when ``ASCEND_RT_VISIBLE_DEVICES`` remaps; mapping it is the fix."""
    raw = os.environ.get(PHYSICAL_ID, "").strip()
    if raw and raw != "-1":
        if not raw.isdigit():
            raise StepError(f"{PHYSICAL_ID}={raw!r} is not a device id",
                            hint=f"set {PHYSICAL_ID} to the physical NPU id (npu-smi info)")
        return int(raw)
    index = device_index(ctx)
    visible = visible_devices(ctx)
    if visible is None:
        return index
    if not visible[index].isdigit():
        raise StepError(f"{ctx.setting('device.visible_devices_env')} entry {visible[index]!r} "
                        "is not a physical device id", hint=f"set {PHYSICAL_ID} explicitly")
    return int(visible[index])


def engine_hostname(ctx: StepContext, protocol: str,
                    build: Callable[[], MooncakeBuild]) -> EngineHostname:
    """The hostname for ``TransferEngine.initialize`` on this rank; ``build`` reads the
    installed build (a scan of a binary of several MB), only the ascend protocol asks."""
    host = local_host(str(ctx.setting("mooncake.hostname")), rendezvous_host(ctx))
    if protocol != "ascend":
        return EngineHostname(host, host)
    flavour = choose_ascend_build(str(ctx.setting("mooncake.ascend_build")), build())
    if flavour == "ascend_direct":
        return EngineHostname(host, host, flavour)
    # The legacy build cannot parse IPv6 (transfer_engine_impl.cpp: "does not support IPv6").
    return EngineHostname(f"{host}:{free_port(host)}:npu_{physical_device_id(ctx)}", host,
                          flavour)
