"""The tiny Llama of :mod:`tests.sglang.tiny_model`, shaped so that vLLM's CPU attention
serves it: head_dim 32 (hidden 128, 4 heads, 2 KV heads).

vLLM 0.32.0's CPU attention kernel refuses head_dim 16, the SGLang model's:
"Unsupported CPU attention configuration: head_dim=16 isa=2" (the sizes it declares,
``v1/attention/backends/cpu_attn.py:69``, start at 32).  The checkpoint is written by the
SGLang tests' own code with these sizes, so both engines serve one model definition.
"""

from __future__ import annotations

import sys
from pathlib import Path
from types import MappingProxyType

from tests.sglang import tiny_model as sglang_tiny_model

SHAPE = MappingProxyType({"hidden_size": 128, "head_dim": 32})
"""What differs from the SGLang tests' model (heads stay 4 and KV heads 2)."""


def make_tiny_model(directory: Path, seed: int = 0) -> Path:
    """Write the checkpoint into ``directory`` (created) and return it."""
    return sglang_tiny_model.make_tiny_model(directory, seed, shape=SHAPE)


if __name__ == "__main__":
    print(make_tiny_model(Path(sys.argv[1])))
