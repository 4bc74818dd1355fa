"""Mooncake: wheels and builds, transports, the engine, the master and the store."""

from __future__ import annotations

from initorch.plugin import Diagnosis
from initorch.steps.mooncake_build import WHEEL_CHOICE

_READ_NATIVE_LOG = "Read the Mooncake log lines before the failure (kept in native_log)."

# DT_NEEDED of the published wheels (readelf -d; tests/test_diagnosis_corpus.py checks
# each against the downloaded wheel): every build's engine (npu 0.3.13.post1: its
# libtransfer_engine.so) needs libibverbs.so.1, libnuma.so.1 and libcurl.so.4; the CUDA
# builds (mooncake-transfer-engine 0.3.13.post1, -cuda13 0.3.14) also libmlx5.so.1.
LIBIBVERBS_MISSING = Diagnosis(
    id="libibverbs-missing",
    title="Mooncake's native libraries need system libraries that are missing",
    cause=(
        "The Mooncake engine and store link libibverbs.so.1, libnuma.so.1 and libcurl.so.4 "
        "whatever the protocol, including the non-CUDA build used with TCP, and the CUDA "
        "builds also link libmlx5.so.1 (the mlx5 verbs provider); the wheels bundle none "
        "of them."
    ),
    remedy=(
        "Install them: apt-get install -y libibverbs1 libnuma1 libcurl4 ibverbs-providers "
        "(libmlx5.so.1 is in ibverbs-providers; RHEL: dnf install -y libibverbs "
        "numactl-libs libcurl). The later 'No RDMA devices found' log line is harmless "
        "with TCP."
    ),
    prevention=(
        "Bake these libraries into every image that runs Mooncake, including CPU-only "
        "images."
    ),
    pattern=r"\blib(?:ibverbs\.so\.1|numa\.so\.1|curl\.so\.4|mlx5\.so\.1):\s*cannot open shared "
            r"object file",
)

CUDA_BUILD_WITHOUT_DRIVER = Diagnosis(
    id="mooncake-cuda-build-without-driver",
    title="A CUDA build was imported on a machine without the NVIDIA driver (libcuda.so.1)",
    cause=(
        "The CUDA builds of Mooncake (mooncake-transfer-engine 0.3.13.post1, "
        "mooncake-transfer-engine-cuda13 0.3.14) link libcuda.so.1, the NVIDIA driver "
        "library, which no wheel bundles. It was imported on a host without the NVIDIA "
        "driver (CPU, NPU or MUSA node) or in a container started without the NVIDIA "
        "runtime."
    ),
    remedy=(
        "Without an NVIDIA GPU: pip uninstall -y mooncake-transfer-engine (or "
        "-cuda13), then pip install mooncake-transfer-engine-non-cuda (never two builds: "
        "they share the mooncake/ package folder). On an NVIDIA host: start the container "
        "with the NVIDIA runtime (--gpus all) so the driver library is mounted."
    ),
    prevention=(
        "Install the Mooncake build that matches the device profile: the 'mooncake' or "
        "'mooncake-cuda13' extra for cuda, 'mooncake-cpu' elsewhere, and only one of them "
        "per environment."
    ),
    pattern=r"\blibcuda\.so\.1:\s*cannot open shared object file",
)

CUDA_RUNTIME_MISSING = Diagnosis(
    id="mooncake-cuda-runtime-missing",
    title="The CUDA build of Mooncake cannot find the CUDA runtime of its major version",
    cause=(
        "mooncake-transfer-engine 0.3.13.post1 links libcudart.so.12 and "
        "mooncake-transfer-engine-cuda13 0.3.14 links libcudart.so.13; neither bundles it. "
        "It comes with a CUDA build of torch of the same CUDA major (its nvidia-cuda-runtime "
        "wheel, loaded when torch is imported). The runtime library is missing, not the "
        "driver: torch is a CPU build, torch was built for the other CUDA major (torch 2.15 "
        "from PyPI is a CUDA 13 build), or mooncake was imported before torch."
    ),
    remedy=(
        "Match the Mooncake wheel to torch.version.cuda: 12.x -> mooncake-transfer-engine, "
        "13.x -> mooncake-transfer-engine-cuda13; with a CPU torch and no NVIDIA GPU use "
        "mooncake-transfer-engine-non-cuda. Import torch before mooncake."
    ),
    prevention=(
        "Install torch and Mooncake from one extra ('mooncake' for CUDA 12 torch, "
        "'mooncake-cuda13' for CUDA 13 torch); initorch's import_backend step imports torch "
        "before any Mooncake step."
    ),
    pattern=r"\blibcudart\.so\.1[23]:\s*cannot open shared object file",
)

