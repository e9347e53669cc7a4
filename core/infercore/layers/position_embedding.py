"""Learned (absolute) position embeddings, as GPT-2 and OPT use them."""

from __future__ import annotations

import torch
from torch import nn

from infercore.ops import get_op


class LearnedPositionEmbedding(nn.Module):
    """A table of ``num_positions`` learned vectors looked up by each token's position (plus ``offset``,
    e.g. 2 for OPT), through the custom op ``embedding``."""

    def __init__(self, num_positions: int, embedding_dim: int, offset: int = 0) -> None:
        super().__init__()
        self.offset = offset
        self.num_positions = num_positions
        self.weight = nn.Parameter(torch.zeros(num_positions + offset, embedding_dim))
        self._op = get_op("embedding")

    def forward(self, positions: torch.Tensor) -> torch.Tensor:
        return self._op(positions + self.offset if self.offset else positions, self.weight)
