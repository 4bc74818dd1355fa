"""Ascend: the device context of the calling thread, Mooncake's Ascend transports, CANN."""

from __future__ import annotations

from initorch.plugin import Diagnosis

_SET_DEVICE_FIRST = (
    "Call torch.npu.set_device(<local rank>) before the Mooncake engine and store are "
    "initialised and before memory is registered, on the same thread; a helper thread "
    "(for example one that enforces a deadline) must call set_device itself first."
)
_DEVICE_BOUND = (
    "device_bound steps run after set_device on the same thread: keep the engine, store "
    "and register steps device_bound and the order set_device -> engine -> process group."
)

CONTEXT_NULL = Diagnosis(
    id="ascend-context-null",
    title="No Ascend device context on the thread that called into Mooncake",
    cause=(
        "Mooncake's ascend transports call aclrtGetDevice on the calling thread (at engine "
        "initialisation, and the ascend-direct build again when memory is registered); the "
        "ACL device context is per thread, and 107002 (ACL_ERROR_RT_CONTEXT_NULL) means "
        "set_device never ran on that thread. It happens when the engine is initialised "
        "before set_device (the old start-up order) or on a helper thread, which does not "
        "inherit the device context."
    ),
    remedy=_SET_DEVICE_FIRST,
    prevention=_DEVICE_BOUND,
    pattern=(
        # Mooncake <= 0.3.10 ascend_direct_transport.cpp, HcclTransport, HCCL's hrtGetDevice.
        r"(?:\baclrtGetDevice|\brtGet device)\b[^\n]{0,200}?(?:ret:\s*|return\[)(?P<code>107002)\b"
        # Mooncake 0.3.12 ascend_direct_transport.cpp ResolveCurrentEngineId (transfers).
        r"|\baclrtGetDevice failed, errmsg:"
    ),
)

ACL_CALL_FAILED = Diagnosis(
    id="ascend-acl-call-failed",
    title="A CANN (ACL) call inside Mooncake's ascend-direct transport failed",
    cause=(
        "Since Mooncake 0.3.10.post1 the ascend-direct transport reports failed ACL calls as "
        "'Call acl failed, detail: <CANN's last error>'. At engine start and at memory "
        "registration the calls are aclrtGetDevice and aclrtGetCurrentContext on the calling "
        "thread, so the usual cause is a thread on which set_device never ran (the Mooncake "
        "maintainers' answer to it, kvcache-ai/Mooncake#3451); aclrtGetDeviceCount failing "
        "points at the driver or a CANN version that does not match it."
    ),
    remedy=_SET_DEVICE_FIRST + " If the detail names the driver, check npu-smi info and "
    "that CANN matches the driver.",
    prevention=_DEVICE_BOUND,
    pattern=r"\bCall acl failed, detail:",
)

TRANSPORT_FAILED = Diagnosis(
    id="mooncake-ascend-transport-failed",
    title="Mooncake could not install its Ascend transport",
    cause=(
        "An Ascend build of Mooncake always installs the ascend transport (unless "
        "MC_FORCE_TCP is set), whatever protocol was asked for, and gave up: the line "
        "before says why. Typical reasons: no device context on the calling thread "
        "(107002, 'Call acl failed'), the legacy HCCL build given a hostname without "
        ":npu_<physical id> or a wrong physical id (/etc/hccn.conf has no address for it), "
        "or the ascend-direct build given the legacy host:port:npu_<id> form."
    ),
    remedy=(
        "Read the Mooncake line before this one. Call set_device first on the same thread; "
        "give the legacy HCCL build host:port:npu_<physical id> (ASCEND_NPU_PHY_ID) and the "
        "ascend-direct build (the mooncake-transfer-engine-npu wheel) a plain host."
    ),
    prevention=(
        "mooncake.ascend_build: auto reads the installed build and picks the hostname form; "
        "the engine step is device_bound."
    ),
    pattern=r"\bFailed to install ascend transport\b",
)

CANN_NOT_LOADED = Diagnosis(
    id="ascend-cann-not-loaded",
    title="Ascend CANN libraries cannot be loaded",
    cause=(
        "torch_npu links the CANN toolkit's libraries (libhccl, libascendcl, "
        "libacl_op_compiler, libge_runner, libgraph, libacl_tdt_channel; its ATB plugin "
        "libatb). They are not on the loader path: CANN (or the NNAL/ATB package) is not "
        "installed, or its environment script was not sourced in the environment that "
        "started the server."
    ),
    remedy=(
        "Install the CANN toolkit that matches torch_npu, then run 'source "
        "/usr/local/Ascend/ascend-toolkit/set_env.sh' (and nnal/atb/set_env.sh for libatb) "
        "in the environment that starts the server; check with python -c 'import torch_npu'."
    ),
    prevention=(
        "Source set_env.sh in the container entrypoint or service unit, not in an "
        "interactive shell, so every worker process inherits LD_LIBRARY_PATH."
    ),
    pattern=(
        r"\blib(?:hccl|ascendcl|acl_op_compiler|ge_runner|graph|acl_tdt_channel|atb)\.so"
        r":\s*cannot open shared object file"
    ),
)
