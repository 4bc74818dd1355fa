"""A small Llama-style decoder, loaded tensor-parallel from a safetensors file.

Real serving code at toy scale: RMSNorm, rotary position embeddings,
multi-head attention over a paged KV pool, a SwiGLU MLP.  Tensor parallelism
follows Megatron/SGLang: ``q/k/v`` and ``gate/up`` are column-parallel (each
rank holds its heads' and its slice's rows), ``o`` and ``down`` are
row-parallel (each rank holds its input columns; the partial outputs are summed
with an all-reduce on the tensor-parallel group).  Embeddings, norms and the LM
head are replicated, so every rank computes the same logits and picks the
same greedy token.

The weights file is written once by :func:`generate_weights` (seeded, so the
same file on every machine) with the config in its metadata; each rank reads
only its shards with ``safe_open(...).get_slice`` — the loading code a real
checkpoint would need.  The vocabulary is bytes (256 tokens).
"""

from __future__ import annotations

import json
import math
from collections.abc import Sequence
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

import torch
import torch.distributed as dist
import torch.nn.functional as F

from tiny_server.kv_cache import KVPool


@dataclass(frozen=True, slots=True)
class TinyConfig:
    """The shape of the model; stored in the weights file's metadata."""

    vocab_size: int = 256
    hidden_size: int = 64
    num_layers: int = 2
    num_heads: int = 4
    intermediate_size: int = 128
    rope_theta: float = 10000.0
    rms_eps: float = 1e-6

    @property
    def head_dim(self) -> int:
        return self.hidden_size // self.num_heads


def weight_shapes(config: TinyConfig) -> dict[str, tuple[int, ...]]:
    """Every tensor of the checkpoint, by Hugging Face Llama name."""
    h, i = config.hidden_size, config.intermediate_size
    shapes: dict[str, tuple[int, ...]] = {"model.embed_tokens.weight": (config.vocab_size, h)}
    for layer in range(config.num_layers):
        prefix = f"model.layers.{layer}"
        shapes |= {
            f"{prefix}.input_layernorm.weight": (h,),
            f"{prefix}.self_attn.q_proj.weight": (h, h),
            f"{prefix}.self_attn.k_proj.weight": (h, h),
            f"{prefix}.self_attn.v_proj.weight": (h, h),
            f"{prefix}.self_attn.o_proj.weight": (h, h),
            f"{prefix}.post_attention_layernorm.weight": (h,),
            f"{prefix}.mlp.gate_proj.weight": (i, h),
            f"{prefix}.mlp.up_proj.weight": (i, h),
            f"{prefix}.mlp.down_proj.weight": (h, i),
        }
    return shapes | {"model.norm.weight": (h,), "lm_head.weight": (config.vocab_size, h)}


def generate_weights(path: Path, config: TinyConfig = TinyConfig(), seed: int = 1) -> Path:
    """Write a seeded random checkpoint to ``path`` (atomically) and return it."""
    from safetensors.torch import save_file

    generator = torch.Generator().manual_seed(seed)
    tensors = {}
    for name, shape in weight_shapes(config).items():
        if name.endswith("layernorm.weight") or name == "model.norm.weight":
            tensors[name] = torch.ones(shape)
        else:
            tensors[name] = torch.randn(shape, generator=generator) / math.sqrt(shape[-1])
    path.parent.mkdir(parents=True, exist_ok=True)
    partial = path.with_name(path.name + ".partial")
    save_file(tensors, str(partial), metadata={"config": json.dumps(asdict(config))})
    partial.replace(path)
    return path


def read_config(path: Path) -> TinyConfig:
    from safetensors import safe_open

    with safe_open(str(path), framework="pt") as handle:
        metadata = handle.metadata() or {}
    if "config" not in metadata:
        raise ValueError(f"{path} has no tiny-server config in its metadata")
    return TinyConfig(**json.loads(metadata["config"]))


@dataclass(frozen=True, slots=True)
class TensorParallel:
    """This rank's place in the tensor-parallel group, and the group to reduce over."""

    rank: int
    size: int
    group: Any  # a torch.distributed process group (the device group)

    def shard(self, length: int) -> slice:
        if length % self.size:
            raise ValueError(f"{length} does not split over {self.size} tensor-parallel ranks")
        part = length // self.size
        return slice(self.rank * part, (self.rank + 1) * part)

    def all_reduce(self, partial: torch.Tensor) -> torch.Tensor:
        if self.size > 1:
            dist.all_reduce(partial, group=self.group)
        return partial


