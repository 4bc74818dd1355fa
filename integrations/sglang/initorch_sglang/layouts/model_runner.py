"""The ``model_runner`` layout (SGLang 0.5.x up to 0.5.15.post1): ``ModelRunner.__init__``
starts the parallel runtime through its own ``init_torch_distributed`` method.

Read in the 0.5.15.post1 and 0.5.10.post1 wheels (line numbers are 0.5.15.post1's unless
named).  Recognised by ``ModelRunner.init_torch_distributed`` with no
``srt/distributed/bootstrap.py`` at all.  Facts of the stretch, each re-read by
``initorch sglang audit``:

- up to 0.5.10.post1 ``ModelRunner.__init__`` initialises the shared Mooncake engine
  (model_runner.py:400 in 0.5.10.post1) before ``init_torch_distributed`` (:403), whose
  first act is ``set_device`` (:894): the Ascend order bug, fixed by SGLang PR 20016 in
  0.5.11 (``init_torch_distributed`` :481, engine :484); before 0.5.9 there is no shared
  engine (``init_shared_mooncake_transfer_engine`` first appears in 0.5.9);
- the host pool's ``ALLOC_MEMORY_FUNCS`` (mem_cache/memory_pool_host.py:143-148 in
  0.5.10.post1) has ``npu`` but no ``musa`` up to 0.5.10.post1 (PR 23361 added it in 0.5.11,
  :146-152); the table first appears in 0.5.6.post1; 0.5.14 moved it to
  mem_cache/pool_host/common.py;
- ``srt/plugins`` (the entry point group and ``HookRegistry``) exists from 0.5.11 on: before
  it no plugin can load, so the integration supports none of those releases.
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

_RUNNER = "srt/model_executor/model_runner.py"
_BOOTSTRAP = "srt/distributed/bootstrap.py"
_CONTROLLER = "srt/managers/cache_controller.py"
_INIT = "ModelRunner.__init__"
_ATTACH = "HiCacheController.attach_storage_backend"

# ModelRunner.__init__ -> init_torch_distributed (:547) -> set_device (:1236),
# init_distributed_environment (:1302), initialize_model_parallel (:1312).
_DISTRIBUTED = (Hop(_RUNNER, _INIT, "init_torch_distributed"),)
_SET_DEVICE = (Hop(_RUNNER, _INIT, "set_device"),)
_ENGINE = (Hop(_RUNNER, _INIT, "init_shared_mooncake_transfer_engine"),)
_PROCESS_GROUP = (*_DISTRIBUTED, Hop(_RUNNER, "ModelRunner.init_torch_distributed",
                                     "init_distributed_environment"))

LAYOUT = Layout(
    name="model_runner",
    releases="0.5.1-0.5.15.post1 (read in 0.5.10.post1 and 0.5.15.post1)",
    markers=(Marker(_RUNNER, "ModelRunner.init_torch_distributed"),),
    absent=(Marker(_BOOTSTRAP),),
    calls=(
        EngineCall("bind_cpu_threads",
                   "sglang.srt.model_executor.model_runner.ModelRunner.init_threads_binding",
                   (Hop(_RUNNER, _INIT, "init_threads_binding"),)),
        EngineCall("set_device", f"{DEVICE_MODULE}.set_device",
                   (*_DISTRIBUTED, Hop(_RUNNER, "ModelRunner.init_torch_distributed",
                                       "set_device"))),
        EngineCall("init_shared_mooncake_transfer_engine",
                   "sglang.srt.model_executor.model_runner.ModelRunner."
                   "init_shared_mooncake_transfer_engine", _ENGINE),
        EngineCall("init_torch_distributed",
                   "sglang.srt.distributed.parallel_state.init_distributed_environment",
                   _PROCESS_GROUP),
        EngineCall("init_model_parallel",
                   "sglang.srt.distributed.parallel_state.initialize_model_parallel",
                   (*_DISTRIBUTED, Hop(_RUNNER, "ModelRunner.init_torch_distributed",
                                       "initialize_model_parallel"))),
        # No memory_baseline: the baseline is a get_available_gpu_memory call inside
        # init_torch_distributed (:1350), a function SGLang calls everywhere.
        EngineCall("sglang_load_model",
                   "sglang.srt.model_executor.model_runner.ModelRunner.load_model",
                   (Hop(_RUNNER, _INIT, "initialize"),
                    Hop(_RUNNER, "ModelRunner.initialize", "load_model"))),
        EngineCall("sglang_alloc_kv_pool",
                   "sglang.srt.model_executor.model_runner.ModelRunner.init_memory_pool", ()),
        # memory_pool_host.py defines HostKVCache up to 0.5.13 and re-exports it after.
        EngineCall("alloc_host_mem_pool",
                   "sglang.srt.mem_cache.memory_pool_host.HostKVCache.__init__", ()),
        EngineCall("init_mooncake_store",
                   "sglang.srt.mem_cache.storage.mooncake_store.mooncake_store."
                   "MooncakeStore.__init__",
                   (Hop(_CONTROLLER, _ATTACH, "create_backend"),)),
        EngineCall("register_mem_pool_host",
                   "sglang.srt.mem_cache.storage.mooncake_store.mooncake_store."
                   "MooncakeStore.register_mem_pool_host",
                   (Hop(_CONTROLLER, _ATTACH, "register_mem_pool_host"),)),
    ),
    set_device=_SET_DEVICE,
    engine=_ENGINE,
    process_group=_PROCESS_GROUP,
    # Calls engine.initialize directly on the calling thread (0.5.15.post1
    # device_communicators/mooncake_transfer_engine.py, MooncakeTransferEngine.initialize).
    engine_init=EngineInit("srt/distributed/device_communicators/mooncake_transfer_engine.py",
                           "MooncakeTransferEngine.initialize"),
    allocator=AllocatorTable(("srt/mem_cache/pool_host/common.py",
                              "srt/mem_cache/memory_pool_host.py")),
    notes=("drive mode needs init_parallel_runtime (0.5.21 on); verify mode only",),
)
