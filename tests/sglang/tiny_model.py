"""A tiny Llama checkpoint made locally, so that real SGLang serves a real model here.

Nothing is downloaded: two decoder layers, hidden size 64, a 258-token vocabulary, random
bf16 weights from a fixed seed in safetensors, and a ``tokenizers`` WordLevel tokenizer
(words ``w0`` .. ``w255`` plus ``<s>``/``</s>``).  The same seed gives the same weights, so
greedy generations are comparable across runs, modes and tensor-parallel sizes.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from pathlib import Path
from typing import Any

VOCAB = [*(f"w{i}" for i in range(256)), "<s>", "</s>"]
BOS, EOS = 256, 257

CONFIG = {
    "architectures": ["LlamaForCausalLM"],
    "model_type": "llama",
    "hidden_size": 64,
    "intermediate_size": 128,
    "num_hidden_layers": 2,
    "num_attention_heads": 4,
    "num_key_value_heads": 2,
    "head_dim": 16,
    "vocab_size": len(VOCAB),
    "max_position_embeddings": 512,
    "rms_norm_eps": 1e-5,
    "rope_theta": 10000.0,
    "hidden_act": "silu",
    "tie_word_embeddings": False,
    "torch_dtype": "bfloat16",
    "bos_token_id": BOS,
    "eos_token_id": EOS,
}


def _weights(config: Mapping[str, Any], seed: int) -> dict[str, object]:
    import torch

    generator = torch.Generator().manual_seed(seed)
    hidden, inter = config["hidden_size"], config["intermediate_size"]
    heads, kv_heads, head_dim = (config["num_attention_heads"], config["num_key_value_heads"],
                                 config["head_dim"])

    def rand(*shape: int) -> torch.Tensor:
        return (torch.randn(*shape, generator=generator) * 0.08).to(torch.bfloat16)

    tensors: dict[str, object] = {
        "model.embed_tokens.weight": rand(len(VOCAB), hidden),
        "model.norm.weight": torch.ones(hidden, dtype=torch.bfloat16),
        "lm_head.weight": rand(len(VOCAB), hidden),
    }
    for layer in range(int(config["num_hidden_layers"])):
        prefix = f"model.layers.{layer}"
        tensors |= {
            f"{prefix}.self_attn.q_proj.weight": rand(heads * head_dim, hidden),
            f"{prefix}.self_attn.k_proj.weight": rand(kv_heads * head_dim, hidden),
            f"{prefix}.self_attn.v_proj.weight": rand(kv_heads * head_dim, hidden),
            f"{prefix}.self_attn.o_proj.weight": rand(hidden, heads * head_dim),
            f"{prefix}.mlp.gate_proj.weight": rand(inter, hidden),
            f"{prefix}.mlp.up_proj.weight": rand(inter, hidden),
            f"{prefix}.mlp.down_proj.weight": rand(hidden, inter),
            f"{prefix}.input_layernorm.weight": torch.ones(hidden, dtype=torch.bfloat16),
            f"{prefix}.post_attention_layernorm.weight": torch.ones(hidden,
                                                                    dtype=torch.bfloat16),
        }
    return tensors


def _tokenizer() -> dict[str, object]:
    """A ``tokenizers`` WordLevel tokenizer as JSON, split on whitespace."""
    return {
        "version": "1.0",
        "truncation": None,
        "padding": None,
        "added_tokens": [
            {"id": i, "content": token, "single_word": False, "lstrip": False,
             "rstrip": False, "normalized": False, "special": True}
            for i, token in ((BOS, "<s>"), (EOS, "</s>"))
        ],
        "normalizer": None,
        "pre_tokenizer": {"type": "WhitespaceSplit"},
        "post_processor": None,
        "decoder": {"type": "WordPiece", "prefix": "##", "cleanup": False},
        "model": {"type": "WordLevel", "vocab": {t: i for i, t in enumerate(VOCAB)},
                  "unk_token": "w0"},
    }


def make_tiny_model(directory: Path, seed: int = 0,
                    shape: Mapping[str, Any] | None = None) -> Path:
    """Write the checkpoint into ``directory`` (created) and return it; ``shape``
    overrides sizes of :data:`CONFIG` (another engine's kernels may want others)."""
    from safetensors.torch import save_file

    config = {**CONFIG, **(shape or {})}
    directory.mkdir(parents=True, exist_ok=True)
    (directory / "config.json").write_text(json.dumps(config, indent=2))
    (directory / "generation_config.json").write_text(json.dumps(
        {"bos_token_id": BOS, "eos_token_id": EOS}))
    (directory / "tokenizer.json").write_text(json.dumps(_tokenizer()))
    (directory / "tokenizer_config.json").write_text(json.dumps({
        "tokenizer_class": "PreTrainedTokenizerFast", "bos_token": "<s>", "eos_token": "</s>",
        "unk_token": "w0", "model_max_length": 512, "clean_up_tokenization_spaces": False,
    }))
    save_file(_weights(config, seed), str(directory / "model.safetensors"))  # type: ignore[arg-type]
    return directory


if __name__ == "__main__":
    import sys

    print(make_tiny_model(Path(sys.argv[1])))
