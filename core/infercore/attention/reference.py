"""A plain torch reference of paged attention: the definition backends and kernels are tested against.

Cache layout: [2 (K, V), num_blocks, block_size, num_kv_heads, head_size]. Token slot
``block_id * block_size + offset``; slot -1 marks a padding token and is skipped. An fp8 cache holds
entries quantized with the layer's k/v scales (:mod:`infercore.kv_cache.fp8`).
"""

from __future__ import annotations

import torch
import torch.nn.functional as F

from infercore.attention.visible_bounds import bounded_mask
from infercore.kv_cache.fp8 import dequantize_kv, is_fp8_kv, quantize_kv
from infercore.ops.reference import alibi_bias


def write_kv(k: torch.Tensor, v: torch.Tensor, kv_cache: torch.Tensor, slot_mapping: torch.Tensor,
             k_scale: float = 1.0, v_scale: float = 1.0) -> None:
    """Store ``k``/``v`` [T, kv_heads, head_size] at ``slot_mapping`` [≥T] (entries past T and -1 ignored).

    An fp8 cache stores them quantized with ``k_scale`` / ``v_scale`` (:func:`quantize_kv`).
    """
    num_tokens = k.shape[0]
    slots = slot_mapping[:num_tokens]
    valid = slots >= 0
    if not bool(valid.all()):
        slots, k, v = slots[valid], k[valid], v[valid]
    kv_heads, head_size = kv_cache.shape[-2:]
    if is_fp8_kv(kv_cache.dtype):
        # torch has no index_copy_ for float8 on every device: copy the bytes.
        bytes_cache = kv_cache.view(torch.uint8)
        bytes_cache[0].view(-1, kv_heads, head_size).index_copy_(0, slots, quantize_kv(k, k_scale).view(torch.uint8))
        bytes_cache[1].view(-1, kv_heads, head_size).index_copy_(0, slots, quantize_kv(v, v_scale).view(torch.uint8))
        return
    kv_cache[0].view(-1, kv_heads, head_size).index_copy_(0, slots, k.to(kv_cache.dtype))
    kv_cache[1].view(-1, kv_heads, head_size).index_copy_(0, slots, v.to(kv_cache.dtype))


def gather_context(kv_cache: torch.Tensor, block_row: torch.Tensor, seq_len: int,
                   k_scale: float = 1.0, v_scale: float = 1.0) -> tuple[torch.Tensor, torch.Tensor]:
    """K and V [seq_len, kv_heads, head_size] of one request, read through its block-table row (an fp8
    cache's entries dequantized to float32 with ``k_scale`` / ``v_scale``)."""
    block_size = kv_cache.shape[2]
    blocks = block_row[: -(-seq_len // block_size)].long()
    fp8 = is_fp8_kv(kv_cache.dtype)
    # Gather an fp8 cache's bytes: not every device indexes float8 tensors.
    source = kv_cache.view(torch.uint8) if fp8 else kv_cache
    k = source[0, blocks].flatten(0, 1)[:seq_len]
    v = source[1, blocks].flatten(0, 1)[:seq_len]
    if fp8:
        return dequantize_kv(k.view(kv_cache.dtype), k_scale), dequantize_kv(v.view(kv_cache.dtype), v_scale)
    return k, v


def causal_mask(query_len: int, seq_len: int, sliding_window: int | None,
                device: torch.device) -> torch.Tensor:
    """[query_len, seq_len] bool, True where query token j (at position seq_len - query_len + j) may
    attend to context position t: t ≤ its position and, with a window, position - t < window."""
    q_pos = torch.arange(seq_len - query_len, seq_len, device=device).unsqueeze(1)
    k_pos = torch.arange(seq_len, device=device).unsqueeze(0)
    allowed = k_pos <= q_pos
    if sliding_window is not None:
        allowed &= (q_pos - k_pos) < sliding_window
    return allowed


def attend(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, mask: torch.Tensor | None,
           scale: float, alibi_slopes: torch.Tensor | None = None) -> torch.Tensor:
    """SDPA over one request: q [Q, heads, D], k/v [L, kv_heads, D] (GQA), mask [Q, L] → [Q, heads, D].

    With ``alibi_slopes`` [heads], each head's scores get :func:`alibi_bias` added (``mask`` required).
    """
    attn_mask: torch.Tensor | None = mask
    if alibi_slopes is not None:
        assert mask is not None, "an ALiBi bias needs the causal mask"
        bias = alibi_bias(alibi_slopes, q.shape[0], k.shape[0]).to(q.dtype)
        attn_mask = bias.masked_fill(~mask, float("-inf"))
    out = F.scaled_dot_product_attention(
        q.transpose(0, 1), k.transpose(0, 1).to(q.dtype), v.transpose(0, 1).to(q.dtype),
        attn_mask=attn_mask, is_causal=False, scale=scale, enable_gqa=q.shape[1] != k.shape[1])
    return out.transpose(0, 1)


def paged_attention(q: torch.Tensor, kv_cache: torch.Tensor, query_start_loc: torch.Tensor,
                    seq_lens: torch.Tensor, block_table: torch.Tensor, scale: float, out: torch.Tensor,
                    sliding_window: int | None = None, alibi_slopes: torch.Tensor | None = None,
                    num_reqs: int | None = None, k_scale: float = 1.0, v_scale: float = 1.0,
                    visible_until: torch.Tensor | None = None) -> torch.Tensor:
    """Attention of every request's query tokens over its cached context (this step's K/V written).

    ``q``/``out`` are [T, heads, head_size]; request ``i`` owns rows
    ``query_start_loc[i]:query_start_loc[i+1]`` and has ``seq_lens[i]`` context tokens. Only the
    first ``num_reqs`` requests are read (default: all of ``seq_lens``). An fp8 cache is read back with
    ``k_scale`` / ``v_scale``. ``visible_until`` (host, [T]) lets query token ``j`` see context positions up
    to ``visible_until[j]`` instead of its own (:mod:`infercore.attention.visible_bounds`).
    """
    n = len(seq_lens) if num_reqs is None else num_reqs
    starts = query_start_loc[: n + 1].tolist()
    lens = seq_lens[:n].tolist()
    for i, seq_len in enumerate(lens):
        start, end = starts[i], starts[i + 1]
        if end == start:
            continue
        k, v = gather_context(kv_cache, block_table[i], seq_len, k_scale, v_scale)
        if visible_until is None:
            mask = causal_mask(end - start, seq_len, sliding_window, q.device)
        else:
            mask = bounded_mask(end - start, seq_len, sliding_window, visible_until[start:end], q.device)
        out[start:end] = attend(q[start:end], k, v, mask, scale, alibi_slopes)
    return out
