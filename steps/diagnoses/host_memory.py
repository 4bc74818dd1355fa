"""The HiCache host pool: pinning it, allocating it, laying it out."""

from __future__ import annotations

from initorch.plugin import Diagnosis

# SGLang 0.5.23 srt/mem_cache/pool_host/common.py _cuda_host_register, and initorch's
# own allocator: "cudaHostRegister failed (rc=N, ...)" / "... failed with error N".
_HOST_REGISTER_CODE = r"cudaHostRegister\b[^\n]{0,300}?(?:failed with error|failed \(rc=)\s*"

REGISTER_ON_NON_CUDA = Diagnosis(
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
        "The musa, npu and xpu profiles set a pin_memory allocator; device strings are "
        "normalised once (initorch.model.devices) and an unknown type is an error, never a "
        "fallback to the CUDA path."
    ),
    pattern=r"'NoneType' object has no attribute 'cudaHostRegister'",
)

ALREADY_REGISTERED = Diagnosis(
    id="cuda-host-register-already-registered",
    title="cudaHostRegister: the host buffer is already registered (error 712)",
    cause=(
        "712 is cudaErrorHostMemoryAlreadyRegistered ('part or all of the requested memory "
        "range is already mapped'): part of the range is already page-locked. The same "
        "pool was registered twice, e.g. memory allocated with pin_memory=True registered "
        "again, or a retried step registering a buffer whose earlier registration was "
        "never undone."
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
    pattern=_HOST_REGISTER_CODE + r"(?P<code>712)\b",
)

REGISTER_FAILED = Diagnosis(
    id="cuda-host-register-failed",
    title="cudaHostRegister failed while pinning the host KV pool",
    cause=(
        "Page-locking the host pool returned a CUDA/HIP error (ROCm keeps the cuda names in "
        "torch.cuda.cudart()). Frequent codes: 1 invalid value (null or unaligned pointer, "
        "zero size); 2 out of memory (the pool is larger than the host can lock, or the "
        "memlock limit is too low); 3, 35 or 100 (CUDA not initialised, driver too old, "
        "no device visible); 801 not supported (the platform cannot register host memory)."
    ),
    remedy=(
        "Read the code (SGLang prints cudaGetErrorString with it). For 2: shrink the host "
        "pool, check free host memory and raise the container's memlock limit (ulimit -l "
        "unlimited). For 1: pass a live, page-aligned buffer of non-zero size. For "
        "3/35/100: check the driver and CUDA_VISIBLE_DEVICES. For 801, or on a non-CUDA "
        "device: use the pin_memory allocator."
    ),
    prevention=(
        "Size hicache.host_pool_mb from the host's available memory, run with "
        "an unlimited memlock limit, and keep device.host_allocator: cuda_host_register "
        "only in the cuda and rocm profiles."
    ),
    pattern=_HOST_REGISTER_CODE + r"(?P<code>-?[1-9]\d*)\b",
)

PINNED_NULL = Diagnosis(
    id="pinned-host-alloc-null",
    title="A pinned host allocation returned a null pointer",
    cause=(
        "torch-xpu returns a tensor whose data_ptr() is 0 when pinned host memory cannot be "
        "allocated, instead of raising; SGLang checks for it (pool_host/common.py "
        "alloc_with_pin_memory_xpu). The host could not lock that much memory: the pool is "
        "too large for free host memory or for the memlock limit."
    ),
    remedy=(
        "Shrink hicache.host_pool_mb (SGLang: --hicache-size / --hicache-ratio), free host "
        "memory, or raise the memlock limit (ulimit -l unlimited)."
    ),
    prevention=(
        "The xpu profile uses the pin_memory_xpu allocator, which checks the pointer before "
        "anything registers or writes the pool."
    ),
    pattern=r"Pinned host memory allocation of [\d.]+ GiB \(\d+ bytes\) returned a null pointer",
)

MOONCAKE_ALLOC_FAILED = Diagnosis(
    id="mooncake-host-alloc-failed",
    title="Mooncake's host memory allocator could not map the host pool",
    cause=(
        "With the Mooncake store the host pool comes from MooncakeHostMemAllocator, which "
        "maps anonymous shared memory (memfd) and pre-faults it (Mooncake shm_helper.cpp; "
        "SGLang 0.5.23 mooncake_store.py:38-77). The mapping failed: not enough host memory "
        "or /dev/shm space, a memlock or cgroup limit, or, with MC_STORE_USE_HUGEPAGE, too "
        "few huge pages (/proc/sys/vm/nr_hugepages)."
    ),
    remedy=(
        "Shrink hicache.host_pool_mb (SGLang: --hicache-size / --hicache-ratio), free host "
        "memory, reserve huge pages or unset MC_STORE_USE_HUGEPAGE, or take the pool from "
        "torch with hicache.mooncake_host_allocator: false."
    ),
    prevention=(
        "alloc_host_mem_pool checks the pool against the host-memory budget before it "
        "allocates (hicache.host_memory_reserve_mb)."
    ),
    pattern=(
        r"\bFailed to create anonymous shared memory"
        r"|MooncakeHostMemAllocator\.alloc returned a null pointer"
    ),
)

BUDGET_EXCEEDED = Diagnosis(
    id="host-pool-over-budget",
    title="The host KV pool is larger than this rank's share of free host memory",
    cause=(
        "SGLang lets each rank take at most (available host memory - 10 GiB) // ranks per "
        "host, the available memory bounded by the cgroup limit (SGLang 0.5.23 "
        "mem_cache/pool_host/base.py:28 HICACHE_HOST_MEMORY_RESERVE_BYTES, :68-108 "
        "host_memory_budget_bytes, :244-256). The host pool asked for more: hicache_ratio x "
        "the device KV pool (or --hicache-size) times the ranks on this host does not fit."
    ),
    remedy=(
        "Lower --hicache-ratio or --hicache-size (initorch: hicache.host_pool_mb), run fewer "
        "ranks per host, or free host memory; in a container raise its memory limit."
    ),
    prevention=(
        "alloc_host_mem_pool checks the same budget before allocating "
        "(hicache.host_memory_reserve_mb, default 10240) and names the numbers."
    ),
    pattern=r"Not enough host memory available\. Requesting [\d.]+ GB but only have -?[\d.]+ GB "
            r"free",  # below zero when less than the reserve is free
)

LAYOUT_UNSUPPORTED = Diagnosis(
    id="host-pool-layout-unsupported",
    title="The host KV pool's memory layout does not fit the storage backend",
    cause=(
        "SGLang's host pools accept layer_first, page_first, page_first_direct, "
        "page_first_kv_split and page_head, and the Mooncake store stores whole pages: it "
        "rewrites layer_first to page_first (kernel io) or page_first_direct (direct io) "
        "and fails on an MHA layer_first pool otherwise (kernel_ascend io). The misspelling "
        "page_first_kv_spilt circulates in configs."
    ),
    remedy=(
        "Set hicache.layout to one the backend accepts: page_first_direct on NPU "
        "(page_first_kv_split for MLA models), page_first on CUDA; write "
        "page_first_kv_split, not page_first_kv_spilt."
    ),
    prevention=(
        "Take hicache.layout and hicache.io_backend from the device profile (page_first / "
        "kernel by default, page_first_direct / kernel_ascend in npu); initorch refuses names "
        "that are not SGLang's when the profile is loaded, and alloc_host_mem_pool applies "
        "SGLang's rewrites and refuses the rest before anything is registered."
    ),
    pattern=(
        r"Mooncake layer_first multi-buffer is only supported for MLA host KV pool"
        r"|\bUnsupported layout: \w+"
        r"|\bhost pool layout '[^'\n]{0,100}' is not (?:one of SGLang's layouts|supported by)"
    ),
)
