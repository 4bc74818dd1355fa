"""The ``vllm`` initorch plugin: vLLM's own start-up steps and the ``vllm`` overlay.

The ``vllm_*`` steps are calls only vLLM's worker makes (building its model runner,
loading the weights, profiling memory, the KV connector and cache, warming up).  They
exist so that the ``vllm`` overlay can place them, so that verify mode can check a
worker's calls against that order and drift can check it against vLLM's source.
Outside a running vLLM worker they refuse to run, with that reason.
"""

from __future__ import annotations

from importlib.resources import files
from typing import TYPE_CHECKING, NoReturn

from initorch.plugin import StepContext, StepDefinition, StepError, step

if TYPE_CHECKING:
    from initorch import Registry

__all__ = ["STEPS", "register"]


def _performed_by_vllm(ctx: StepContext) -> NoReturn:
    raise StepError(f"{ctx.step} is performed by vLLM's worker; initorch observes it "
                    "inside a vLLM server and cannot run it on its own",
                    hint="start vLLM with INITORCH_VLLM=verify, or leave out the vllm "
                         "overlay")


def _vllm_step(name: str, description: str, *, device_bound: bool = False) -> StepDefinition:
    return step(name, description=description, device_bound=device_bound)(_performed_by_vllm)


STEPS = (
    _vllm_step("vllm_init_device", "vLLM's worker sets up its device, process group and "
               "model runner (Worker.init_device, v1/worker/gpu_worker.py:436; "
               "CPUWorker.init_device, v1/worker/cpu_worker.py:107)"),
    _vllm_step("vllm_model_runner", "vLLM builds the worker's model runner "
               "(GPUModelRunner, v1/worker/gpu_worker.py:558; CPUModelRunner, "
               "v1/worker/cpu_worker.py:177)", device_bound=True),
    _vllm_step("vllm_load_model", "vLLM loads the weights (Worker.load_model, "
               "v1/worker/gpu_worker.py:587)", device_bound=True),
    _vllm_step("vllm_profile_memory", "vLLM measures what the KV cache may take "
               "(determine_available_memory, v1/worker/gpu_worker.py:634, "
               "v1/worker/cpu_worker.py:204)", device_bound=True),
    _vllm_step("vllm_kv_connector", "vLLM builds the worker's KV connector "
               "(ensure_kv_transfer_initialized, v1/worker/gpu_worker.py:874)"),
    _vllm_step("vllm_bind_sender_threads", "the Mooncake connector's sender pool sets the "
               "device on each of its threads (mooncake_connector.py:1265-1268, :1940-1944)"),
    _vllm_step("vllm_init_kv_cache", "vLLM allocates the KV cache (initialize_kv_cache, "
               "v1/worker/gpu_worker.py:894)", device_bound=True),
    _vllm_step("vllm_warm_up", "vLLM compiles or warms up the model "
               "(compile_or_warm_up_model, v1/worker/gpu_worker.py:908, "
               "v1/worker/cpu_worker.py:264)", device_bound=True),
)


def register(registry: Registry) -> None:
    """Entry point of the ``vllm`` plugin (``initorch.plugins`` group)."""
    for vllm_step in STEPS:
        registry.steps.add(vllm_step)
    registry.profiles.add_directory(files("initorch_vllm.profiles"), plugin="vllm")
