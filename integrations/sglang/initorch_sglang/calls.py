"""The call map: which SGLang function performs which initorch step, and where it is called.

One table, read three ways: verify mode hooks each ``target`` to record the call as the
step's event; drive mode knows which steps it performs itself; drift follows each
``chain`` through SGLang's source to the line that makes the call, and orders two steps
where their chains part.  Every entry was read in the SGLang 0.5.23 wheel (paths are
inside its ``sglang/`` folder); :mod:`initorch_sglang.drift` re-reads them for any
other tree, so a move upstream shows as drift instead of as a silent mismatch.
"""

from __future__ import annotations

from dataclasses import dataclass

__all__ = ["CALLS", "DEVICE_MODULE", "Hop", "SGLangCall", "call_for", "hook_target"]

DEVICE_MODULE = "{device_module}"
"""Placeholder in a target for the profile's ``device.torch_module`` (``torch.cpu``,
``torch.npu``): SGLang sets the device through ``torch.get_device_module(device)``."""


@dataclass(frozen=True, slots=True)
class Hop:
    """In ``file`` (inside the ``sglang`` package), function ``function`` (qualified
    within the file: ``Scheduler.__init__``) calls ``calls`` (a name or attribute)."""

    file: str
    function: str
    calls: str

    def __str__(self) -> str:
        return f"{self.file} {self.function} -> {self.calls}"


@dataclass(frozen=True, slots=True)
class SGLangCall:
    """SGLang's own function that performs initorch step ``step``."""

    step: str
    target: str
    chain: tuple[Hop, ...]


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

CALLS: tuple[SGLangCall, ...] = (
    SGLangCall("bind_cpu_threads", "sglang.srt.distributed.bootstrap._bind_threads_if_cpu",
               (*_PARALLEL, Hop(_BOOTSTRAP, "init_parallel_runtime", "_bind_threads_if_cpu"))),
    SGLangCall("set_device", f"{DEVICE_MODULE}.set_device",
               # SGLang sets it again in ModelRunner.__init__ (model_runner.py:455); the
               # recorder orders only a step's first call.
               (*_PARALLEL, Hop(_BOOTSTRAP, "init_parallel_runtime", "set_device"))),
    SGLangCall("init_shared_mooncake_transfer_engine",
               "sglang.srt.distributed.device_communicators.mooncake_transfer_engine."
               "maybe_init_shared_mooncake_transfer_engine",
               (*_PARALLEL, Hop(_BOOTSTRAP, "init_parallel_runtime",
                                "maybe_init_shared_mooncake_transfer_engine"))),
    SGLangCall("init_torch_distributed",
               "sglang.srt.distributed.parallel_state.init_distributed_environment",
               (*_GROUPS, Hop(_BOOTSTRAP, "_init_parallel_groups",
                              "init_distributed_environment"))),
    SGLangCall("init_model_parallel",
               "sglang.srt.distributed.parallel_state.initialize_model_parallel",
               (*_GROUPS, Hop(_BOOTSTRAP, "_init_parallel_groups", "initialize_model_parallel"))),
    SGLangCall("memory_baseline", "sglang.srt.distributed.bootstrap.measure_pre_model_load_memory",
               (*_WORKER, Hop(_RUNNER, "ModelRunner.__init__", "init_torch_distributed"),
                Hop(_RUNNER, "ModelRunner.init_torch_distributed",
                    "measure_pre_model_load_memory"))),
    SGLangCall("sglang_load_model", "sglang.srt.model_executor.model_runner.ModelRunner.load_model",
               (*_WORKER, Hop(_RUNNER, "ModelRunner.__init__", "initialize"),
                Hop(_RUNNER, "ModelRunner.initialize", "load_model"))),
    SGLangCall("sglang_alloc_kv_pool",
               "sglang.srt.model_executor.model_runner.ModelRunner.alloc_memory_pool", _POOLS),
    SGLangCall("alloc_host_mem_pool", "sglang.srt.mem_cache.pool_host.base.HostKVCache.__init__",
               _KV_CACHE),
    SGLangCall("init_mooncake_store",
               "sglang.srt.mem_cache.storage.mooncake_store.mooncake_store.MooncakeStore.__init__",
               (Hop(_CONTROLLER, _ATTACH, "create_backend"),)),
    SGLangCall("register_mem_pool_host",
               "sglang.srt.mem_cache.storage.mooncake_store.mooncake_store.MooncakeStore."
               "register_mem_pool_host",
               (Hop(_CONTROLLER, _ATTACH, "register_mem_pool_host"),)),
)


def call_for(step: str) -> SGLangCall | None:
    """The SGLang call that performs ``step``, if any."""
    return next((call for call in CALLS if call.step == step), None)


def hook_target(call: SGLangCall, device_module: str) -> str:
    """``call.target`` with the profile's device module filled in."""
    return call.target.replace(DEVICE_MODULE, device_module)