class TinyDecoder:
    """The loaded model: this rank's shards, and forward passes over a KV pool."""

    def __init__(self, config: TinyConfig, weights: dict[str, torch.Tensor],
                 tp: TensorParallel) -> None:
        self.config, self.weights, self.tp = config, weights, tp
        if config.num_heads % tp.size:
            raise ValueError(f"{config.num_heads} heads do not split over {tp.size} ranks")
        self.local_heads = config.num_heads // tp.size

    @classmethod
    def load(cls, path: Path, tp: TensorParallel) -> TinyDecoder:
        """Read this rank's shards: rows of column-parallel, columns of row-parallel."""
        from safetensors import safe_open

        config = read_config(path)
        weights: dict[str, torch.Tensor] = {}
        with safe_open(str(path), framework="pt") as handle:
            for name in weight_shapes(config):
                tensor = handle.get_slice(name)
                if name.endswith(("q_proj.weight", "k_proj.weight", "v_proj.weight",
                                  "gate_proj.weight", "up_proj.weight")):
                    weights[name] = tensor[tp.shard(tensor.get_shape()[0]), :]
                elif name.endswith(("o_proj.weight", "down_proj.weight")):
                    weights[name] = tensor[:, tp.shard(tensor.get_shape()[1])]
                else:
                    weights[name] = tensor[:]
        return cls(config, weights, tp)

    @property
    def nbytes(self) -> int:
        """Bytes of weights this rank holds."""
        return sum(t.numel() * t.element_size() for t in self.weights.values())

    def _rms_norm(self, x: torch.Tensor, name: str) -> torch.Tensor:
        scale = torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + self.config.rms_eps)
        return x * scale * self.weights[name]

    def _rope(self, x: torch.Tensor, positions: torch.Tensor) -> torch.Tensor:
        half = self.config.head_dim // 2
        freqs = self.config.rope_theta ** (-torch.arange(half, dtype=torch.float32) / half)
        angles = positions.float()[:, None] * freqs[None, :]
        cos, sin = angles.cos()[:, None, :], angles.sin()[:, None, :]
        first, second = x[..., :half], x[..., half:]
        return torch.cat((first * cos - second * sin, first * sin + second * cos), dim=-1)

    def _attention(self, layer: int, x: torch.Tensor, positions: torch.Tensor,
                   slots: torch.Tensor, context: torch.Tensor, pool: KVPool) -> torch.Tensor:
        w = self.weights
        prefix = f"model.layers.{layer}.self_attn"
        shape = (x.shape[0], self.local_heads, self.config.head_dim)
        q = self._rope((x @ w[f"{prefix}.q_proj.weight"].T).view(shape), positions)
        k = self._rope((x @ w[f"{prefix}.k_proj.weight"].T).view(shape), positions)
        v = (x @ w[f"{prefix}.v_proj.weight"].T).view(shape)
        pool.write(layer, slots, k, v)
        keys, values = pool.read(layer, context)  # [context, heads, head_dim]
        scores = torch.einsum("qhd,khd->hqk", q, keys) / math.sqrt(self.config.head_dim)
        visible = torch.arange(len(context))[None, :] <= positions[:, None]
        scores = scores.masked_fill(~visible[None], float("-inf"))
        attended = torch.einsum("hqk,khd->qhd", scores.softmax(-1), values)
        partial = attended.reshape(x.shape[0], -1) @ w[f"{prefix}.o_proj.weight"].T
        return self.tp.all_reduce(partial)

    def _mlp(self, layer: int, x: torch.Tensor) -> torch.Tensor:
        w = self.weights
        prefix = f"model.layers.{layer}.mlp"
        hidden = F.silu(x @ w[f"{prefix}.gate_proj.weight"].T) * (
            x @ w[f"{prefix}.up_proj.weight"].T)
        return self.tp.all_reduce(hidden @ w[f"{prefix}.down_proj.weight"].T)

    @torch.no_grad()
    def forward(self, tokens: torch.Tensor, positions: torch.Tensor, slots: torch.Tensor,
                context: torch.Tensor, pool: KVPool) -> torch.Tensor:
        """Logits for ``tokens`` at ``positions``; their K/V go to ``slots``, and
        they attend over the request's ``context`` slots (positions 0..n)."""
        x = self.weights["model.embed_tokens.weight"][tokens]
        for layer in range(self.config.num_layers):
            normed = self._rms_norm(x, f"model.layers.{layer}.input_layernorm.weight")
            x = x + self._attention(layer, normed, positions, slots, context, pool)
            normed = self._rms_norm(x, f"model.layers.{layer}.post_attention_layernorm.weight")
            x = x + self._mlp(layer, normed)
        x = self._rms_norm(x, "model.norm.weight")
        return x @ self.weights["lm_head.weight"].T

    def generate(self, prompt: Sequence[int], max_new_tokens: int, pool: KVPool) -> list[int]:
        """Greedy decoding: a prefill of the prompt, then one token per step."""
        slots = pool.allocate(len(prompt) + max_new_tokens)
        try:
            tokens = torch.tensor(list(prompt), dtype=torch.long)
            positions = torch.arange(len(prompt))
            logits = self.forward(tokens, positions, slots[:len(prompt)],
                                  slots[:len(prompt)], pool)
            generated: list[int] = []
            for step in range(max_new_tokens):
                token = int(logits[-1].argmax())
                generated.append(token)
                if step == max_new_tokens - 1:
                    break
                position = len(prompt) + step
                logits = self.forward(torch.tensor([token]), torch.tensor([position]),
                                      slots[position:position + 1], slots[:position + 1], pool)
            return generated
        finally:
            pool.free(slots)
