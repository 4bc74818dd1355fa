"""The ``runner_bootstrap`` layout (SGLang 0.5.16 to 0.5.20): ``ModelRunner.__init__``
still starts the parallel runtime, but through ``srt/distributed/bootstrap.py
init_torch_distributed`` (bootstrap.py first appears in 0.5.16).

Read in the 0.5.16 and 0.5.20 wheels (line numbers are 0.5.20's unless named).
Recognised by ``bootstrap.py`` defining ``init_torch_distributed`` and not
``init_parallel_runtime`` (which replaced it in 0.5.21).  Facts of the stretch:

- 0.5.16 sets the device inside ``bootstrap.init_torch_distributed`` (bootstrap.py:65),
  called at model_runner.py:323, and initialises the shared engine after it (:326):
  PR 20016's order (process group before engine);
- 0.5.17 on sets the device in ``ModelRunner.__init__`` itself (model_runner.py:417), then
  the shared engine (:429), then ``init_torch_distributed`` (:433): the profile's order;
- 0.5.20 first runs ``TransferEngine.initialize`` inside ``run_with_deadline``
  (device_communicators/mooncake_transfer_engine.py:211-220; srt/utils/common.py:3494-3514,
  a new daemon ``threading.Thread`` that never sets the device); 0.5.19 calls it directly
  (mooncake_transfer_engine.py:210).
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

# ModelRunner.__init__ -> init_torch_distributed (:433) -> bootstrap.init_torch_distributed
# (model_runner.py:1145) -> _init_parallel_groups -> init_distributed_environment.
_DISTRIBUTED = (Hop(_RUNNER, _INIT, "init_torch_distributed"),
                Hop(_RUNNER, "ModelRunner.init_torch_distributed", "init_torch_distributed"),
                Hop(_BOOTSTRAP, "init_torch_distributed", "_init_parallel_groups"))
_SET_DEVICE = (Hop(_RUNNER, _INIT, "set_device"),)
_ENGINE = (Hop(_RUNNER, _INIT, "init_shared_mooncake_transfer_engine"),)
_PROCESS_GROUP = (*_DISTRIBUTED, Hop(_BOOTSTRAP, "_init_parallel_groups",
                                     "init_distributed_environment"))

LAYOUT = Layout(
    name="runner_bootstrap",
    releases="0.5.16-0.5.20 (read in 0.5.16 and 0.5.20)",
    markers=(Marker(_BOOTSTRAP, "init_torch_distributed"),
             Marker(_RUNNER, "ModelRunner.init_torch_distributed")),
    absent=(Marker(_BOOTSTRAP, "init_parallel_runtime"),),
    calls=(
        EngineCall("bind_cpu_threads",
                   "sglang.srt.model_executor.model_runner.ModelRunner.init_threads_binding",
                   (Hop(_RUNNER, _INIT, "init_threads_binding"),)),
        EngineCall("set_device", f"{DEVICE_MODULE}.set_device", _SET_DEVICE),
        EngineCall("init_shared_mooncake_transfer_engine",
                   "sglang.srt.distributed.device_communicators.mooncake_transfer_engine."
                   "maybe_init_shared_mooncake_transfer_engine", _ENGINE),
        EngineCall("init_torch_distributed",
                   "sglang.srt.distributed.parallel_state.init_distributed_environment",
                   _PROCESS_GROUP),
        EngineCall("init_model_parallel",
                   "sglang.srt.distributed.parallel_state.initialize_model_parallel",
                   (*_DISTRIBUTED, Hop(_BOOTSTRAP, "_init_parallel_groups",
                                       "initialize_model_parallel"))),
        EngineCall("sglang_load_model",
                   "sglang.srt.model_executor.model_runner.ModelRunner.load_model",
                   (Hop(_RUNNER, _INIT, "initialize"),
                    Hop(_RUNNER, "ModelRunner.initialize", "load_model"))),
        EngineCall("sglang_alloc_kv_pool",
                   "sglang.srt.model_executor.model_runner.ModelRunner.alloc_memory_pool", ()),
        EngineCall("alloc_host_mem_pool",
                   "sglang.srt.mem_cache.pool_host.base.HostKVCache.__init__", ()),
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
    engine_init=EngineInit("srt/distributed/device_communicators/mooncake_transfer_engine.py",
                           "MooncakeTransferEngine.initialize"),
    allocator=AllocatorTable(("srt/mem_cache/pool_host/common.py",
                              "srt/mem_cache/memory_pool_host.py")),
    # 0.5.20 only (srt/utils/common.py:3494-3514); 0.5.16-0.5.19 have no such helper.
    deadline_helper="sglang.srt.utils.common.run_with_deadline",
    notes=("drive mode needs init_parallel_runtime (0.5.21 on); verify mode only",),
)
