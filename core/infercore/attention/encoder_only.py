"""Encoder-only attention: every token of a sequence attends to every other token of it (bidirectional),
and nothing is read from or written to a KV cache.

Encoder models (BERT, XLM-RoBERTa) declare it on their :class:`~infercore.attention.Attention` layers
(``attn_type=ENCODER_ONLY``). A backend that runs it sets
:attr:`~infercore.attention.AttentionBackend.supports_encoder_only` and, in its impl's ``forward``, calls
:func:`encoder_only_attention` or a kernel of its own when ``self.spec.attn_type`` is ``ENCODER_ONLY``.
The engine computes such a model's prompts in one step each (no chunked prefill, no prefix cache) and
gives it no KV cache memory.
"""

from __future__ import annotations

from typing import Any

import torch
import torch.nn.functional as F

#: The attention types of the plugin API (``AttentionLayerSpec.attn_type``).
DECODER = "decoder"
ENCODER_ONLY = "encoder_only"
ATTENTION_TYPES = (DECODER, ENCODER_ONLY)


def encoder_only_attention(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, query_start_loc_cpu: torch.Tensor,
                           num_reqs: int, scale: float, out: torch.Tensor) -> torch.Tensor:
    """Bidirectional attention within each request: the reference every backend is checked against.

    ``q``/``out`` are [T, heads, D], ``k``/``v`` [T, kv_heads, D] (GQA); request ``i`` owns tokens
    ``query_start_loc_cpu[i]:query_start_loc_cpu[i + 1]``. The requests are padded to the longest into one
    batched SDPA call with a key mask, so a step of many short sequences is one launch, not one per request.
    """
    starts = query_start_loc_cpu[: num_reqs + 1].to(torch.int64)
    lengths = starts[1:] - starts[:-1]
    total = int(starts[-1]) if num_reqs else 0
    if total == 0:
        return out
    enable_gqa = q.shape[1] != k.shape[1]
    if num_reqs == 1:
        o = F.scaled_dot_product_attention(q[:total].transpose(0, 1), k[:total].transpose(0, 1),
                                           v[:total].transpose(0, 1), scale=scale, enable_gqa=enable_gqa)
        out[:total] = o.transpose(0, 1)
        return out
    longest = int(lengths.max())
    offsets = torch.arange(longest).unsqueeze(0)
    valid = offsets < lengths.unsqueeze(1)  # [B, L]
    index = (starts[:-1].unsqueeze(1) + offsets).clamp(max=total - 1)
    device = q.device
    index_d, valid_d = index.to(device), valid.to(device)

    def padded(x: torch.Tensor) -> torch.Tensor:  # [B, heads, L, D]
        return x[index_d].permute(0, 2, 1, 3)

    o = F.scaled_dot_product_attention(padded(q), padded(k), padded(v), attn_mask=valid_d[:, None, None, :],
                                       scale=scale, enable_gqa=enable_gqa)
    out[:total] = o.permute(0, 2, 1, 3)[valid_d]
    return out


def encoder_only_reasons(backend: Any, encoder_only: bool) -> list[str]:
    """Why ``backend`` cannot serve a model with encoder-only layers (empty when it can or need not)."""
    if not encoder_only or getattr(backend, "supports_encoder_only", False):
        return []
    return [f"it has no encoder-only (bidirectional) attention, which this model's layers use; run on a platform "
            f"whose attention backend sets supports_encoder_only (reference, cpu, triton), not {backend.name!r}"]
