"""The ``bootstrap`` layout (SGLang 0.5.21 to 0.5.23): ``Scheduler.__init__`` hands the
parallel runtime to ``srt/distributed/bootstrap.py init_parallel_runtime``.

Read in the 0.5.23 wheel (line numbers are 0.5.23's); 0.5.21 and 0.5.22 have the same
functions (``initorch sglang audit`` re-reads each).  Recognised by ``bootstrap.py``
defining ``init_parallel_runtime`` (it first appears in 0.5.21).
"""

from __future__ import annotations

from initorch_sglang.layouts.model import (
    DEVICE_MODULE,
    AllocatorTable,
    EngineCall,
    EngineInit,
    Hop,
    Layout,
    Marker,
)

__all__ = ["LAYOUT"]

_SCHEDULER = "srt/managers/scheduler.py"
_BOOTSTRAP = "srt/distributed/bootstrap.py"
_TP_WORKER = "srt/managers/tp_worker.py"
_RUNNER = "srt/model_executor/model_runner.py"
_CONTROLLER = "srt/managers/cache_controller.py"

# Scheduler.__init__ (managers/scheduler.py:536) -> init_parallel_runtime (bootstrap.py:90).
_PARALLEL = (Hop(_SCHEDULER, "Scheduler.__init__", "init_parallel_runtime"),)
_GROUPS = (*_PARALLEL, Hop(_BOOTSTRAP, "init_parallel_runtime", "_init_parallel_groups"))
# Scheduler.__init__ (:568) -> ... -> ModelRunner(...) (tp_worker.py:487).
_WORKER = (
    Hop(_SCHEDULER, "Scheduler.__init__", "init_model_worker"),
    Hop(_SCHEDULER, "Scheduler.init_model_worker", "init_tp_model_worker"),
    Hop(_SCHEDULER, "Scheduler.init_tp_model_worker", "TpModelWorker"),
    Hop(_TP_WORKER, "TpModelWorker.__init__", "_init_model_runner"),
    Hop(_TP_WORKER, "TpModelWorker._init_model_runner", "ModelRunner"),
)
_POOLS = (
    Hop(_SCHEDULER, "Scheduler.__init__", "init_model_worker"),
    Hop(_SCHEDULER, "Scheduler.init_model_worker", "init_memory_pools"),
    Hop(_SCHEDULER, "Scheduler.init_memory_pools", "init_target_memory_pool"),
    Hop(_SCHEDULER, "Scheduler.init_target_memory_pool", "alloc_memory_pool"),
    Hop(_TP_WORKER, "TpModelWorker.alloc_memory_pool", "alloc_memory_pool"),
)
# The HiCache host pool is built by kv_cache_builder.build_kv_cache (scheduler.py:575),
# after init_model_worker; its storage backend and registration in one controller method.
_KV_CACHE = (Hop(_SCHEDULER, "Scheduler.__init__", "build_kv_cache"),)
_ATTACH = "HiCacheController.attach_storage_backend"
# The store: build_kv_cache (scheduler.py:575) -> create_tree_cache (kv_cache_builder.py:461)
# picks the HiCache tree class from a registry (mem_cache/registry.py:223), whose
# constructor builds the HiCacheController; its __init__ attaches the storage backend given
# at start-up (cache_controller.py:385), which creates the store and registers the host
# pool (:614, :617).  Each hop is checked in the source; the registry's step between the
# second and third is not, so the store orders against what Scheduler.__init__ runs before
# build_kv_cache (the device, the engine), not against the host pool built inside it.
_STORE = (*_KV_CACHE, Hop("srt/mem_cache/kv_cache_builder.py", "build_kv_cache",
                          "create_tree_cache"),
          Hop(_CONTROLLER, "HiCacheController.__init__", "attach_storage_backend"))

_SET_DEVICE = (*_PARALLEL, Hop(_BOOTSTRAP, "init_parallel_runtime", "set_device"))
_ENGINE = (*_PARALLEL, Hop(_BOOTSTRAP, "init_parallel_runtime",
                           "maybe_init_shared_mooncake_transfer_engine"))
