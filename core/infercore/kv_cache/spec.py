"""KVCacheSpec: all the scheduler knows of a layer's KV cache."""

from __future__ import annotations

from dataclasses import dataclass

import torch


@dataclass(frozen=True)
class KVCacheSpec:
    """The cache of one attention layer: a block holds K and V of ``block_size`` tokens."""

    block_size: int
    num_kv_heads: int
    head_size: int
    dtype: torch.dtype

    @property
    def page_size_bytes(self) -> int:
        """Bytes one block takes in one layer (K and V)."""
        itemsize = torch.empty((), dtype=self.dtype).element_size()
        return 2 * self.block_size * self.num_kv_heads * self.head_size * itemsize
