"""torch and its vendor plugins: device backends, process-group backends, rendezvous."""

from __future__ import annotations

from initorch.plugin import Diagnosis

DEVICE_BACKEND_NOT_LOADED = Diagnosis(
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
)

NUMPY_MISSING = Diagnosis(
    id="numpy-missing",
    title="A torch call needs NumPy, and NumPy is not installed",
    cause=(
        "torch does not depend on NumPy, but some of its calls do: the object "
        "collectives of torch.distributed (all_gather_object, broadcast_object_list) "
        "unpickle through Tensor.numpy() (torch 2.13 torch/distributed/"
        "distributed_c10d.py _tensor_to_object), which raises 'Numpy is not available' "
        "without it. The managed Mooncake master and verify_transfer share addresses "
        "and key names with broadcast_object_list."
    ),
    remedy="pip install numpy, or install initorch with its 'torch' (or 'npu') extra.",
    prevention=(
        "Install torch through initorch's 'torch' or 'npu' extra, which depends on "
        "NumPy, rather than torch alone."
    ),
    pattern=r"\bNumpy is not available\b",
)

BACKEND_NOT_REGISTERED = Diagnosis(
    id="collective-backend-not-registered",
    title="torch.distributed does not know this process-group backend",
    cause=(
        "hccl, mccl and the Mooncake backends are registered by the package that provides "
        "them when it is imported: torch_npu (hccl), torch_musa (mccl), mooncake.pg "
        "('mooncake' for cuda/musa, 'mooncake-cpu' for cpu). It was not imported before "
        "init_process_group, or it is not installed."
    ),
    remedy=(
        "Import the provider first (the import_backend step for hccl and mccl; "
        "set_mooncake_pg_engine for Mooncake), or install it."
    ),
    prevention=(
        "The mooncake-ep profile requires set_mooncake_pg_engine before the process group; "
        "device profiles import their vendor package in import_backend."
    ),
    pattern=r"\bUnknown backend type (?:hccl|mccl|mooncake|mooncake-cpu)\b",
)

MASTER_PORT_IN_USE = Diagnosis(
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
        "Keep distributed.master_port: 0 (the base default: a free port per run) "
        "in shared profiles; pin a port only in site-specific overlays."
    ),
    pattern=(
        r"server socket has failed to (?:listen on any local network address|bind to)"
        r"[^\n]{0,300}?(?:\bEADDRINUSE\b|address already in use)"
    ),
)

PORT_IN_USE = Diagnosis(
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
    pattern=r"\baddress already in use\b",
)

RENDEZVOUS_CONNECT_FAILED = Diagnosis(
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
    ),
)

PROCESS_GROUP_TIMEOUT = Diagnosis(
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
        r"Timed out after \d+ seconds waiting for clients\. \d+/\d+ clients joined"
        r"|\bwait timeout after \d+ms\b"
        r"|Timed out initializing process group in store based barrier"
        r"|client socket has timed out after \d+\s*m?s while trying to connect to"
        r"|(?-i:\bSocket Timeout\b)"
    ),
)

MEMORY_UNBALANCED = Diagnosis(
    id="tp-memory-unbalanced",
    title="The ranks see very different free device memory",
    cause=(
        "SGLang compares the smallest free memory across ranks with this rank's "
        "(bootstrap.py _check_tp_memory_balance). A large gap means another process holds "
        "memory on some device, or several ranks share one device: ranks that never call "
        "set_device all land on device 0."
    ),
    remedy=(
        "Check with npu-smi / nvidia-smi (free -g on CPU) which processes hold memory and "
        "whether every rank has its own device (LOCAL_RANK, the visible-devices variable). "
        "initorch's memory_baseline names the short rank; if the imbalance is intended, "
        "lower memory.balance_threshold or set memory.balance_check: false."
    ),
    prevention=(
        "set_device binds each rank to device LOCAL_RANK (after the visible-devices "
        "variable) before anything allocates, and refuses an index a rank cannot see; "
        "memory_baseline runs after warmup_collectives, so communicator buffers are "
        "counted on every rank alike."
    ),
    pattern=r"The memory capacity is unbalanced\. Some GPUs may be occupied by other processes",
)