PG_MISSING_BUILD = Diagnosis(
    id="mooncake-pg-missing-build",
    title="The installed Mooncake has no mooncake.pg built for this torch",
    cause=(
        "mooncake.pg loads the extension mooncake.pg_<torch version> (mooncake/pg.py); a "
        "wheel carries it only for the torch versions it was built against, and older "
        "wheels have no set_transfer_engine at all (SGLang asks for 0.3.11 or later). "
        "Without it neither the 'mooncake' nor the 'mooncake-cpu' backend is registered."
    ),
    remedy=(
        "Install a Mooncake wheel built for the installed torch version (the CUDA wheel "
        "0.3.13.post1 ships mooncake.pg for torch 2.11.0 to 2.13.0; the non-CUDA wheel "
        "ships none), or drop the mooncake-ep profile and use the device's own collective "
        "backend."
    ),
    prevention=(
        "Pin torch to a version the Mooncake wheel ships mooncake.pg for in images that "
        "use the mooncake-ep profile."
    ),
    pattern=(
        r"Mooncake PG was not built against torch=="
        r"|Failed to import 'set_transfer_engine' from 'mooncake\.pg'"
    ),
)

PG_JIT_FAILED = Diagnosis(
    id="mooncake-pg-jit-failed",
    title="Mooncake 0.3.14's mooncake.pg could not compile its Torch adapter",
    cause=(
        "From Mooncake 0.3.14 (the cuda13 wheel) mooncake.pg builds its Torch adapter on "
        "first import (mooncake/pg.py: ninja and nvcc, minutes), cached under "
        "MOONCAKE_PG_JIT_DIR (default ~/.cache/mooncake/pg_jit). The build needs Ninja, a "
        "CUDA toolkit with nvcc and a visible GPU or TORCH_CUDA_ARCH_LIST; one was missing "
        "or the compilation failed."
    ),
    remedy=(
        "Build it ahead, where the toolchain is: python -m mooncake.pg --prebuild (python -m "
        "mooncake.pg --report says what is missing), keeping MOONCAKE_PG_JIT_DIR in the "
        "image; or pip install ninja, install a CUDA toolkit with nvcc and set "
        "TORCH_CUDA_ARCH_LIST (e.g. 9.0)."
    ),
    prevention=(
        "Prebuild the adapter in the image build, so that no rank compiles at start-up while "
        "the others wait for it in the process group's rendezvous."
    ),
    pattern=(
        r"Mooncake PG (?:Torch adapter )?JIT (?:requires|compilation failed)"
        r"|Mooncake PG CUDA JIT is running without a visible CUDA device"
    ),
)

NOT_INSTALLED = Diagnosis(
    id="mooncake-not-installed",
    title="The Mooncake transfer engine package is not installed",
    cause=(
        "A Mooncake step (transfer engine or store) ran but 'mooncake' cannot be "
        "imported in this environment."
    ),
    remedy=(
        f"pip install {WHEEL_CHOICE}. Or set mooncake.enabled: false to skip every Mooncake "
        "step."
    ),
    prevention=(
        "Set mooncake.enabled: false in deployments without Mooncake, and install "
        "the matching extra ('mooncake', 'mooncake-cuda13', 'mooncake-rocm', 'mooncake-npu' "
        "or 'mooncake-cpu') everywhere else."
    ),
    pattern=r"No module named '?mooncake\b",
)

UNSUPPORTED_TRANSPORT = Diagnosis(
    id="mooncake-unsupported-transport",
    title="This Mooncake build does not contain the transport that was asked for",
    cause=(
        "Mooncake compiles transports in per build (multi_transport.cpp installTransport). "
        "The store installs the transport its protocol names (client_service.cpp "
        "InitTransferEngine), so protocol 'ascend' with the CPU or CUDA wheel, or 'musa' "
        "without a MUSA build, fails here. (The engine's own initialize does not fail this "
        "way: it ignores the protocol and installs what its build and the host offer.)"
    ),
    remedy=(
        "Install the Mooncake build for this device (mooncake-transfer-engine-npu for "
        "ascend) or set device.mooncake_protocol to a transport the build has (tcp, rdma)."
    ),
    prevention=(
        "Keep device.mooncake_protocol from the device profile; the engine step checks which "
        "transport was really installed (mooncake.transport_mismatch)."
    ),
    pattern=(
        r"\bUnsupported transport \w+, please rebuild Mooncake"
        r"|\bunsupported_protocol protocol="
    ),
)

