"""Known start-up failures of LLM inference servers, as diagnosis data.

This is the device knowledge behind :mod:`initorch.reporting.diagnosis`: each entry
recognises a failure by the text the real stack prints (ACL and CUDA return
codes, loader errors, torch.distributed rendezvous messages, Mooncake glog
lines) and says what caused it, what to do now and which profile constraint
prevents it.

Order matters because the first match wins: specific entries come before the
generic ones that would also match their text (``cuda-host-register-already-
registered`` before ``cuda-host-register-failed``, ``ascend-context-null``
before ``mooncake-engine-init-failed``, ``master-port-in-use`` before
``port-in-use``, ``rendezvous-connect-failed`` before
``process-group-timeout``).

Patterns are anchored on vendor wording, not on generic words ("timeout",
"connection refused"), so that an unrelated failure stays undiagnosed instead
of being explained wrongly.  Nothing here imports a vendor package.
"""

from __future__ import annotations

from initorch.reporting.diagnosis import Diagnosis, DiagnosisBook

__all__ = ["BUILTIN_DIAGNOSES", "register_diagnoses"]

BUILTIN_DIAGNOSES: tuple[Diagnosis, ...] = (
    Diagnosis(
        id="ascend-context-null",
        title="No Ascend device context on the thread that initialised the Mooncake engine",
        cause=(
            "Mooncake's ascend transport calls aclrtGetDevice on the thread that runs "
            "TransferEngine.initialize; the ACL device context is per thread, and 107002 "
            "(ACL_ERROR_RT_CONTEXT_NULL) means set_device never ran on that thread, so no "
            "local segment could be allocated. It happens when the engine is initialised "
            "before set_device (the old start-up order) or on a helper thread (for example "
            "one added to enforce a deadline), which does not inherit the device context."
        ),
        remedy=(
            "Call torch.npu.set_device(<local rank>) before "
            "init_shared_mooncake_transfer_engine, on the same thread; if the engine init "
            "must run on another thread, call set_device first on that thread."
        ),
        prevention=(
            "device_bound steps run after set_device on the same thread; keep "
            "init_shared_mooncake_transfer_engine device_bound and ordered after set_device "
            "(set_device -> engine -> process group)."
        ),
        pattern=(
            r"(?:aclrtGetDevice|rtGet ?Device)\b[^\n]{0,300}?\b(?P<code>107002)\b"
            r"|\bACL_ERROR_RT_CONTEXT_NULL\b"
        ),
    ),
    Diagnosis(
        id="cuda-host-register-on-non-cuda",
        title="The CUDA host-register allocator was chosen on a device without CUDA",
        cause=(
            "The host KV pool used torch.cuda.cudart().cudaHostRegister, but on MUSA, "
            "Ascend NPU or XPU torch.cuda.cudart() is None. Typically the allocator was "
            "looked up by the raw device string, so 'musa:0', 'npu:0' or a torch.device "
            "missed its entry and silently fell back to the CUDA path."
        ),
        remedy=(
            "Use the pin_memory allocator on this device (device.host_allocator: "
            "pin_memory) and look allocators up by the normalised device type (musa, npu), "
            "never by 'musa:0' or a torch.device."
        ),
        prevention=(
            "The musa, npu and xpu profiles set device.host_allocator: pin_memory; device "
            "strings are normalised once (initorch.model.devices) and an unknown type is an "
            "error, never a fallback to the CUDA path."
        ),
        pattern=r"'NoneType' object has no attribute '(?:cuda|hip)Host(?:Register|Unregister)'",
    ),
    Diagnosis(
        id="cuda-host-register-already-registered",
        title="cudaHostRegister: the host buffer is already registered (error 712)",
        cause=(
            "712 is cudaErrorHostMemoryAlreadyRegistered (hipErrorHostMemoryAlreadyRegistered "
            "on ROCm): part of the range is already page-locked. The same pool was "
            "registered twice, e.g. memory allocated with pin_memory=True registered again, "
            "or a retried step registering a buffer whose earlier registration was never "
            "undone."
        ),
        remedy=(
            "Pin each host buffer exactly once: either allocate it with pin_memory=True or "
            "call cudaHostRegister on plain memory, not both; unregister "
            "(cudaHostUnregister) before registering the same range again."
        ),
        prevention=(
            "device.host_allocator selects exactly one pinning path per device; the host "
            "pool step's teardown unregisters what it registered, so a retry starts clean."
        ),
        pattern=(
            r"(?:cuda|hip)HostRegister\b[^\n]{0,300}?(?:failed with error|error code|returned)"
            r"\s*:?\s*(?P<code>712)\b"
            r"|\b(?:cuda|hip)ErrorHostMemoryAlreadyRegistered\b"
        ),
    ),
    Diagnosis(
        id="cuda-host-register-failed",
        title="cudaHostRegister failed while pinning the host KV pool",
        cause=(
            "Page-locking the host pool returned a CUDA/HIP error. Frequent codes: 1 "
            "cudaErrorInvalidValue (null or unaligned pointer, zero size); 2 "
            "cudaErrorMemoryAllocation (the pool is larger than the host can lock, or the "
            "memlock limit is too low); 3, 35 or 100 (CUDA not initialised, driver too old, "
            "no device visible); 801 cudaErrorNotSupported (the platform cannot register "
            "host memory)."
        ),
        remedy=(
            "Read the code with cudaGetErrorName. For 2: shrink the host pool, check free "
            "host memory and raise the container's memlock limit (ulimit -l unlimited). "
            "For 1: pass a live, page-aligned buffer of non-zero size. For 3/35/100: check "
            "the driver and CUDA_VISIBLE_DEVICES. For 801, or on a non-CUDA device: use the "
            "pin_memory allocator."
        ),
        prevention=(
            "Size hicache.host_pool_mb from the host's available memory, run with "
            "an unlimited memlock limit, and keep device.host_allocator: cuda_host_register "
            "only in the cuda and rocm profiles."
        ),
        pattern=(
            r"(?:cuda|hip)HostRegister\b[^\n]{0,300}?(?:failed with error|error code|returned)"
            r"\s*:?\s*(?P<code>-?[1-9]\d*)\b"
        ),
    ),
    Diagnosis(
        id="ascend-cann-not-loaded",
        title="Ascend CANN libraries cannot be loaded",
        cause=(
            "libhccl.so / libascendcl.so come with the Ascend CANN toolkit. They are not on "
            "the loader path: CANN is not installed, or its environment script was not "
            "sourced in the environment that started the server, so torch_npu (or Mooncake's "
            "ascend transport) cannot load. A missing libascend_hal.so means the NPU driver "
            "itself is absent or /usr/local/Ascend/driver/lib64 is not on LD_LIBRARY_PATH."
        ),
        remedy=(
            "Install the CANN toolkit that matches torch_npu, then run 'source "
            "/usr/local/Ascend/ascend-toolkit/set_env.sh' in the environment that starts "
            "the server; check with python -c 'import torch_npu'."
        ),
        prevention=(
            "Source set_env.sh in the container entrypoint or service unit, not in an "
            "interactive shell, so every worker process inherits LD_LIBRARY_PATH."
        ),
        pattern=(
            r"\blib(?:hccl|ascendcl|acl_op_compiler|ge_runner|ascend_hal)\.so[.\d]*:"
            r"\s*cannot open shared object file"
        ),
    ),
    Diagnosis(
        id="libibverbs-missing",
        title="Mooncake's native libraries need libibverbs (and libnuma), which are missing",
        cause=(
            "The Mooncake transfer engine links libibverbs and libnuma at import time "
            "whatever the protocol, including the non-CUDA build used with protocol tcp; "
            "the wheels do not bundle them."
        ),
        remedy=(
            "Install them: apt-get install -y libibverbs1 libnuma1 (RHEL: dnf install -y "
            "libibverbs numactl-libs). The later 'No RDMA devices found' log line is "
            "harmless with protocol tcp."
        ),
        prevention=(
            "Bake libibverbs1 and libnuma1 into every image that runs Mooncake, including "
            "CPU-only images."
        ),
        pattern=r"\blib(?:ibverbs|numa)\.so(?:\.\d+)*:\s*cannot open shared object file",
    ),
    Diagnosis(
        id="mooncake-cuda-build-without-driver",
        title="A CUDA build was imported on a machine without the NVIDIA driver (libcuda.so.1)",
        cause=(
            "libcuda.so.1 is the NVIDIA driver library. Something linked against CUDA, "
            "usually the CUDA build of Mooncake (mooncake-transfer-engine), was imported on "
            "a host without the NVIDIA driver (CPU, NPU or MUSA node) or in a container "
            "started without the NVIDIA runtime."
        ),
        remedy=(
            "Without an NVIDIA GPU: pip uninstall -y mooncake-transfer-engine, then pip "
            "install mooncake-transfer-engine-non-cuda (never both: they share the mooncake/ "
            "package folder). On an NVIDIA host: start the container with the NVIDIA "
            "runtime (--gpus all) so the driver library is mounted."
        ),
        prevention=(
            "Install the Mooncake build that matches the device profile: the 'mooncake' "
            "extra (CUDA build) for cuda, 'mooncake-cpu' (non-CUDA build) elsewhere, and "
            "only one of them per environment."
        ),
        pattern=r"\blibcuda\.so(?:\.\d+)*:\s*cannot open shared object file",
    ),
    Diagnosis(
        id="torch-device-backend-not-loaded",
        title="torch does not know the npu/musa device: the vendor backend is not loaded",
        cause=(
            "npu and musa are out-of-tree torch backends registered by importing torch_npu "
            "or torch_musa. The package is not installed (torch_musa comes from the vendor, "
            "not PyPI), or torch.device / torch.npu was used before it was imported, or "
            "TORCH_DEVICE_BACKEND_AUTOLOAD=0 disabled the automatic import."
        ),
        remedy=(
            "Install the vendor backend built for this torch version (torch_npu for npu, "
            "torch_musa for musa) and import it before any torch.device('npu'/'musa') or "
            "torch.npu/torch.musa call."
        ),
        prevention=(
            "Keep the import_backend step (it imports device.backend_package) ahead of "
            "set_device in the npu and musa profiles; do not rely on backend autoloading."
        ),
        pattern=(
            r"device type at start of device string:\s*(?:npu|musa)\b"
            r"|module 'torch' has no attribute '(?:npu|musa)'"
            r"|No module named '(?:torch_npu|torch_musa)'"
        ),
    ),
    Diagnosis(
        id="mooncake-not-installed",
        title="The Mooncake transfer engine package is not installed",
        cause=(
            "A Mooncake step (transfer engine or store) ran but 'mooncake' cannot be "
            "imported in this environment."
        ),
        remedy=(
            "pip install mooncake-transfer-engine on CUDA hosts, or "
            "mooncake-transfer-engine-non-cuda on CPU and other devices (one of them, "
            "never both); on Ascend use a Mooncake build with Ascend support. Or set "
            "mooncake.enabled: false to skip every Mooncake step."
        ),
        prevention=(
            "Set mooncake.enabled: false in deployments without Mooncake, and install "
            "the matching extra ('mooncake' or 'mooncake-cpu') everywhere else."
        ),
        pattern=r"No module named '?mooncake\b",
    ),
    Diagnosis(
        id="numpy-missing",
        title="A torch call needs NumPy, and NumPy is not installed",
        cause=(
            "torch does not depend on NumPy, but some of its calls do: the object "
            "collectives of torch.distributed (all_gather_object, broadcast_object_list) "
            "unpickle through Tensor.numpy() (torch 2.13 torch/distributed/"
            "distributed_c10d.py _tensor_to_object), which raises 'Numpy is not available' "
            "without it. verify_transfer exchanges pool addresses with all_gather_object."
        ),
        remedy="pip install numpy, or install initorch with its 'torch' (or 'npu') extra.",
        prevention=(
            "Install torch through initorch's 'torch' or 'npu' extra, which depends on "
            "NumPy, rather than torch alone."
        ),
        pattern=r"\bNumpy is not available\b",
    ),
    Diagnosis(
        id="mooncake-engine-init-failed",
        title="Mooncake TransferEngine.initialize returned an error",
        cause=(
            "The engine could not install a transport. Mooncake logs the reason just "
            "before (glog lines, kept in native_log): no usable RDMA device or GID for "
            "protocol rdma, a protocol this build lacks ('ascend' with a non-Ascend wheel, "
            "'rdma' on a host without HCAs), no free TCP port, or a malformed local "
            "hostname (Ascend needs host:port:npu_<physical id>)."
        ),
        remedy=(
            "Read the Mooncake log lines before the failure. On CPU or loopback use protocol "
            "tcp; for rdma set mooncake.device_name to an existing HCA (see "
            "ibv_devices) and MC_GID_INDEX if needed; on Ascend use protocol ascend, the "
            "npu_<physical id> hostname form and a Mooncake build with Ascend support."
        ),
        prevention=(
            "Let device.mooncake_protocol come from the device profile (tcp on cpu, musa "
            "and xpu, rdma on cuda and rocm, ascend on npu) rather than overriding it per "
            "deployment."
        ),
        pattern=(
            r"Mooncake Transfer Engine initialization failed"
            r"|TransferEngine\.initialize\b[^\n]{0,300}?"
            r"(?:returned|failed with (?:error|code|status))\s*:?\s*(?P<code>-?\d+)"
            r"|\bFailed to install (?:\w+ )?transport\b"
        ),
    ),
    Diagnosis(
        id="host-pool-layout-unsupported",
        title="The storage backend does not support the host KV pool's memory layout",
        cause=(
            "Storage backends register the host pool page by page and accept only some "
            "layouts (Mooncake store: page_first, page_first_direct, page_head, "
            "page_first_kv_split; some versions also layer_first). The misspelling "
            "page_first_kv_spilt circulates in configs: initorch corrects it with a "
            "warning, backends that only know the correct spelling reject it."
        ),
        remedy=(
            "Set hicache.layout to one the backend accepts: page_first_direct on NPU "
            "(page_first_kv_split for MLA models), page_first on CUDA; write "
            "page_first_kv_split, not page_first_kv_spilt."
        ),
        prevention=(
            "Take hicache.layout from the device profile (page_first by default, "
            "page_first_direct in npu); initorch refuses any other value when the "
            "profile is loaded, so this is reached only through layouts set elsewhere."
        ),
        pattern=(
            r"storage backend only supports [\w ,]{0,200}layout"
            r"|\bhost pool layout '[^'\n]{0,100}' is not supported\b"
            r"|\bunsupported (?:host[- ]pool |hicache |mem(?:ory)? )layout\b"
        ),
    ),
    Diagnosis(
        id="master-port-in-use",
        title="The rendezvous port (MASTER_PORT) is already in use",
        cause=(
            "Rank 0 hosts the torch.distributed TCPStore on MASTER_PORT and could not bind "
            "it: another process listens there, often a previous server that did not exit, "
            "another job on the same node, or two processes both acting as rank 0."
        ),
        remedy=(
            "Pick a free MASTER_PORT, or set distributed.master_port: 0 so that "
            "initorch chooses a free one; or stop the process holding it (ss -ltnp "
            "'sport = :<port>'). Give every job sharing a node its own port."
        ),
        prevention=(
            "Keep distributed.master_port: 0 (the default: a free port per run) "
            "in shared profiles; pin a port only in site-specific overlays."
        ),
        pattern=(
            r"server socket has failed to (?:listen on any local network address|bind to)"
            r"[^\n]{0,300}?(?:\bEADDRINUSE\b|address already in use)"
        ),
    ),
    Diagnosis(
        id="port-in-use",
        title="A port the server needs is already in use",
        cause=(
            "A listening socket (HTTP server, Mooncake RPC or handshake port, metrics) could "
            "not bind its port because another process holds it, often a previous run that "
            "did not exit."
        ),
        remedy=(
            "Find the process with ss -ltnp 'sport = :<port>' and stop it, or configure "
            "another port."
        ),
        prevention=(
            "Let ports that need not be fixed be chosen at run time, and tear down a "
            "previous server before starting the next on the same host."
        ),
        pattern=r"\bEADDRINUSE\b|\baddress already in use\b",
    ),
    Diagnosis(
        id="rendezvous-connect-failed",
        title="Could not connect to the rendezvous store at MASTER_ADDR:MASTER_PORT",
        cause=(
            "This rank could not reach rank 0's TCPStore. Connection refused (errno 111) "
            "means nothing listens there yet: rank 0 has not started, has already failed, "
            "or MASTER_PORT differs between ranks. Unreachable or timed-out errors (errno "
            "101, 110, 113) point at a wrong MASTER_ADDR or a firewall."
        ),
        remedy=(
            "Check that rank 0 is running and that every rank uses the same MASTER_ADDR and "
            "MASTER_PORT (nc -zv $MASTER_ADDR $MASTER_PORT from this node). Refusals while "
            "rank 0 is still starting are transient and retried until the rendezvous "
            "deadline."
        ),
        prevention=(
            "Take MASTER_ADDR/MASTER_PORT from the launcher's environment for all ranks, and "
            "keep init_torch_distributed retrying on connection errors within its timeout."
        ),
        pattern=(
            r"client socket has failed to connect to"
            r"(?:[^\n]{0,300}?\((?:errno|system error):\s*(?P<code>\d+))?"
            r"|connection to the C10d store has failed"
            r"|\brendezvous (?:env|tcp|file)://[^\n]{0,300}?connection refused"
        ),
    ),
    Diagnosis(
        id="process-group-timeout",
        title="torch.distributed rendezvous timed out: not all ranks joined",
        cause=(
            "The process group did not form in time. Usually some ranks were never started, "
            "WORLD_SIZE is larger than the number of ranks launched, ranks disagree on "
            "MASTER_ADDR/MASTER_PORT (forming separate rendezvous), traffic between nodes "
            "is blocked, or another rank failed earlier in start-up."
        ),
        remedy=(
            "Check that exactly WORLD_SIZE ranks were launched with distinct RANKs and the "
            "same MASTER_ADDR/MASTER_PORT, and read the other ranks' logs for an earlier "
            "failure. Raise distributed.timeout_s only when ranks legitimately "
            "start far apart."
        ),
        prevention=(
            "Take world size, rank and master address from the launcher (torchrun, SLURM) "
            "instead of hard-coding them, and run init_torch_distributed before slow steps "
            "such as weight loading so that ranks reach the rendezvous together."
        ),
        pattern=(
            r"Timed out after \d+ seconds waiting for clients\.? \d+/\d+ clients joined"
            r"|\bwait timeout after \d+\s*ms\b"
            r"|Timed out initializing process group in store based barrier"
            r"|client socket has timed out after \d+\s*m?s while trying to connect to"
            r"|\bconnect\(\) timed out\b"
            r"|(?-i:\bSocket Timeout\b)"
        ),
    ),
    Diagnosis(
        id="memory-capacity-unbalanced",
        title="Ranks start with unbalanced device memory",
        cause=(
            "Before the weights load, every rank measures the memory it has free and the "
            "figures are compared across the world (SGLang 0.5.23 distributed/bootstrap.py "
            "_check_tp_memory_balance). One rank has clearly less than the others: its device "
            "already holds memory, usually another process (a previous server that did not "
            "exit, another job, a notebook) or two ranks placed on the same device; on CPU, "
            "something else on the host is using memory. Pools are sized from the smallest "
            "rank's figure, so starting anyway would waste the others' memory or run out of "
            "it later."
        ),
        remedy=(
            "Find what holds memory on the short rank (nvidia-smi, npu-smi info, mthreads-gmi, "
            "xpu-smi, or free -g on CPU) and stop it; check that each rank has its own device "
            "(LOCAL_RANK and the visible-devices variable). If the imbalance is intended, "
            "lower memory.balance_threshold, or set memory.balance_check: false."
        ),
        prevention=(
            "Start each server on devices nothing else uses, tear down previous runs before "
            "starting the next, and keep memory_baseline after warmup_collectives so that "
            "communicator buffers are counted on every rank alike."
        ),
        pattern=r"\bmemory capacity is unbalanced\b",
    ),
)


def register_diagnoses(book: DiagnosisBook) -> None:
    """Add the built-in entries to ``book``, after anything a caller placed first."""
    book.extend(BUILTIN_DIAGNOSES)
