"""Bidirectional attention over packed sequences: the ``encoder_attention`` custom op's reference.

Encoder-only models' attention layers (BERT, through the attention backends) and vision towers (every
image a sequence of patches) both attend this way; a platform may register a faster kernel under the
op's name (``platform=NAME``) with the same signature.
"""

from __future__ import annotations

import torch
import torch.nn.functional as F


def encoder_attention(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, cu_seqlens_cpu: torch.Tensor,
                      scale: float, out: torch.Tensor | None = None) -> torch.Tensor:
    """Every token of sequence ``i`` (tokens ``cu_seqlens_cpu[i]:cu_seqlens_cpu[i + 1]``) attends to every
    token of it. ``q``/``out`` are [T, heads, D], ``k``/``v`` [T, kv_heads, D] (GQA); returns ``out``.

    Sequences are padded to the longest into one batched SDPA call with a key mask, so many short sequences
    are one launch, not one per sequence.
    """
    if out is None:
        out = torch.empty_like(q)
    starts = cu_seqlens_cpu.to(torch.int64)
    num_seqs = len(starts) - 1
    total = int(starts[-1]) if num_seqs > 0 else 0
    if total == 0:
        return out
    lengths = starts[1:] - starts[:-1]
    enable_gqa = q.shape[1] != k.shape[1]
    if num_seqs == 1 or bool((lengths == lengths[0]).all()):
        # Equal lengths (one sequence, or same-size images): a plain batch, no mask.
        n, length = num_seqs, int(lengths[0])

        def batched(x: torch.Tensor) -> torch.Tensor:
            return x[:total].reshape(n, length, x.shape[1], x.shape[2]).transpose(1, 2)

        o = F.scaled_dot_product_attention(batched(q), batched(k), batched(v), scale=scale, enable_gqa=enable_gqa)
        out[:total] = o.transpose(1, 2).reshape(total, q.shape[1], q.shape[2])
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
