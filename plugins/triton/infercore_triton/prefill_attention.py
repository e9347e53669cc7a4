"""Paged prefill/extend attention: ragged query runs of any length over the paged cache.

Request ``i`` owns query rows ``query_start_loc[i]:query_start_loc[i+1]``; its ``Q`` query tokens
sit at positions ``seq_lens[i] - Q .. seq_lens[i] - 1``, so a cached prefix (earlier chunks, prefix
cache hits) and this step's tokens are all read from the cache, which must already hold this step's
K/V. One program handles ``BLOCK_M`` query rows of one request for one query head, causally.
"""

from __future__ import annotations

import torch
import triton
import triton.language as tl

from infercore_triton.decode_attention import NO_WINDOW, dot_precision


@triton.jit
def _attend_tile(q, k_cache_ptr, v_cache_ptr, table, n0, hi, q_pos, m, denom, acc, qk_scale, sliding_window,
                 kv_head, d, d_mask, stride_cb, stride_cs, stride_ch,
                 PAGE: tl.constexpr, BLOCK_N: tl.constexpr, DOT_PRECISION: tl.constexpr, MASKED: tl.constexpr):
    """One online-softmax step over key tile ``n0 .. n0 + BLOCK_N``; returns the new (m, denom, acc)."""
    n = n0 + tl.arange(0, BLOCK_N)
    valid = n < hi
    page = tl.load(table + n // PAGE, mask=valid, other=0).to(tl.int64)
    offs = page * stride_cb + (n % PAGE) * stride_cs + kv_head * stride_ch
    kv_mask = valid[:, None] & d_mask[None, :]
    k = tl.load(k_cache_ptr + offs[:, None] + d[None, :], mask=kv_mask, other=0.0)
    v = tl.load(v_cache_ptr + offs[:, None] + d[None, :], mask=kv_mask, other=0.0)
    s = tl.dot(q, tl.trans(k.to(q.dtype)), input_precision=DOT_PRECISION) * qk_scale
    if MASKED:
        allowed = (valid[None, :] & (n[None, :] <= q_pos[:, None])
                   & (n[None, :] > q_pos[:, None] - sliding_window))
        s = tl.where(allowed, s, float("-inf"))
    m_new = tl.maximum(m, tl.max(s, axis=1))
    # Rows with nothing allowed yet keep m = -inf; shift by 0 there so no NaN appears.
    shift = tl.where(m_new == float("-inf"), 0.0, m_new)
    alpha = tl.exp2(m - shift)
    p = tl.exp2(s - shift[:, None])
    denom = denom * alpha + tl.sum(p, axis=1)
    acc = acc * alpha[:, None] + tl.dot(p.to(q.dtype), v.to(q.dtype), input_precision=DOT_PRECISION)
    return m_new, denom, acc


# Step-varying arguments are not specialised on (see the decode kernel).
@triton.jit(do_not_specialize=["block_table_ptr", "seq_lens_ptr", "query_start_loc_ptr", "stride_bt"])
def _prefill_kernel(
    q_ptr, k_cache_ptr, v_cache_ptr, out_ptr, block_table_ptr, seq_lens_ptr, query_start_loc_ptr,
    scale, v_scale, sliding_window,
    stride_qt, stride_qh,
    stride_cb, stride_cs, stride_ch,
    stride_bt,
    stride_ot, stride_oh,
    GROUP: tl.constexpr, HEAD: tl.constexpr, HEAD_PAD: tl.constexpr, PAGE: tl.constexpr,
    BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr, DOT_PRECISION: tl.constexpr, NO_WINDOW_VALUE: tl.constexpr,
):
    seq = tl.program_id(0)
    head = tl.program_id(1)
    m_block = tl.program_id(2)
    q_start = tl.load(query_start_loc_ptr + seq)
    q_len = tl.load(query_start_loc_ptr + seq + 1) - q_start
    if m_block * BLOCK_M >= q_len:
        return
    seq_len = tl.load(seq_lens_ptr + seq)
    context = seq_len - q_len
    kv_head = head // GROUP

    rows = m_block * BLOCK_M + tl.arange(0, BLOCK_M)
    row_mask = rows < q_len
    q_pos = context + rows
    d = tl.arange(0, HEAD_PAD)
    d_mask = d < HEAD
    tokens = (q_start + rows).to(tl.int64)
    q = tl.load(q_ptr + tokens[:, None] * stride_qt + head * stride_qh + d[None, :],
                mask=row_mask[:, None] & d_mask[None, :], other=0.0)
    qk_scale = scale * 1.4426950408889634

    m = tl.full([BLOCK_M], float("-inf"), tl.float32)
    denom = tl.zeros([BLOCK_M], tl.float32)
    acc = tl.zeros([BLOCK_M, HEAD_PAD], tl.float32)
    table = block_table_ptr + seq.to(tl.int64) * stride_bt
    first_pos = context + m_block * BLOCK_M
    lo = tl.maximum(first_pos - sliding_window + 1, 0)
    hi = tl.minimum(first_pos + BLOCK_M, seq_len)
    # Key tiles that every row of the block may see (no window, wholly at or before the block's
    # first position) skip the causal mask; the tiles after them, up to the diagonal, apply it.
    mid = lo
    if sliding_window == NO_WINDOW_VALUE:
        mid = (first_pos + 1) // BLOCK_N * BLOCK_N
    for n0 in range(lo, mid, BLOCK_N):
        m, denom, acc = _attend_tile(q, k_cache_ptr, v_cache_ptr, table, n0, hi, q_pos, m, denom, acc,
                                     qk_scale, sliding_window, kv_head, d, d_mask,
                                     stride_cb, stride_cs, stride_ch, PAGE, BLOCK_N, DOT_PRECISION, False)
    for n0 in range(mid, hi, BLOCK_N):
        m, denom, acc = _attend_tile(q, k_cache_ptr, v_cache_ptr, table, n0, hi, q_pos, m, denom, acc,
                                     qk_scale, sliding_window, kv_head, d, d_mask,
                                     stride_cb, stride_cs, stride_ch, PAGE, BLOCK_N, DOT_PRECISION, True)

    result = acc * (v_scale / tl.where(denom == 0.0, 1.0, denom))[:, None]
    tl.store(out_ptr + tokens[:, None] * stride_ot + head * stride_oh + d[None, :],
             result.to(out_ptr.dtype.element_ty), mask=row_mask[:, None] & d_mask[None, :])


def prefill_attention(q: torch.Tensor, kv_cache: torch.Tensor, query_start_loc: torch.Tensor,
                      seq_lens: torch.Tensor, block_table: torch.Tensor, scale: float, out: torch.Tensor,
                      max_query_len: int, sliding_window: int | None = None,
                      block_m: int | None = None, block_n: int | None = None, num_warps: int = 4,
                      num_stages: int = 3, k_scale: float = 1.0, v_scale: float = 1.0) -> torch.Tensor:
    """Causal attention of every request's query run over its paged context.

    ``q``/``out`` are [num_tokens, heads, head_size]; ``query_start_loc`` has ``num_reqs + 1`` entries;
    ``max_query_len`` bounds the query runs (it sizes the launch grid). Cache entries are multiplied by
    ``k_scale`` / ``v_scale`` when read (an fp8 cache's scales). Fills ``out`` and returns it.
    """
    num_reqs = seq_lens.shape[0]
    _, num_heads, head_size = q.shape
    _, _, page, kv_heads, _ = kv_cache.shape
    head_pad = triton.next_power_of_2(head_size)
    # BLOCK_M is a constexpr, so it must not follow the step's max_query_len: a short prefill run
    # would build a kernel variant while serving. Rows past a short run end their program early.
    if block_m is None:
        block_m = 64 if head_pad <= 128 else 32
    # 64 x 32 tiles, 4 warps, 3 stages: the best of 24 configurations on an H200 for a W-GPU prefill
    # step (16k tokens of 27 prompts, 16/8 heads of 128, bf16): 258 us, 192 TFLOP/s.
    block_n = block_n or 32
    if num_reqs == 0 or max_query_len == 0:
        return out
    k_cache, v_cache = kv_cache[0], kv_cache[1]
    _prefill_kernel[(num_reqs, num_heads, triton.cdiv(max_query_len, block_m))](
        q, k_cache, v_cache, out, block_table, seq_lens, query_start_loc,
        scale * k_scale, float(v_scale), sliding_window or NO_WINDOW,
        q.stride(0), q.stride(1),
        k_cache.stride(0), k_cache.stride(1), k_cache.stride(2),
        block_table.stride(0),
        out.stride(0), out.stride(1),
        GROUP=num_heads // kv_heads, HEAD=head_size, HEAD_PAD=head_pad, PAGE=page,
        BLOCK_M=block_m, BLOCK_N=block_n, DOT_PRECISION=dot_precision(q.dtype), NO_WINDOW_VALUE=NO_WINDOW,
        num_warps=num_warps,
        num_stages=num_stages,
    )
    return out
