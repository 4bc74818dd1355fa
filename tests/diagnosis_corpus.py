"""What the real stacks print when start-up fails, each sample labelled with its source.

Every built-in diagnosis pattern alternative must be backed by a sample here
(``tests/test_diagnosis_corpus.py`` checks it); a sample is the upstream message
with its format arguments filled in.  ``source`` names the upstream file, line
and version it comes from, or says how it was observed; ``via`` says how the
text reaches initorch: as an exception message, or as a glog line that native
code wrote to fd 2 while a step ran (captured into ``native_log``).

Versions: SGLang 0.5.23 (wheel); Mooncake main at 3b5a594 (2026-08-22, tags
v0.3.10 / v0.3.12.post1 where named) and the installed
mooncake-transfer-engine-non-cuda 0.3.13.post1; torch 2.13.0; torch_npu 2.14.0.
Samples marked "initorch" are initorch's own wording for failures it detects
itself; they are kept apart because they cannot prove that an entry matches what
another stack prints.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal

Via = Literal["message", "native_log"]


@dataclass(frozen=True, slots=True)
class Sample:
    text: str
    expected: str
    source: str
    via: Via = "message"
    code: str | None = None

    @property
    def upstream(self) -> bool:
        return not self.source.startswith("initorch ")


def glog(level: str, where: str, message: str) -> str:
    """A glog line as Mooncake prints it: ``Lmmdd hh:mm:ss.uuuuuu tid file:line] msg``."""
    return f"{level}1130 04:51:12.101877 48213 {where}] {message}"


MOONCAKE = "kvcache-ai/Mooncake main@3b5a594"
OBSERVED = "observed here with mooncake-transfer-engine-non-cuda 0.3.13.post1"
SGLANG = "sglang 0.5.23 python/sglang/srt"
NO_SUCH_FILE = "cannot open shared object file: No such file or directory"
TORCH_NPU_NEEDED = ("torch_npu 2.14.0 wheel, lib/libtorch_npu.so DT_NEEDED (readelf -d); "
                    "glibc dlerror")

CORPUS: tuple[Sample, ...] = (
    # -- Ascend device context ------------------------------------------------------------
    Sample(glog("E", "ascend_direct_transport.cpp:559", "Call aclrtGetDevice failed, ret: 107002"),
           "ascend-context-null", "kvcache-ai/Mooncake v0.3.10 mooncake-transfer-engine/src/"
           "transport/ascend_transport/ascend_direct_transport/ascend_direct_transport.cpp:559",
           "native_log", "107002"),
    Sample(glog("E", "hccl_transport.cpp:323", "HcclTransport: aclrtGetDevice failed, ret: 107002"),
           "ascend-context-null", "kvcache-ai/Mooncake v0.3.12.post1 mooncake-transfer-engine/src/"
           "transport/ascend_transport/hccl_transport/hccl_transport.cpp:323 (rankInfoParse)",
           "native_log", "107002"),
    Sample("[Get][Device]errNo[0x0000000005000004] rtGet device fail, please make sure that "
           "device is set. return[107002], para:deviceLogicId[0]",
           "ascend-context-null", "CANN 8.x HCCL hrtGetDevice (hicann/hccl platform adapter; errNo "
           "value depends on the release)", "native_log", "107002"),
    Sample(glog("E", "ascend_direct_transport.cpp:44",
                "aclrtGetDevice failed, errmsg: <aclGetRecentErrMsg() text>"),
           "ascend-context-null", f"{MOONCAKE} mooncake-transfer-engine/src/transport/"
           "ascend_transport/ascend_direct_transport/ascend_direct_transport.cpp:44",
           "native_log"),
    Sample(glog("E", "ascend_direct_transport.cpp:244",
                "Call acl failed, detail: <aclGetRecentErrMsg() text>"),
           "ascend-acl-call-failed", f"{MOONCAKE} ascend_direct_transport/utils.h:36 CHECK_ACL, "
           "expanded at ascend_direct_transport.cpp:244 (allocateLocalSegmentID, engine init)",
           "native_log"),
    Sample(glog("E", "ascend_direct_transport.cpp:80",
                "Call acl failed, detail: <aclGetRecentErrMsg() text>"),
           "ascend-acl-call-failed", f"{MOONCAKE} utils.h:36 CHECK_ACL, expanded at "
           "ascend_direct_transport.cpp:80 (StampBufferDeviceId, memory registration)",
           "native_log"),
    # -- Mooncake transports ------------------------------------------------------------------
    Sample("\n".join([
        glog("E", "multi_transport.cpp:533",
             "Unsupported transport ascend, please rebuild Mooncake"),
        glog("E", "client_service.cpp:940", "Failed to install ascend transport"),
        glog("E", "client_service.cpp:1120", "Failed to initialize transfer engine")]),
        "mooncake-unsupported-transport", f"{OBSERVED}: MooncakeDistributedStore.setup(..., "
        "'ascend', ...) against a running master", "native_log"),
    Sample(glog("E", "client_service.cpp:1000", "unsupported_protocol protocol=nvlink"),
           "mooncake-unsupported-transport",
           f"{MOONCAKE} mooncake-store/src/client_service.cpp:1000",
           "native_log"),
    Sample(glog("E", "transfer_engine_impl.cpp:230", "Failed to install Ascend transport"),
           "mooncake-ascend-transport-failed", f"{MOONCAKE} mooncake-transfer-engine/src/"
           "transfer_engine_impl.cpp:230 (init, Ascend builds)", "native_log"),
    Sample(glog("E", "client_service.cpp:940", "Failed to install ascend transport"),
           "mooncake-ascend-transport-failed",
           f"{MOONCAKE} mooncake-store/src/client_service.cpp:940 (InitTransferEngine, npu build)",
           "native_log"),
    # -- host memory ------------------------------------------------------------------------
    Sample("'NoneType' object has no attribute 'cudaHostRegister'",
           "cuda-host-register-on-non-cuda", f"CPython 3.11 AttributeError at {SGLANG}/mem_cache/"
           "pool_host/common.py:178 cudart.cudaHostRegister when torch.cuda.cudart() is None "
           "(MUSA)"),
    Sample("cudaHostRegister failed (rc=712, part or all of the requested memory range is "
           "already mapped) at offset=0 size=68719476736 (total=68719476736, "
           "chunk_limit=68719476736); host buffer is not pinned and device transfers may "
           "silently return stale data.", "cuda-host-register-already-registered",
           f"{SGLANG}/mem_cache/pool_host/common.py:181 (_cuda_host_register)", code="712"),
    Sample("cudaHostRegister failed (rc=2, out of memory) at offset=0 size=68719476736 "
           "(total=68719476736, chunk_limit=68719476736); host buffer is not pinned and device "
           "transfers may silently return stale data.", "cuda-host-register-failed",
           f"{SGLANG}/mem_cache/pool_host/common.py:181 (_cuda_host_register)", code="2"),
    Sample("cudaHostRegister(ptr=0x7f3a2c000000, nbytes=67108864) failed with error 712",
           "cuda-host-register-already-registered",
           "initorch steps/host_pool.py _cuda_host_register", code="712"),
    Sample("Pinned host memory allocation of 64.0 GiB (68719476736 bytes) returned a null "
           "pointer", "pinned-host-alloc-null",
           f"{SGLANG}/mem_cache/pool_host/common.py:392 (alloc_with_pin_memory_xpu)"),
    Sample("Mooncake layer_first multi-buffer is only supported for MLA host KV pool. Use "
           "page_first/page_first_direct for MHA.", "host-pool-layout-unsupported",
           f"{SGLANG}/mem_cache/storage/mooncake_store/mooncake_store.py:1321 "
           "(_get_mha_buffer_meta)"),
    Sample("Unsupported layout: page_first_kv_spilt", "host-pool-layout-unsupported",
           f"{SGLANG}/mem_cache/memory_pool_host.py:339"),
    Sample("host pool layout 'layer_frist' is not one of SGLang's layouts",
           "host-pool-layout-unsupported", "initorch steps/kv_layout.py resolve_layout"),
    # -- libraries and packages ---------------------------------------------------------------
    *(Sample(f"lib{name}.so: {NO_SUCH_FILE}", "ascend-cann-not-loaded", TORCH_NPU_NEEDED)
      for name in ("hccl", "ascendcl", "acl_op_compiler", "ge_runner", "graph",
                   "acl_tdt_channel")),
    Sample(f"libatb.so: {NO_SUCH_FILE}", "ascend-cann-not-loaded",
           "vllm-project/vllm-ascend#152 (ImportError from torch_npu's ATB plugin); "
           "torch_npu 2.14.0 lib/libop_plugin_atb.so DT_NEEDED"),
    *(Sample(f"lib{name}.so.1: {NO_SUCH_FILE}", "libibverbs-missing",
             "mooncake-transfer-engine-non-cuda 0.3.13.post1 mooncake/engine.so DT_NEEDED")
      for name in ("ibverbs", "numa")),
    *(Sample(f"{name}: {NO_SUCH_FILE}", "mooncake-cuda-build-without-driver",
             "mooncake-transfer-engine 0.3.13.post1 (CUDA wheel) mooncake/engine.so DT_NEEDED")
      for name in ("libcuda.so.1", "libcudart.so.12")),
    Sample("Expected one of cpu, cuda, ipu, xpu, mkldnn, opengl, opencl, ideep, hip, ve, fpga, "
           "maia, xla, lazy, vulkan, mps, meta, hpu, mtia, privateuseone device type at start "
           "of device string: npu", "torch-device-backend-not-loaded",
           "torch 2.13.0 c10/core/Device.cpp (libc10.so)"),
    Sample("module 'torch' has no attribute 'npu'", "torch-device-backend-not-loaded",
           "CPython 3.11 AttributeError: torch.npu used before torch_npu is imported"),
    Sample("No module named 'torch_musa'", "torch-device-backend-not-loaded",
           "CPython 3.11 ModuleNotFoundError"),
    Sample("Mooncake PG was not built against torch==2.13.0.\nOpen an issue at "
           "https://github.com/kvcache-ai/Mooncake/issues.", "mooncake-pg-missing-build",
           f"mooncake-wheel/mooncake/pg.py:13; {OBSERVED} and torch 2.13.0 (import mooncake.pg)"),
    Sample("Failed to import 'set_transfer_engine' from 'mooncake.pg'. Please upgrade your "
           "'mooncake-transfer-engine' installation to 0.3.11 or above.",
           "mooncake-pg-missing-build", f"{SGLANG}/distributed/device_communicators/"
           "mooncake_transfer_engine.py:362 (maybe_init_shared_mooncake_transfer_engine)"),
    Sample("No module named 'mooncake'", "mooncake-not-installed",
           "CPython 3.11 ModuleNotFoundError"),
    Sample("Numpy is not available", "numpy-missing",
           "torch 2.13.0 torch/csrc/utils/tensor_numpy.cpp (libtorch_python.so), reached "
           "from torch/distributed/distributed_c10d.py _tensor_to_object"),
    *(Sample(f"Unknown backend type {name}", "collective-backend-not-registered",
             "torch 2.13.0 torch/distributed/distributed_c10d.py:2072 (observed here)")
      for name in ("mooncake", "mooncake-cpu", "mccl", "hccl")),
    # -- the engine -------------------------------------------------------------------------
    Sample("the profile means Mooncake transport 'tcp', but Mooncake installed rdma; set "
           "MC_FORCE_TCP=1 in the profile's env: to force TCP", "mooncake-transport-mismatch",
           "initorch steps/transports.py transport_mismatch"),
    Sample("Mooncake TransferEngine.initialize('10.0.0.5', 'rdma', 'mlx5_0') did not return "
           "within 120s on node-3", "mooncake-engine-init-deadline",
           f"{SGLANG}/utils/common.py:3771 (run_with_deadline) called from "
           "distributed/device_communicators/mooncake_transfer_engine.py:211"),
    Sample("Mooncake Transfer Engine initialization failed.", "mooncake-engine-init-failed",
           f"{SGLANG}/distributed/device_communicators/mooncake_transfer_engine.py:223"),
    Sample(glog("E", "transfer_engine_impl.cpp:425", "Failed to install transport, type=rdma"),
           "mooncake-engine-init-failed", f"{MOONCAKE} mooncake-transfer-engine/src/"
           "transfer_engine_impl.cpp:425", "native_log"),
    Sample(glog("E", "transfer_engine_impl.cpp:384", "Failed to install RDMA transport"),
           "mooncake-engine-init-failed", f"{MOONCAKE} mooncake-transfer-engine/src/"
           "transfer_engine_impl.cpp:384 (MUSA/MNNVL builds)", "native_log"),
    Sample("TransferEngine.initialize('127.0.0.1', 'P2PHANDSHAKE', 'rdma', 'mlx5_0') returned -1",
           "mooncake-engine-init-failed", "initorch steps/transfer_engine.py "
           "SharedTransferEngine.call", code="-1"),
    # -- the master and the store --------------------------------------------------------------
    Sample(glog("E", "real_client.cpp:865", "Failed to create client after 20 retries"),
           "mooncake-master-unreachable", f"{OBSERVED}: setup against a master address where "
           f"nothing listens (and {MOONCAKE} mooncake-store/src/real_client.cpp:865)",
           "native_log"),
    Sample("cannot reach the Mooncake master at 10.0.0.9:50051: [Errno 111] Connection refused",
           "mooncake-master-unreachable", "initorch steps/mooncake_master.py given_master"),
    Sample("Failed to setup Mooncake store, error code: -1", "mooncake-store-setup-failed",
           f"{SGLANG}/mem_cache/storage/mooncake_store/mooncake_store.py:604", code="-1"),
    Sample("Failed to register buffer to Mooncake Store, error code: -600",
           "mooncake-store-register-failed",
           f"{SGLANG}/mem_cache/storage/mooncake_store/mooncake_store.py:358", code="-600"),
    Sample(glog("E", "transfer_task.cpp:1252", "Failed to submit all transfers, error code is 4"),
           "mooncake-transfer-submit-failed", f"{MOONCAKE} mooncake-store/src/"
           "transfer_task.cpp:1252 (TransferSubmitter::submitTransfer)", "native_log", "4"),
    # -- torch.distributed ------------------------------------------------------------------
    Sample("The server socket has failed to listen on any local network address. port: 29500, "
           "useIpv6: false, code: -98, name: EADDRINUSE, message: address already in use",
           "master-port-in-use", "torch 2.13.0 TCPStoreLibUvBackend (libtorch_cpu.so)"),
    Sample("The server socket has failed to listen on any local network address. The server "
           "socket has failed to bind to [::]:29500 (errno: 98 - Address already in use). The "
           "server socket has failed to bind to 0.0.0.0:29500 (errno: 98 - Address already in "
           "use).", "master-port-in-use", "torch 2.13.0 c10d socket.cpp (libtorch_cpu.so)"),
    Sample("[Errno 98] Address already in use", "port-in-use",
           "CPython 3.11 OSError (errno 98, EADDRINUSE)"),
    Sample("The client socket has failed to connect to any network address of (127.0.0.1, "
           "29500). The client socket has failed to connect to [localhost]:29500 (errno: 111 - "
           "Connection refused).", "rendezvous-connect-failed",
           "torch 2.13.0 c10d socket.cpp (libtorch_cpu.so)", code="111"),
    Sample("The connection to the C10d store has failed. See inner exception for details.",
           "rendezvous-connect-failed", "torch 2.13.0 torch/distributed/elastic/rendezvous/"
           "c10d_rendezvous_backend.py:117"),
    Sample("rendezvous tcp://127.0.0.1:29500: [../third_party/gloo/gloo/transport/tcp/"
           "pair.cc:144] connect [127.0.0.1]:29500: Connection refused",
           "rendezvous-connect-failed", "initorch steps/distributed.py init_torch_distributed"),
    Sample("Timed out after 901 seconds waiting for clients. 1/2 clients joined.",
           "process-group-timeout", "torch 2.13.0 TCPStore (libtorch_cpu.so)"),
    Sample("wait timeout after 300000ms, keys: /default_pg/0//cpu//0", "process-group-timeout",
           "torch 2.13.0 TCPStore (libtorch_cpu.so)"),
    Sample("Timed out initializing process group in store based barrier on rank: 1, for key: "
           "store_based_barrier_key:1 (world_size=2, num_workers_joined=1, timeout=0:30:00)",
           "process-group-timeout", "torch 2.13.0 torch/distributed/distributed_c10d.py:1082"),
    Sample("The client socket has timed out after 600000ms while trying to connect to "
           "(10.0.0.1, 29500).", "process-group-timeout",
           "torch 2.13.0 c10d socket.cpp (libtorch_cpu.so)"),
    Sample("Socket Timeout", "process-group-timeout", "torch 2.13.0 c10d (libtorch_cpu.so)"),
    Sample("The memory capacity is unbalanced. Some GPUs may be occupied by other processes. "
           "pre_model_load_memory=12.5, local_gpu_memory=60.1, local_gpu_memory * 0.9=54.09",
           "tp-memory-unbalanced", f"{SGLANG}/distributed/bootstrap.py:445"),
)
