"""The tiny server's own start-up steps, and the plugin function that registers them.

They extend the built-in start-up (``server`` overlay) the way SGLang's model
runner goes on after its memory baseline (0.5.23 ``model_executor/model_runner.py``:
``init_torch_distributed`` takes the baseline, ``initialize`` loads the model,
``alloc_memory_pool`` sizes the KV cache from the baseline, graphs and warm-up
come last):

``load_model``     this rank's tensor-parallel shards of the weights file
``alloc_kv_pool``  the device KV pool, sized from the memory baseline minus the
                   weights, minus SGLang's slack for activations
``warmup``         one forward pass through every layer and the KV pool

Register with ``initorch --plugin tiny_server.steps`` (or
``registry.load_plugin("tiny_server", register)``): it adds these steps and the
``tiny-server`` profile, an overlay for any device profile.
"""

from __future__ import annotations

import time
from importlib.resources import files
from pathlib import Path
from typing import TYPE_CHECKING

from initorch.plugin import StepContext, StepError, setting, step
from initorch.steps import VISIBLE_DEVICES_ENV, MemoryBaseline, tensor_device

if TYPE_CHECKING:
    from initorch import Registry
    from tiny_server.kv_cache import KVPool
    from tiny_server.model import TinyDecoder

WARMUP_PROMPT = b"warm up"

MODEL_PATH = setting("model.path", str, default="~/.cache/initorch/tiny-server/model.safetensors",
                     description="the weights file (write it once: python -m tiny_server.weights)")
MEM_FRACTION_STATIC = setting(
    "kv_pool.mem_fraction_static", float, default=0.88, exclusive_minimum=0, maximum=1,
    description="share of the memory baseline for weights and KV pool; the rest is slack "
                "for activations (SGLang's --mem-fraction-static)")
MAX_TOKENS = setting("kv_pool.max_tokens", int, default=4096, minimum=1, maximum=2**31,
                     description="at most this many KV token slots, whatever the baseline")
MIN_TOKENS = setting("kv_pool.min_tokens", int, default=64, minimum=1, maximum=2**31,
                     description="fail at start-up when the budget gives fewer KV slots")
# Read by the launcher (not by a step): declared by the plugin, checked like the rest.
SERVER_SETTINGS = (
    setting("server.host", str, default="127.0.0.1", pattern=r"\S+",
            description="address the HTTP endpoint binds (loopback by default)"),
    setting("server.port", int, default=0, minimum=0, maximum=65535,
            description="HTTP port; 0 picks a free one (the ready file says which)"),
    setting("server.max_new_tokens", int, default=64, minimum=1, maximum=4096,
            description="the most tokens one request may ask for"),
)


@step(
    "load_model",
    description="Load this rank's tensor-parallel shards of the model from safetensors",
    requires=["init_model_parallel", "memory_baseline"],
    reads=["init_model_parallel"],
    device_bound=True,
    settings=(MODEL_PATH,),
)
def load_model(ctx: StepContext) -> TinyDecoder:
    from tiny_server.model import TensorParallel, TinyDecoder

    path = Path(str(ctx.setting("model.path"))).expanduser()
    if not path.is_file():
        raise StepError(f"no weights at {path}",
                        hint="generate them once: python -m tiny_server.weights "
                             f"{path}, or set model.path")
    tp = ctx.output("init_model_parallel")["tp"]
    began = time.perf_counter()
    try:
        model = TinyDecoder.load(path, TensorParallel(tp.rank_in_group, tp.size,
                                                      tp.device_group))
    except ValueError as exc:
        raise StepError(f"cannot load {path} over {tp.size} tensor-parallel rank(s): {exc}",
                        hint="choose a parallel.tp_size that divides the model's heads") from exc
    ctx.log.info("model_loaded", path=str(path), tp_rank=tp.rank_in_group, tp_size=tp.size,
                 weight_bytes=model.nbytes, seconds=round(time.perf_counter() - began, 3))
    return model


def kv_pool_tokens(ctx: StepContext, baseline: MemoryBaseline, model: TinyDecoder) -> int:
    """Token slots: the pool budget over bytes per token, at most ``kv_pool.max_tokens``."""
    from tiny_server.kv_cache import KVPool

    config = model.config
    per_token = KVPool.bytes_per_token(config.num_layers, model.local_heads, config.head_dim)
    budget = baseline.pool_budget(float(ctx.setting("kv_pool.mem_fraction_static")),
                                  model.nbytes)
    tokens = min(int(ctx.setting("kv_pool.max_tokens")), budget // per_token)
    needed = int(ctx.setting("kv_pool.min_tokens"))
    if tokens < needed:
        raise StepError(f"the KV pool gets {tokens} token(s) from a budget of "
                        f"{budget / 2**30:.3f} GiB ({per_token} bytes per token), fewer than "
                        f"kv_pool.min_tokens {needed}",
                        hint="free memory on the devices, or raise "
                             "kv_pool.mem_fraction_static")
    return tokens


@step(
    "alloc_kv_pool",
    description="Allocate the device KV pool, sized from the memory baseline",
    requires=["load_model", "memory_baseline"],
    reads=["load_model", "memory_baseline"],
    device_bound=True,
    settings=(MEM_FRACTION_STATIC, MAX_TOKENS, MIN_TOKENS, VISIBLE_DEVICES_ENV),
)
def alloc_kv_pool(ctx: StepContext) -> KVPool:
    from tiny_server.kv_cache import KVPool

    model: TinyDecoder = ctx.output("load_model")
    baseline: MemoryBaseline = ctx.output("memory_baseline")
    tokens = kv_pool_tokens(ctx, baseline, model)
    config = model.config
    pool = KVPool(config.num_layers, tokens, model.local_heads, config.head_dim,
                  device=tensor_device(ctx))
    ctx.log.info("kv_pool_allocated", tokens=tokens, nbytes=pool.device_pool_bytes,
                 baseline_gib=round(baseline.available_bytes / 2**30, 3))
    return pool


@step(
    "warmup",
    description="Run one forward pass (prefill and a decode step) through the KV pool",
    requires=["load_model", "alloc_kv_pool"],
    reads=["load_model", "alloc_kv_pool"],
    after=["warmup_collectives", "register_mem_pool_host"],
    device_bound=True,
)
def warmup(ctx: StepContext) -> list[int]:
    model: TinyDecoder = ctx.output("load_model")
    pool: KVPool = ctx.output("alloc_kv_pool")
    began = time.perf_counter()
    tokens = model.generate(list(WARMUP_PROMPT), 2, pool)
    ctx.log.info("warmup_done", tokens=tokens, seconds=round(time.perf_counter() - began, 3))
    return tokens


def register(registry: Registry) -> None:
    """The example's plugin: its steps and its ``tiny-server`` profile."""
    for definition in (load_model, alloc_kv_pool, warmup):
        registry.steps.add(definition)
    for spec in SERVER_SETTINGS:
        registry.settings.add(spec)
    registry.profiles.add_directory(files("tiny_server") / "profiles", plugin="tiny_server")


__all__ = ["alloc_kv_pool", "load_model", "register", "warmup"]
