"""The one Attention layer every model uses; it never exposes metadata or the cache layout."""

from __future__ import annotations

import torch
from torch import nn

from infercore.attention.backend import AttentionImpl
from infercore.attention.spec import AttentionLayerSpec
from infercore.forward_context import get_forward_context


class Attention(nn.Module):
    """Paged attention for one decoder layer.

    The model runner binds ``impl`` (from the selected backend) and ``kv_cache`` (this layer's
    slice of the pool) after the model is built; the model only calls ``forward(q, k, v)``. The
    layer's :attr:`spec` is how the model declares its KV cache: the runner sizes the cache from
    the specs of the model's Attention layers (heads, KV heads, head size, window), not from
    the Hugging Face config's field names. ``k_scale`` / ``v_scale`` are the per-tensor scales of an
    fp8 KV cache, set by the weight loader from the checkpoint (1.0 when it has none).
    """

    def __init__(self, num_heads: int, head_size: int, scale: float, num_kv_heads: int,
                 layer_index: int, sliding_window: int | None = None,
                 alibi_slopes: tuple[float, ...] | None = None) -> None:
        super().__init__()
        self.spec = AttentionLayerSpec(num_heads=num_heads, head_size=head_size, num_kv_heads=num_kv_heads,
                                       scale=scale, layer_index=layer_index, sliding_window=sliding_window,
                                       alibi_slopes=tuple(alibi_slopes) if alibi_slopes is not None else None)
        self.num_heads = num_heads
        self.head_size = head_size
        self.scale = scale
        self.num_kv_heads = num_kv_heads
        self.layer_index = layer_index
        self.sliding_window = sliding_window
        self.k_scale = 1.0
        self.v_scale = 1.0
        self.impl: AttentionImpl | None = None
        self.kv_cache: torch.Tensor = torch.empty(0)

    def forward(self, q: torch.Tensor, k: torch.Tensor, v: torch.Tensor) -> torch.Tensor:
        """q: [T, num_heads * head_size]; k, v: [T, num_kv_heads * head_size] → [T, num_heads * head_size].

        Inputs may be row-strided (column slices of the fused QKV output) with a contiguous last
        dimension; the backend receives them as such views.
        """
        if self.impl is None:
            raise RuntimeError("Attention layer has no backend bound; build the model through the model runner")
        ctx = get_forward_context()
        n = q.shape[0]
        q = q.view(n, self.num_heads, self.head_size)
        k = k.view(n, self.num_kv_heads, self.head_size)
        v = v.view(n, self.num_kv_heads, self.head_size)
        out = torch.empty_like(q)
        self.impl.forward(q, k, v, self.kv_cache, ctx.attn_metadata, out)
        return out.view(n, self.num_heads * self.head_size)