_PROCESS_GROUP = (*_GROUPS, Hop(_BOOTSTRAP, "_init_parallel_groups",
                                "init_distributed_environment"))

LAYOUT = Layout(
    name="bootstrap",
    releases="0.5.21-0.5.23 (read in 0.5.23)",
    markers=(Marker(_BOOTSTRAP, "init_parallel_runtime"),
             Marker(_SCHEDULER, "Scheduler.__init__")),
    absent=(),
    calls=(
        EngineCall("bind_cpu_threads", "sglang.srt.distributed.bootstrap._bind_threads_if_cpu",
                   (*_PARALLEL, Hop(_BOOTSTRAP, "init_parallel_runtime",
                                    "_bind_threads_if_cpu"))),
        EngineCall("set_device", f"{DEVICE_MODULE}.set_device",
                   # SGLang sets it again in ModelRunner.__init__ (model_runner.py:455); the
                   # recorder orders only a step's first call.
                   _SET_DEVICE),
        EngineCall("init_shared_mooncake_transfer_engine",
                   "sglang.srt.distributed.device_communicators.mooncake_transfer_engine."
                   "maybe_init_shared_mooncake_transfer_engine", _ENGINE),
        EngineCall("init_torch_distributed",
                   "sglang.srt.distributed.parallel_state.init_distributed_environment",
                   _PROCESS_GROUP),
        EngineCall("init_model_parallel",
                   "sglang.srt.distributed.parallel_state.initialize_model_parallel",
                   (*_GROUPS, Hop(_BOOTSTRAP, "_init_parallel_groups",
                                  "initialize_model_parallel"))),
        EngineCall("memory_baseline",
                   "sglang.srt.distributed.bootstrap.measure_pre_model_load_memory",
                   (*_WORKER, Hop(_RUNNER, "ModelRunner.__init__", "init_torch_distributed"),
                    Hop(_RUNNER, "ModelRunner.init_torch_distributed",
                        "measure_pre_model_load_memory"))),
        EngineCall("sglang_load_model",
                   "sglang.srt.model_executor.model_runner.ModelRunner.load_model",
                   (*_WORKER, Hop(_RUNNER, "ModelRunner.__init__", "initialize"),
                    Hop(_RUNNER, "ModelRunner.initialize", "load_model"))),
        EngineCall("sglang_alloc_kv_pool",
                   "sglang.srt.model_executor.model_runner.ModelRunner.alloc_memory_pool",
                   _POOLS),
        EngineCall("alloc_host_mem_pool",
                   "sglang.srt.mem_cache.pool_host.base.HostKVCache.__init__", _KV_CACHE),
        EngineCall("init_mooncake_store",
                   "sglang.srt.mem_cache.storage.mooncake_store.mooncake_store."
                   "MooncakeStore.__init__",
                   (*_STORE, Hop(_CONTROLLER, _ATTACH, "create_backend"))),
        EngineCall("register_mem_pool_host",
                   "sglang.srt.mem_cache.storage.mooncake_store.mooncake_store."
                   "MooncakeStore.register_mem_pool_host",
                   (*_STORE, Hop(_CONTROLLER, _ATTACH, "register_mem_pool_host"))),
    ),
    set_device=_SET_DEVICE,
    engine=_ENGINE,
    process_group=_PROCESS_GROUP,
    # MooncakeTransferEngine.initialize hands engine.initialize to run_with_deadline
    # (device_communicators/mooncake_transfer_engine.py:211-220; srt/utils/common.py:3755-3775).
    engine_init=EngineInit("srt/distributed/device_communicators/mooncake_transfer_engine.py",
                           "MooncakeTransferEngine.initialize"),
    # mem_cache/pool_host/common.py:453-460 (npu, musa, xpu; default cudaHostRegister).
    allocator=AllocatorTable(("srt/mem_cache/pool_host/common.py",
                              "srt/mem_cache/memory_pool_host.py")),
    parallel_runtime="sglang.srt.distributed.bootstrap.init_parallel_runtime",
    # srt/utils/common.py:3755-3775 (0.5.23): a daemon threading.Thread, no set_device.
    deadline_helper="sglang.srt.utils.common.run_with_deadline",
)
