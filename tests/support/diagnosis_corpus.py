"""What the real stacks print when start-up fails, each sample tied to where it comes from.

Every built-in diagnosis pattern alternative must be backed by a sample here
(``tests/unit/steps/test_diagnoses.py``).  A sample is an upstream message with its
format arguments filled in, and it carries its *origins*: where each literal
part of the message is written.  The test reads every origin from the real
artifact and checks each quote there, and it checks that the text the diagnosis
matches is made of those quotes and of the declared ``args`` (the filled-in
values: a code, a port, a protocol name, an OS error text), so that an invented
sample fails:

* ``InWheel``: a member of a published wheel (bytes of a binary or a Python file),
  downloaded with ``tests/support/wheels.py``;
* ``NeededBy``: the library name is a ``DT_NEEDED`` entry of a wheel's binary
  (``readelf -d``);
* ``InSGLang``: the SGLang 0.5.23 source at ``file:line`` (the unpacked wheel);
* ``InTorch``: a file of the installed torch 2.13.0 (its binaries or Python);
* ``Raised``: CPython/torch raise it here when the statement runs;
* ``InMooncakeSource``: a Mooncake git tag no published wheel of which has the
  text (only the legacy HCCL build, the ``<= 0.3.10`` ascend-direct wording);
  checked against a Mooncake git directory given as ``INITORCH_MOONCAKE_GIT``;
* ``Unverifiable``: nothing downloadable has it (CANN), said so;
* ``InInitorch``: initorch's own wording for failures it detects itself.

A quote may contain ``{}`` for a format field: it stands for ``{}`` in fmt/glog
format strings, and for any ``{...}`` field in Python f-strings.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal

from tests.support.wheels import (
    MOONCAKE_CPU,
    MOONCAKE_CUDA12,
    MOONCAKE_CUDA13,
    MOONCAKE_NPU,
)

Via = Literal["message", "native_log"]


@dataclass(frozen=True, slots=True)
class InWheel:
    dist: tuple[str, str]
    member: str
    quotes: tuple[str, ...]

    def __str__(self) -> str:
        return f"{self.dist[0]} {self.dist[1]} {self.member}"


@dataclass(frozen=True, slots=True)
class NeededBy:
    dist: tuple[str, str]
    member: str
    quotes: tuple[str, ...]

    def __str__(self) -> str:
        return f"{self.dist[0]} {self.dist[1]} {self.member} DT_NEEDED"


@dataclass(frozen=True, slots=True)
class InSGLang:
    path: str
    line: int
    quotes: tuple[str, ...]

    def __str__(self) -> str:
        return f"sglang 0.5.23 python/sglang/{self.path}:{self.line}"


@dataclass(frozen=True, slots=True)
class InTorch:
    path: str
    quotes: tuple[str, ...]

    def __str__(self) -> str:
        return f"torch 2.13.0 torch/{self.path}"


@dataclass(frozen=True, slots=True)
class Raised:
    statement: str
    quotes: tuple[str, ...]
    site: bool = True  # False: run without site-packages (python -S)

    def __str__(self) -> str:
        return f"CPython 3.11 / torch 2.13.0: {self.statement}"


@dataclass(frozen=True, slots=True)
class InMooncakeSource:
    tag: str
    path: str
    line: int
    quotes: tuple[str, ...]

    def __str__(self) -> str:
        return f"kvcache-ai/Mooncake {self.tag} {self.path}:{self.line}"


@dataclass(frozen=True, slots=True)
class Unverifiable:
    what: str
    quotes: tuple[str, ...]

    def __str__(self) -> str:
        return f"unverifiable here: {self.what}"


@dataclass(frozen=True, slots=True)
class InInitorch:
    path: str
    quotes: tuple[str, ...]

    def __str__(self) -> str:
        return f"initorch {self.path}"


Origin = (InWheel | NeededBy | InSGLang | InTorch | Raised | InMooncakeSource | Unverifiable
          | InInitorch)


@dataclass(frozen=True, slots=True)
class Sample:
    text: str
    expected: str
    origins: tuple[Origin, ...]
    args: tuple[str, ...] = ()
    via: Via = "message"
    code: str | None = None

    @property
    def upstream(self) -> bool:
        return not all(isinstance(origin, InInitorch) for origin in self.origins)

    @property
    def source(self) -> str:
        return "; ".join(str(origin) for origin in self.origins)


def glog(level: str, where: str, message: str) -> str:
    """A glog line as Mooncake prints it: ``Lmmdd hh:mm:ss.uuuuuu tid file:line] msg``."""
    return f"{level}1130 04:51:12.101877 48213 {where}] {message}"


def sample(text: str, expected: str, *origins: Origin, args: tuple[str, ...] = (),
           via: Via = "message", code: str | None = None) -> Sample:
    return Sample(text, expected, origins, args, via, code)


NO_SUCH_FILE = ": cannot open shared object file: No such file or directory"  # glibc dlerror
DLERROR = (NO_SUCH_FILE,)
ASCEND_DIRECT = "mooncake-transfer-engine/src/transport/ascend_transport/ascend_direct_transport/"
HCCL = "mooncake-transfer-engine/src/transport/ascend_transport/hccl_transport/"
TORCH_NPU = ("torch-npu", "2.14.0")
CORPUS: tuple[Sample, ...] = (
    # -- Ascend device context ------------------------------------------------------------
    sample(glog("E", "ascend_direct_transport.cpp:559", "Call aclrtGetDevice failed, ret: 107002"),
           "ascend-context-null",
           InMooncakeSource("v0.3.10", ASCEND_DIRECT + "ascend_direct_transport.cpp", 559,
                            ("Call aclrtGetDevice failed, ret: ",)),
           args=("107002",), via="native_log", code="107002"),
    sample(glog("E", "hccl_transport.cpp:323", "HcclTransport: aclrtGetDevice failed, ret: 107002"),
           "ascend-context-null",
           InMooncakeSource("v0.3.12.post1", HCCL + "hccl_transport.cpp", 323,
                            ("HcclTransport: aclrtGetDevice failed, ret: ",)),
           args=("107002",), via="native_log", code="107002"),
    sample("[Get][Device]errNo[0x0000000005000004] rtGet device fail, please make sure that "
           "device is set. return[107002], para:deviceLogicId[0]", "ascend-context-null",
           Unverifiable("CANN 8.x HCCL hrtGetDevice log (the CANN toolkit is not downloadable; "
                        "errNo varies by release)",
                        ("rtGet device fail, please make sure that device is set. return[",)),
           args=("107002",), via="native_log", code="107002"),
    sample(glog("E", "ascend_direct_transport.cpp:44",
                "aclrtGetDevice failed, errmsg: <aclGetRecentErrMsg() text>"),
           "ascend-context-null",
           InWheel(MOONCAKE_NPU, "mooncake/ascend_transport.so",
                   ("aclrtGetDevice failed, errmsg: ",)), via="native_log"),
    sample(glog("E", "ascend_direct_transport.cpp:244",
                "Call acl failed, detail: <aclGetRecentErrMsg() text>"),
           "ascend-acl-call-failed",
           InWheel(MOONCAKE_NPU, "mooncake/ascend_transport.so", ("Call acl failed, ", "detail: ")),
           via="native_log"),
    # -- Mooncake transports ------------------------------------------------------------------
    sample("\n".join([
        glog("E", "multi_transport.cpp:533",
             "Unsupported transport ascend, please rebuild Mooncake"),
        glog("E", "client_service.cpp:940", "Failed to install ascend transport"),
        glog("E", "client_service.cpp:1120", "Failed to initialize transfer engine")]),
        "mooncake-unsupported-transport",
        InWheel(MOONCAKE_CPU, "mooncake/store.so",
                ("Unsupported transport ", ", please rebuild Mooncake", "Failed to install ",
                 " transport", "Failed to initialize transfer engine")),
        args=("ascend",), via="native_log"),
    sample(glog("E", "client_service.cpp:1000", "unsupported_protocol protocol=nvlink"),
           "mooncake-unsupported-transport",
           InWheel(MOONCAKE_CPU, "mooncake/store.so", ("unsupported_protocol protocol=",)),
           args=("nvlink",), via="native_log"),
    sample(glog("E", "transfer_engine_impl.cpp:230", "Failed to install Ascend transport"),
           "mooncake-ascend-transport-failed",
           InWheel(MOONCAKE_NPU, "mooncake/libtransfer_engine.so",
                   ("Failed to install Ascend transport",)), via="native_log"),
    sample(glog("E", "client_service.cpp:940", "Failed to install ascend transport"),
           "mooncake-ascend-transport-failed",
           InWheel(MOONCAKE_NPU, "mooncake/libmooncake_store.so", ("Failed to install ",)),
           InWheel(MOONCAKE_CPU, "mooncake/store.so", (" transport",)),
           args=("ascend",), via="native_log"),
    # -- host memory ------------------------------------------------------------------------
    sample("'NoneType' object has no attribute 'cudaHostRegister'",
           "cuda-host-register-on-non-cuda",
           Raised("None.cudaHostRegister",
                  ("'NoneType' object has no attribute 'cudaHostRegister'",)),
           InSGLang("srt/mem_cache/pool_host/common.py", 178, ("cudaHostRegister",))),
    sample("cudaHostRegister failed (rc=712, part or all of the requested memory range is "
           "already mapped) at offset=0 size=68719476736 (total=68719476736, "
           "chunk_limit=68719476736); host buffer is not pinned and device transfers may "
           "silently return stale data.", "cuda-host-register-already-registered",
           InSGLang("srt/mem_cache/pool_host/common.py", 181,
                    ("cudaHostRegister failed (rc={}, ",)),
           args=("712",), code="712"),
    sample("cudaHostRegister failed (rc=2, out of memory) at offset=0 size=68719476736 "
           "(total=68719476736, chunk_limit=68719476736); host buffer is not pinned and device "
           "transfers may silently return stale data.", "cuda-host-register-failed",
           InSGLang("srt/mem_cache/pool_host/common.py", 181,
                    ("cudaHostRegister failed (rc={}, ",)),
           args=("2",), code="2"),
    sample("cudaHostRegister(ptr=0x7f3a2c000000, nbytes=67108864) failed with error 712",
           "cuda-host-register-already-registered",
           InInitorch("steps/host_pool.py",
                      ("cudaHostRegister(ptr={}, nbytes={}) failed with error {}",)),
           args=("0x7f3a2c000000", "67108864", "712"), code="712"),
    sample("Pinned host memory allocation of 64.0 GiB (68719476736 bytes) returned a null "
           "pointer", "pinned-host-alloc-null",
           InSGLang("srt/mem_cache/pool_host/common.py", 391,
                    ("Pinned host memory allocation of {} GiB ({} bytes) returned a null "
                     "pointer",)),
           args=("64.0", "68719476736")),
    sample("Not enough host memory available. Requesting 137.44 GB but only have 98.21 GB free. "
           "Please reduce the size of the hierarchical cache.", "host-pool-over-budget",
           InSGLang("srt/mem_cache/pool_host/base.py", 253,
                    ("Not enough host memory available. Requesting {} GB but only have {} GB free. "
                     "Please reduce the size of the hierarchical cache.",)),
           args=("137.44", "98.21")),
    sample("MooncakeHostMemAllocator.alloc(68719476736): Failed to create anonymous shared "
           "memory: Cannot allocate memory", "mooncake-host-alloc-failed",
           InWheel(MOONCAKE_CPU, "mooncake/store.so",
                   ("Failed to create anonymous shared memory",)),
           InInitorch("steps/host_pool.py", ("MooncakeHostMemAllocator.alloc({}): {}",)),
           args=(": Cannot allocate memory",)),  # strerror(ENOMEM), shm_helper.cpp:112-114
    sample("MooncakeHostMemAllocator.alloc returned a null pointer for 64.000 GB "
           "(68719476736 bytes); the mooncake host memory allocator could not map the "
           "segment (check host memory availability and the mooncake allocator logs).",
           "mooncake-host-alloc-failed",
           InSGLang("srt/mem_cache/storage/mooncake_store/mooncake_store.py", 59,
                    ("MooncakeHostMemAllocator.alloc returned a null pointer for {} GB ({} "
                     "bytes); the mooncake host memory allocator could not map the segment "
                     "(check host memory availability and the mooncake allocator logs).",))),
    sample("Mooncake layer_first multi-buffer is only supported for MLA host KV pool. Use "
           "page_first/page_first_direct for MHA.", "host-pool-layout-unsupported",
           InSGLang("srt/mem_cache/storage/mooncake_store/mooncake_store.py", 1321,
                    ("Mooncake layer_first multi-buffer is only supported for MLA host KV pool. "
                     "Use page_first/page_first_direct for MHA.",))),
    sample("Unsupported layout: page_first_kv_spilt", "host-pool-layout-unsupported",
           InSGLang("srt/mem_cache/memory_pool_host.py", 339, ("Unsupported layout: {}",)),
           args=("page_first_kv_spilt",)),
    sample("host pool layout 'layer_frist' is not one of SGLang's layouts",
           "host-pool-layout-unsupported",
           InInitorch("steps/kv_layout.py",
                      ("host pool layout '{}' is not one of SGLang's layouts",)),
           args=("layer_frist",)),
    # -- libraries and packages ---------------------------------------------------------------
    *(sample(f"lib{name}.so{NO_SUCH_FILE}", "ascend-cann-not-loaded",
             NeededBy(TORCH_NPU, "torch_npu/lib/libtensorpipe.so",
                      (f"lib{name}.so",)), args=DLERROR)
      for name in ("hccl", "ascendcl", "acl_op_compiler", "ge_runner", "graph", "acl_tdt_channel")),
    sample(f"libatb.so{NO_SUCH_FILE}", "ascend-cann-not-loaded",
           NeededBy(TORCH_NPU, "torch_npu/lib/libop_plugin_atb.so", ("libatb.so",)), args=DLERROR),
    *(sample(f"{name}{NO_SUCH_FILE}", "libibverbs-missing",
             NeededBy(MOONCAKE_CPU, "mooncake/engine.so", (name,)), args=DLERROR)
      for name in ("libibverbs.so.1", "libnuma.so.1", "libcurl.so.4")),
    sample(f"libcurl.so.4{NO_SUCH_FILE}", "libibverbs-missing",
           NeededBy(MOONCAKE_NPU, "mooncake/libtransfer_engine.so",
                    ("libcurl.so.4",)), args=DLERROR),
    sample(f"libmlx5.so.1{NO_SUCH_FILE}", "libibverbs-missing",
           NeededBy(MOONCAKE_CUDA12, "mooncake/engine.so", ("libmlx5.so.1",)), args=DLERROR),
    sample(f"libcuda.so.1{NO_SUCH_FILE}", "mooncake-cuda-build-without-driver",
           NeededBy(MOONCAKE_CUDA12, "mooncake/engine.so", ("libcuda.so.1",)), args=DLERROR),
    sample(f"libcudart.so.12{NO_SUCH_FILE}", "mooncake-cuda-runtime-missing",
           NeededBy(MOONCAKE_CUDA12, "mooncake/engine.so", ("libcudart.so.12",)), args=DLERROR),
    sample(f"libcudart.so.13{NO_SUCH_FILE}", "mooncake-cuda-runtime-missing",
           NeededBy(MOONCAKE_CUDA13, "mooncake/engine.so", ("libcudart.so.13",)), args=DLERROR),
    sample("Expected one of cpu, cuda, ipu, xpu, mkldnn, opengl, opencl, ideep, hip, ve, fpga, "
           "maia, xla, lazy, vulkan, mps, meta, hpu, mtia, privateuseone device type at start "
           "of device string: npu", "torch-device-backend-not-loaded",
           Raised("import torch; torch.device('npu')",
                  ("device type at start of device string: npu",))),
    sample("module 'torch' has no attribute 'npu'", "torch-device-backend-not-loaded",
           Raised("import torch; torch.npu", ("module 'torch' has no attribute 'npu'",))),
    sample("No module named 'torch_musa'", "torch-device-backend-not-loaded",
           Raised("import torch_musa", ("No module named 'torch_musa'",))),
    sample("Mooncake PG was not built against torch==2.13.0.\nOpen an issue at "
           "https://github.com/kvcache-ai/Mooncake/issues.", "mooncake-pg-missing-build",
           InWheel(MOONCAKE_CPU, "mooncake/pg.py", ("Mooncake PG was not built against torch==",)),
           args=("2.13.0",)),
    sample("Failed to import 'set_transfer_engine' from 'mooncake.pg'. Please upgrade your "
           "'mooncake-transfer-engine' installation to 0.3.11 or above.",
           "mooncake-pg-missing-build",
           InSGLang("srt/distributed/device_communicators/mooncake_transfer_engine.py", 362,
                    ("Failed to import 'set_transfer_engine' from 'mooncake.pg'. Please upgrade "
                     "your 'mooncake-transfer-engine' installation to 0.3.11 or above.",))),
    sample("Mooncake PG JIT requires Ninja to compile the Torch adapter. Install it with "
           "`python -m pip install ninja`.", "mooncake-pg-jit-failed",
           InWheel(MOONCAKE_CUDA13, "mooncake/pg.py",
                   ("Mooncake PG JIT requires Ninja to compile the Torch adapter. ",))),
    sample("Mooncake PG Torch adapter JIT compilation failed: Error building extension "
           "'_mooncake_pg_jit_cuda'", "mooncake-pg-jit-failed",
           InWheel(MOONCAKE_CUDA13, "mooncake/pg.py",
                   ("Mooncake PG Torch adapter JIT compilation failed: ",
                    "_mooncake_pg_jit_cuda")),
           InTorch("utils/cpp_extension.py", ("Error building extension '{}'",))),
    sample("Mooncake PG CUDA JIT is running without a visible CUDA device. Set "
           "TORCH_CUDA_ARCH_LIST to a compatible architecture (for example, 8.0)",
           "mooncake-pg-jit-failed",
           InWheel(MOONCAKE_CUDA13, "mooncake/pg.py",
                   ("Mooncake PG CUDA JIT is running without a visible CUDA device. ",))),
    sample("No module named 'mooncake'", "mooncake-not-installed",
           Raised("import mooncake", ("No module named 'mooncake'",), site=False)),
    sample("Numpy is not available", "numpy-missing",
           InTorch("lib/libtorch_python.so", ("Numpy is not available",))),
    *(sample(f"Unknown backend type {name}", "collective-backend-not-registered",
             InTorch("distributed/distributed_c10d.py", ("Unknown backend type {}",)),
             args=(name,))
      for name in ("mooncake", "mooncake-cpu", "mccl", "hccl")),
    # -- the engine -------------------------------------------------------------------------
    sample("the profile means Mooncake transport 'tcp', but Mooncake installed rdma; set "
           "MC_FORCE_TCP=1 in the profile's env: to force TCP", "mooncake-transport-mismatch",
           InInitorch("steps/transports.py", ("the profile means Mooncake transport '{}', but "
                                              "Mooncake installed ",)),
           args=("tcp",)),
    sample("Mooncake TransferEngine.initialize('10.0.0.5', 'rdma', 'mlx5_0') did not return "
           "within 120s on node-3", "mooncake-engine-init-deadline",
           InSGLang("srt/distributed/device_communicators/mooncake_transfer_engine.py", 219,
                    ("Mooncake TransferEngine.initialize({}, {}, {})",)),
           InSGLang("srt/utils/common.py", 3771, ("{} did not return within {}s on {}",)),
           args=("'10.0.0.5'", "'rdma'", "'mlx5_0'")),
    sample("Mooncake Transfer Engine initialization failed.", "mooncake-engine-init-failed",
           InSGLang("srt/distributed/device_communicators/mooncake_transfer_engine.py", 223,
                    ("Mooncake Transfer Engine initialization failed.",))),
    sample(glog("E", "transfer_engine_impl.cpp:425", "Failed to install transport, type=rdma"),
           "mooncake-engine-init-failed",
           InWheel(MOONCAKE_CPU, "mooncake/engine.so", ("Failed to install transport, type=",)),
           args=("rdma",), via="native_log"),
    sample(glog("E", "transfer_engine_impl.cpp:384", "Failed to install RDMA transport"),
           "mooncake-engine-init-failed",
           InWheel(MOONCAKE_CUDA12, "mooncake/engine.so", ("Failed to install RDMA transport",)),
           via="native_log"),
    sample("TransferEngine.initialize('127.0.0.1', 'P2PHANDSHAKE', 'rdma', 'mlx5_0') returned -1",
           "mooncake-engine-init-failed",
           InInitorch("steps/transfer_engine.py", ("TransferEngine.{}({}) returned {}",)),
           args=("initialize", "'127.0.0.1', 'P2PHANDSHAKE', 'rdma', 'mlx5_0'", "-1"), code="-1"),
    # -- the master and the store --------------------------------------------------------------
    sample(glog("E", "real_client.cpp:865", "Failed to create client after 20 retries"),
           "mooncake-master-unreachable",
           InWheel(MOONCAKE_CPU, "mooncake/store.so",
                   ("Failed to create client after ", " retries")),
           args=("20",), via="native_log"),
    sample("cannot reach the Mooncake master at 10.0.0.9:50051: [Errno 111] Connection refused",
           "mooncake-master-unreachable",
           InInitorch("steps/mooncake_master.py", ("cannot reach the Mooncake master at {}: {}",))),
    sample(glog("E", "transfer_metadata_plugin.cpp:1099",
                "SocketHandShakePlugin: failed to get IP address of peer server ::1:16768, "
                "check DNS and /etc/hosts, or use IPv4 address instead: Success [0]"),
           "mooncake-ipv6-peer-unresolved",
           InWheel(MOONCAKE_CPU, "mooncake/store.so",
                   ("SocketHandShakePlugin: failed to get IP address of peer server ",
                    ", check DNS and /etc/hosts, or use IPv4 address instead")),
           args=("::1:16768", ": Success [0]"), via="native_log"),
    sample("Failed to setup Mooncake store, error code: -1", "mooncake-store-setup-failed",
           InSGLang("srt/mem_cache/storage/mooncake_store/mooncake_store.py", 604,
                    ("Failed to setup Mooncake store, error code: {}",)),
           args=("-1",), code="-1"),
    sample("Failed to register buffer to Mooncake Store, error code: -600",
           "mooncake-store-register-failed",
           InSGLang("srt/mem_cache/storage/mooncake_store/mooncake_store.py", 358,
                    ("Failed to register buffer to Mooncake Store, error code: {}",)),
           args=("-600",), code="-600"),
    # The code is printed by name (status.cpp CodeToString); "Context" is what the
    # ascend-direct build returns without a device context (ascend_direct_transport.cpp:270).
    sample(glog("E", "transfer_task.cpp:1252",
                "Failed to submit all transfers, error code is Context"),
           "mooncake-transfer-submit-failed",
           InWheel(MOONCAKE_NPU, "mooncake/libmooncake_store.so",
                   ("Failed to submit all transfers, error code is ",)),
           InWheel(MOONCAKE_NPU, "mooncake/libtransfer_engine.so", ("Context",)),
           via="native_log", code="Context"),
    # -- torch.distributed ------------------------------------------------------------------
    sample("The server socket has failed to listen on any local network address. port: 29500, "
           "useIpv6: false, code: -98, name: EADDRINUSE, message: address already in use",
           "master-port-in-use",
           InTorch("lib/libtorch_cpu.so", ("The server socket has failed to listen on any local "
                                           "network address. port: {}, useIpv6: {}, code: {}, "
                                           "name: {}, message: {}",)),
           args=("29500", "false", "-98", "EADDRINUSE")),
    sample("The server socket has failed to listen on any local network address. The server "
           "socket has failed to bind to [::]:29500 (errno: 98 - Address already in use). The "
           "server socket has failed to bind to 0.0.0.0:29500 (errno: 98 - Address already in "
           "use).", "master-port-in-use",
           InTorch("lib/libtorch_cpu.so", ("The server socket has failed to listen on any local "
                                           "network address.", "The server socket has failed to "
                                           "bind to {} {}.", "({}: {} - {})")),
           # ({category}: {errno} - {strerror}) of a std::error_code (c10d socket.cpp)
           args=(" ", "[::]:29500", "0.0.0.0:29500", "errno", "98", "Address already in use")),
    sample("[Errno 98] Address already in use", "port-in-use",
           Raised("import socket; a = socket.socket(); a.bind(('127.0.0.1', 0)); a.listen(); "
                  "b = socket.socket(); b.bind(a.getsockname())",
                  ("[Errno 98] Address already in use",))),
    sample("The client socket has failed to connect to any network address of (127.0.0.1, "
           "29500). The client socket has failed to connect to [localhost]:29500 (errno: 111 - "
           "Connection refused).", "rendezvous-connect-failed",
           InTorch("lib/libtorch_cpu.so", ("The client socket has failed to connect to any "
                                           "network address of ({}, {}).",
                                           "The client socket has failed to connect to {} {}.",
                                           "({}: {} - {})")),
           args=(" ", "127.0.0.1", "29500", "[localhost]:29500", "errno", "111",
                 "Connection refused"),
           code="111"),
    sample("The connection to the C10d store has failed. See inner exception for details.",
           "rendezvous-connect-failed",
           InTorch("distributed/elastic/rendezvous/c10d_rendezvous_backend.py",
                   ("The connection to the C10d store has failed. See inner exception for "
                    "details.",))),
    sample("rendezvous tcp://10.0.0.1:29500: reaching the job's store failed: The client socket "
           "has failed to connect to any network address of (10.0.0.1, 29500).",
           "rendezvous-connect-failed",
           InInitorch("steps/rendezvous.py", ("rendezvous {}: {} the job's store failed: {}",)),
           InTorch("lib/libtorch_cpu.so", ("The client socket has failed to connect to any "
                                           "network address of ({}, {}).",))),
    sample("Timed out after 901 seconds waiting for clients. 1/2 clients joined.",
           "process-group-timeout",
           InTorch("lib/libtorch_cpu.so",
                   ("Timed out after {} seconds waiting for clients. {}/{} clients joined.",)),
           args=("901", "1", "2")),
    sample("wait timeout after 300000ms, keys: /default_pg/0//cpu//0", "process-group-timeout",
           InTorch("lib/libtorch_cpu.so", ("wait timeout after {}ms, keys: {}",)),
           args=("300000",)),
    sample("Timed out initializing process group in store based barrier on rank 1, for key: "
           "store_based_barrier_key:1 (world_size=2, num_workers_joined=1, timeout=0:30:00 "
           "error=Socket Timeout)", "process-group-timeout",
           InTorch("distributed/distributed_c10d.py",
                   ("Timed out initializing process group in store based barrier on rank {}, "
                    "for key: {} (world_size={}, num_workers_joined={}, timeout={} error={})",))),
    sample("The client socket has timed out after 600000ms while trying to connect to "
           "(10.0.0.1, 29500).", "process-group-timeout",
           InTorch("lib/libtorch_cpu.so", ("The client socket has timed out after {} while trying "
                                           "to connect to ({}, {}).",)),
           args=("600000ms",)),
    sample("Socket Timeout", "process-group-timeout",
           InTorch("lib/libtorch_cpu.so", ("Socket Timeout",))),
    sample("The memory capacity is unbalanced. Some GPUs may be occupied by other processes. "
           "pre_model_load_memory=12.5, local_gpu_memory=60.1, local_gpu_memory * 0.9=54.09",
           "tp-memory-unbalanced",
           InSGLang("srt/distributed/bootstrap.py", 445,
                    ("The memory capacity is unbalanced. Some GPUs may be occupied by other "
                     "processes. ",))),
)
