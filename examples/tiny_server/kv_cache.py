"""The device KV pool: per-layer key and value slots, handed out per request.

Sized once at start-up from the memory baseline (see ``alloc_kv_pool``), like
SGLang's token-to-KV pool: a fixed number of token slots, each holding this
rank's heads for every layer.  Requests take slots from a free list and give
them back when they finish.
"""

from __future__ import annotations

import threading

import torch


class KVPoolExhausted(RuntimeError):
    """A request needs more token slots than are free."""


class KVPool:
    """``[layers, tokens, local heads, head dim]`` keys and values on ``device``."""

    def __init__(self, layers: int, tokens: int, heads: int, head_dim: int,
                 dtype: torch.dtype = torch.float32, device: str | torch.device = "cpu") -> None:
        shape = (layers, tokens, heads, head_dim)
        self.keys = torch.zeros(shape, dtype=dtype, device=device)
        self.values = torch.zeros(shape, dtype=dtype, device=device)
        self.tokens = tokens
        self._free = list(range(tokens))
        self._lock = threading.Lock()

    @staticmethod
    def bytes_per_token(layers: int, heads: int, head_dim: int,
                        dtype: torch.dtype = torch.float32) -> int:
        """Keys and values of one token for every layer."""
        return 2 * layers * heads * head_dim * torch.empty((), dtype=dtype).element_size()

    @property
    def device_pool_bytes(self) -> int:
        """What the HiCache host pool is sized from (``hicache.host_pool_ratio``)."""
        return 2 * self.keys.numel() * self.keys.element_size()

    @property
    def free_slots(self) -> int:
        with self._lock:
            return len(self._free)

    def allocate(self, count: int) -> torch.Tensor:
        with self._lock:
            if count > len(self._free):
                raise KVPoolExhausted(f"{count} KV slots needed, {len(self._free)} free "
                                      f"of {self.tokens}")
            taken, self._free = self._free[:count], self._free[count:]
        return torch.tensor(taken, dtype=torch.long)

    def free(self, slots: torch.Tensor) -> None:
        with self._lock:
            self._free.extend(int(s) for s in slots)

    def write(self, layer: int, slots: torch.Tensor, keys: torch.Tensor,
              values: torch.Tensor) -> None:
        self.keys[layer, slots] = keys
        self.values[layer, slots] = values

    def read(self, layer: int, slots: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        return self.keys[layer, slots], self.values[layer, slots]
