"""EncoderAttention: bidirectional attention over a batch of whole sequences with no KV cache, as a vision
tower needs (each image one sequence of patch tokens).

It is not an :class:`~infercore.attention.Attention` layer: it declares no KV cache and is not bound to the
step's attention backend (a tower runs outside the decoder's step, over images rather than requests). It
runs the ``encoder_attention`` custom op through the platform (:func:`infercore.ops.dispatch.get_op`),
whose reference is the one encoder-only models' backends use
(:func:`infercore.attention.encoder_only.encoder_only_attention`).
"""

from __future__ import annotations

import torch
from torch import nn


class EncoderAttention(nn.Module):
    """``forward(q, k, v, cu_seqlens_cpu)``: q [T, heads * D], k/v [T, kv_heads * D] → [T, heads * D], every
    token attending to every token of its own sequence (``cu_seqlens_cpu``: int [num_seqs + 1] offsets)."""

    def __init__(self, num_heads: int, head_size: int, scale: float, num_kv_heads: int | None = None) -> None:
        super().__init__()
        self.num_heads = num_heads
        self.num_kv_heads = num_kv_heads or num_heads
        self.head_size = head_size
        self.scale = scale

    def forward(self, q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, cu_seqlens_cpu: torch.Tensor) -> torch.Tensor:
        from infercore.ops.dispatch import get_op

        n, d = q.shape[0], self.head_size
        out = get_op("encoder_attention")(q.reshape(n, self.num_heads, d), k.reshape(n, self.num_kv_heads, d),
                                          v.reshape(n, self.num_kv_heads, d), cu_seqlens_cpu, self.scale)
        return out.reshape(n, self.num_heads * d)
