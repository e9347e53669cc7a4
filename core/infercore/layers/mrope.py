"""Multimodal rotary embedding (M-RoPE, Qwen2-VL family): three position rows (time, height, width).

A head's rotary frequencies are split into ``mrope_section`` = (s_t, s_h, s_w) consecutive runs; the first
run rotates by the token's time position, the next by its height position, the last by its width position.
Text tokens have the same number in all three rows, which makes M-RoPE plain RoPE. Positions arrive as
[3, T] (or [T] for text only); the per-token cos/sin rows are gathered section by section from the plain
rotary's cache and handed to the platform's rotary op as a cache indexed by token.
"""

from __future__ import annotations

from collections.abc import Sequence

import torch
from torch import nn

from infercore.layers.rotary_embedding import RotaryEmbedding


class MRotaryEmbedding(nn.Module):
    """Wraps a full :class:`RotaryEmbedding`; ``forward(positions [3, T] | [T], q, k)``.

    Layers whose rotaries are equal may share ``memo`` (a dict the model clears before each forward pass):
    the per-token cos/sin rows are then gathered once per pass, not once per layer."""

    def __init__(self, rotary: RotaryEmbedding, mrope_section: Sequence[int],
                 memo: dict[str, torch.Tensor] | None = None) -> None:
        super().__init__()
        self.memo = memo
        half = rotary.rotary_dim // 2
        if sum(mrope_section) != half or len(mrope_section) != 3:
            raise ValueError(f"mrope_section {list(mrope_section)} must be 3 runs summing to rotary_dim / 2 = {half}")
        self.rotary = rotary
        self.head_size = rotary.head_size
        self.rotary_dim = rotary.rotary_dim
        self.is_neox = rotary.is_neox
        section = torch.repeat_interleave(torch.arange(3), torch.tensor(list(mrope_section)))
        #: Which position row each cache column reads: the cos half, then the sin half.
        self.register_buffer("column_row", torch.cat((section, section)), persistent=False)

    @property
    def is_full(self) -> bool:
        return self.rotary.is_full

    @property
    def cos_sin_cache(self) -> torch.Tensor:
        return self.rotary.cos_sin_cache

    def token_cache(self, positions: torch.Tensor) -> torch.Tensor:
        """[T, rotary_dim] cos/sin rows for ``positions`` [3, T]."""
        cache = self.rotary.cos_sin_cache
        columns = torch.arange(cache.shape[1], device=cache.device)
        rows = positions.index_select(0, self.column_row).t()  # [T, rotary_dim]: each column's position
        return cache[rows, columns]

    def forward(self, positions: torch.Tensor, q: torch.Tensor, k: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        if positions.dim() == 1:
            return self.rotary(positions, q, k)
        cache = self.memo.get("cache") if self.memo is not None else None
        if cache is None:
            cache = self.token_cache(positions)
            if self.memo is not None:
                self.memo["cache"] = cache
        index = torch.arange(positions.shape[1], device=positions.device)
        return self.rotary._op(index, q, k, cache, self.head_size, self.is_neox)