TRANSPORT_MISMATCH = Diagnosis(
    id="mooncake-transport-mismatch",
    title="Mooncake installed another transport than the profile means",
    cause=(
        "TransferEngine.initialize does not choose the transport from its protocol: "
        "Mooncake installs TCP only with MC_FORCE_TCP set, always ascend in Ascend builds, "
        "musa in MUSA builds without an HCA, and otherwise RDMA when it finds HCAs and TCP "
        "when it finds none (transfer_engine_impl.cpp init)."
    ),
    remedy=(
        "Say what you mean in the profile: for TCP set MC_FORCE_TCP: \"1\" in its env: "
        "section; for RDMA check ibv_devices and mooncake.device_name; for ascend install "
        "the npu build. Or accept the difference with mooncake.transport_mismatch: warn."
    ),
    prevention=(
        "The cpu, musa and xpu profiles set MC_FORCE_TCP; the engine step compares what "
        "Mooncake logged as installed with device.mooncake_protocol."
    ),
    pattern=r"the profile means Mooncake transport '\w+', but Mooncake installed",
)

ENGINE_INIT_DEADLINE = Diagnosis(
    id="mooncake-engine-init-deadline",
    title="TransferEngine.initialize did not return within SGLang's deadline",
    cause=(
        "SGLang runs TransferEngine.initialize on a helper thread to bound it "
        "(run_with_deadline, SGLANG_DISAGGREGATION_ENGINE_INIT_TIMEOUT). The call hung: "
        "RDMA topology discovery or a metadata server that does not answer. The helper "
        "thread cannot be cancelled, and on Ascend it has no device context of its own."
    ),
    remedy=(
        "Find where it hangs (py-spy dump on the process; Mooncake's glog lines): check "
        "the metadata server, the RDMA devices (ibv_devices, mooncake.device_name) or force "
        "TCP with MC_FORCE_TCP=1. On Ascend call set_device on the helper thread first."
    ),
    prevention=(
        "initorch enforces step timeouts on the step's thread after re-applying the device "
        "context (steps.<name>.timeout), never on a bare helper thread."
    ),
    pattern=r"Mooncake TransferEngine\.initialize\([^\n]{0,300}?\) did not return within",
)

ENGINE_INIT_FAILED = Diagnosis(
    id="mooncake-engine-init-failed",
    title="Mooncake TransferEngine.initialize returned an error",
    cause=(
        "The engine could not start. Mooncake logs the reason just before: no usable RDMA "
        "device or GID for the RDMA transport, a TCP port it could not bind, a metadata "
        "server it cannot reach, or a malformed local hostname. (An unknown protocol does "
        "not fail here: the engine installs what its build and the host offer.)"
    ),
    remedy=(
        _READ_NATIVE_LOG + " For RDMA set mooncake.device_name to an existing HCA (see "
        "ibv_devices) and MC_GID_INDEX if needed; to avoid RDMA set MC_FORCE_TCP=1."
    ),
    prevention=(
        "Let device.mooncake_protocol and the env: section come from the device profile "
        "rather than overriding them per deployment."
    ),
    pattern=(
        r"Mooncake Transfer Engine initialization failed"
        r"|TransferEngine\.initialize\b[^\n]{0,300}?returned\s*(?P<code>-?\d+)"
        r"|\bFailed to install (?:\w+ transport\b|transport, type=)"
    ),
)

MASTER_UNREACHABLE = Diagnosis(
    id="mooncake-master-unreachable",
    title="The Mooncake master cannot be reached",
    cause=(
        "The store client registers with the Mooncake master first. Nothing answers at "
        "the configured address: the master is not running, listens elsewhere, or a "
        "firewall blocks it. Mooncake's own client retries for about 90 seconds before "
        "it gives up ('Failed to create client after 20 retries')."
    ),
    remedy=(
        "Start mooncake_master there (it ships with the Mooncake wheel), check "
        "mooncake.master (HOST:PORT) and the firewall; on one machine set mooncake.master: "
        "local to let initorch start and stop one."
    ),
    prevention=(
        "The mooncake_master step probes the address with mooncake.master_connect_timeout_s "
        "before the store is set up, so the failure is immediate."
    ),
    pattern=r"\bcannot reach the Mooncake master at\b|\bFailed to create client after \d+ retries",
)

# transfer_metadata_plugin.cpp:1099 (0.3.13): the socket handshake resolves a peer's host
# as IPv4 unless MC_USE_IPV6 is set (the variable is in engine.so and store.so; two ranks on
# [::1] with MC_USE_IPV6=1 move their warm-up bytes here).
IPV6_PEER_UNRESOLVED = Diagnosis(
    id="mooncake-ipv6-peer-unresolved",
    title="Mooncake's P2P handshake could not resolve an IPv6 peer",
    cause=(
        "A store client or engine has an IPv6 address ([::1], or the address towards an "
        "IPv6 rendezvous), and Mooncake's socket handshake resolves peers as IPv4 unless "
        "MC_USE_IPV6 is set, so it cannot open the peer's segment: puts and gets then fail "
        "(-800, TRANSFER_FAIL)."
    ),
    remedy=(
        "Set MC_USE_IPV6=1 for every rank (in the profile's env:, or the environment), or "
        "give Mooncake IPv4 addresses (mooncake.hostname, mooncake.store.hostname, "
        "MASTER_ADDR)."
    ),
    prevention="Put MC_USE_IPV6: \"1\" in the env: of the profile used on IPv6 networks.",
    pattern=r"\bSocketHandShakePlugin: failed to get IP address of peer server\b",
)

STORE_SETUP_FAILED = Diagnosis(
    id="mooncake-store-setup-failed",
    title="MooncakeDistributedStore.setup returned an error",
    cause=(
        "The store client could not start: its transfer engine failed to install a "
        "transport (the protocol's, since the store does not auto-discover for tcp), the "
        "global segment could not be allocated or mounted, or the metadata server did not "
        "answer. Mooncake logs the reason before the error code."
    ),
    remedy=(
        _READ_NATIVE_LOG + " Check mooncake.store.metadata_server, the protocol "
        "(device.mooncake_protocol) and mooncake.store.global_segment_mb against free host "
        "memory."
    ),
    prevention=(
        "Keep the store settings from the profile (SGLang's defaults: P2PHANDSHAKE, 16 MiB "
        "local buffer) and reuse the shared engine where SGLang does (rdma)."
    ),
    pattern=r"Failed to setup Mooncake store, error code: (?P<code>-?\d+)",
)

STORE_REGISTER_FAILED = Diagnosis(
    id="mooncake-store-register-failed",
    title="register_buffer of the host pool with the Mooncake Store failed",
    cause=(
        "The store's transfer engine refused the memory (-600 is INVALID_PARAMS, what "
        "Client::RegisterLocalMemory returns for any engine failure): on the ascend-direct "
        "build the registering thread has no device context (aclrtGetDevice at "
        "registration), on RDMA the memlock limit is too low for ibv_reg_mr, or the range "
        "overlaps a buffer registered before."
    ),
    remedy=(
        _READ_NATIVE_LOG + " Register from a thread where set_device ran; raise the "
        "memlock limit (ulimit -l unlimited); register each buffer once."
    ),
    prevention=(
        "register_mem_pool_host is device_bound and its teardown unregisters the pool, so a "
        "retry starts clean."
    ),
    pattern=r"Failed to register buffer to Mooncake Store, error code: (?P<code>-?\d+)",
)

TRANSFER_SUBMIT_FAILED = Diagnosis(
    id="mooncake-transfer-submit-failed",
    title="The Mooncake Store could not submit a transfer",
    cause=(
        "A put or get reached the store's transfer engine, which refused the batch "
        "(transfer_task.cpp:1252 TransferSubmitter::submitTransfer, Mooncake 0.3.13). "
        "Mooncake prints the status code by name (status.cpp CodeToString): 'Context' is "
        "what the ascend-direct build returns when the submitting thread has no device "
        "context (ascend_direct_transport.cpp:270 'aclrtGetDevice failed'); "
        "'AddressNotRegistered' and 'InvalidArgument' mean a buffer or a peer segment the "
        "engine does not know; 'TooManyRequests' a full batch."
    ),
    remedy=_READ_NATIVE_LOG + " Submit from a thread where set_device ran; check that every "
    "rank's store registered its buffers with the same master and protocol.",
    prevention=(
        "verify_transfer is device_bound and proves a put/get round trip between ranks "
        "before the server serves."
    ),
    # The code is a name (Status::Code printed through CodeToString), never a number.
    pattern=r"\bFailed to submit all transfers, error code is (?P<code>[A-Z][A-Za-z]*)",
)
