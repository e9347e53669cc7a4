"""Verification attention with each sequence's KV read once: the short queries of a speculating step (a row's
last token and its drafts, at most ``SHORT`` tokens) attended by one program per (sequence, KV head, split)
over all of its query tokens, rather than one program per token (``decode_attention(short_queries=...)``),
which loads the same context once per token.

The program's rows are ``token × query head of the KV head``: 4 tokens of a group of 4 fill the 16 rows a
tensor-core dot takes anyway. Each row masks the context past its own token (its causal end) and before
its window's start; the splits cut the sequence's whole range, so a split may hold nothing for some rows
(an empty partial, merged away). Partials and the merge are the decode kernel's (one partial row per flat
query token), so the output is the same computation regrouped.

On by default over bf16/fp16/fp32 caches with the splits merged in their own launch; otherwise, or with
``INFERCORE_VERIFY_SHARED_KV=0``, the decode kernel's per-token path runs. At c = 256 on the 8B shape (W-GPU-8B,
k = 3, forced acceptance 0.7, an H100) it took a draft model from 0.996 to 1.002 of the run without
speculation and an EAGLE-3 head to 1.005: speculation runs in the tail, where each row's query tokens would
otherwise read its whole context once each.
"""

from __future__ import annotations

import os

import torch
import triton
import triton.language as tl

SHARED_KV_ENV = "INFERCORE_VERIFY_SHARED_KV"


def shares_kv(kv_cache: torch.Tensor) -> bool:
    """Whether short queries over ``kv_cache`` may take this kernel: not turned off (``=0``), and not an fp8
    cache (the caller also needs the splits merged in their own launch)."""
    return os.environ.get(SHARED_KV_ENV, "1").strip() != "0" and kv_cache.element_size() > 1


@triton.jit(do_not_specialize=["block_table_ptr", "seq_lens_ptr", "query_start_loc_ptr", "stride_bt", "num_splits",
                               "stride_lt", "stride_lh"])  # the last two follow the split count
def _verify_split_kernel(
    q_ptr, k_cache_ptr, v_cache_ptr, block_table_ptr, seq_lens_ptr, query_start_loc_ptr,
    out_ptr, part_out_ptr, part_lse_ptr,
    scale, sliding_window, num_splits,
    stride_qt, stride_qh, stride_cb, stride_cs, stride_ch, stride_bt,
    stride_ot, stride_oh, stride_pt, stride_ph, stride_ps, stride_lt, stride_lh,
    GROUP: tl.constexpr, SHORT: tl.constexpr, ROWS: tl.constexpr, HEAD: tl.constexpr, HEAD_PAD: tl.constexpr,
    PAGE: tl.constexpr, BLOCK_N: tl.constexpr, DOT_PRECISION: tl.constexpr, ONE_SPLIT: tl.constexpr,
):
    seq = tl.program_id(0).to(tl.int64)  # the grid has one row of programs per sequence
    kv_head = tl.program_id(1)
    split = tl.program_id(2)
    q_start = tl.load(query_start_loc_ptr + seq)
    q_len = tl.load(query_start_loc_ptr + seq + 1) - q_start
    if (q_len > 0) & (q_len <= SHORT):
        seq_len = tl.load(seq_lens_ptr + seq)
        r = tl.arange(0, ROWS)
        t = r // GROUP
        heads = kv_head * GROUP + r % GROUP
        row_ok = t < q_len
        token = (q_start + t).to(tl.int64)
        # Row r attends keys [start, end): its token sits at position end - 1.
        end = seq_len - (q_len - 1 - t)
        start = tl.maximum(end - sliding_window, 0)
        first = tl.maximum(seq_len - (q_len - 1) - sliding_window, 0)  # the first token's start: the lowest
        chunk = tl.cdiv(tl.cdiv(seq_len - first, num_splits), BLOCK_N) * BLOCK_N
        lo = first + split * chunk
        hi = tl.minimum(lo + chunk, seq_len)
        d = tl.arange(0, HEAD_PAD)
        d_mask = d < HEAD
        q = tl.load(q_ptr + token[:, None] * stride_qt + heads[:, None] * stride_qh + d[None, :],
                    mask=row_ok[:, None] & d_mask[None, :], other=0.0)
        qk_scale = scale * 1.4426950408889634  # scores in base 2, as the decode kernel's
        m = tl.full([ROWS], float("-inf"), tl.float32)
        denom = tl.zeros([ROWS], tl.float32)
        acc = tl.zeros([ROWS, HEAD_PAD], tl.float32)
        table = block_table_ptr + seq * stride_bt
        for n0 in range(lo, hi, BLOCK_N):
            n = n0 + tl.arange(0, BLOCK_N)
            valid = n < hi
            page = tl.load(table + n // PAGE, mask=valid, other=0).to(tl.int64)
            offs = page * stride_cb + (n % PAGE) * stride_cs + kv_head * stride_ch
            kv_mask = valid[:, None] & d_mask[None, :]
            k = tl.load(k_cache_ptr + offs[:, None] + d[None, :], mask=kv_mask, other=0.0)
            v = tl.load(v_cache_ptr + offs[:, None] + d[None, :], mask=kv_mask, other=0.0)
            s = tl.dot(q, tl.trans(k.to(q.dtype)), input_precision=DOT_PRECISION) * qk_scale
            seen = valid[None, :] & (n[None, :] < end[:, None]) & (n[None, :] >= start[:, None])
            s = tl.where(seen, s, float("-inf"))
            m_new = tl.maximum(m, tl.max(s, axis=1))
            # A row with nothing seen yet keeps -inf: shift by 0 there, so no inf - inf appears.
            shift = tl.where(m_new == float("-inf"), 0.0, m_new)
            alpha = tl.exp2(m - shift)
            p = tl.exp2(s - shift[:, None])
            denom = denom * alpha + tl.sum(p, axis=1)
            acc = acc * alpha[:, None] + tl.dot(p.to(q.dtype), v.to(q.dtype), input_precision=DOT_PRECISION)
            m = m_new
        empty = denom == 0.0
        result = acc / tl.where(empty, 1.0, denom)[:, None]
        out_mask = row_ok[:, None] & d_mask[None, :]
        if ONE_SPLIT:
            tl.store(out_ptr + token[:, None] * stride_ot + heads[:, None] * stride_oh + d[None, :],
                     result.to(out_ptr.dtype.element_ty), mask=out_mask)
        else:
            lse = tl.where(empty, float("-inf"), m + tl.log2(tl.where(empty, 1.0, denom)))
            tl.store(part_out_ptr + token[:, None] * stride_pt + heads[:, None] * stride_ph + split * stride_ps
                     + d[None, :], result, mask=out_mask)
            tl.store(part_lse_ptr + token * stride_lt + heads * stride_lh + split, lse, mask=row_ok)


def verify_attention(q: torch.Tensor, kv_cache: torch.Tensor, seq_lens: torch.Tensor, block_table: torch.Tensor,
                     query_start_loc: torch.Tensor, scale: float, out: torch.Tensor, part_out: torch.Tensor,
                     part_lse: torch.Tensor, num_splits: int, short: int, sliding_window: int, block_n: int,
                     dot_precision: str, num_warps: int, num_stages: int) -> None:
    """Launch the kernel over every sequence of ``seq_lens`` (rows of queries longer than ``short`` left alone):
    into ``out`` with one split, else into the partial buffers the decode kernel's merge reads."""
    _, num_heads, head_size = q.shape
    k_cache, v_cache = kv_cache[0], kv_cache[1]
    _, _, page, kv_heads, _ = kv_cache.shape
    group = num_heads // kv_heads
    _verify_split_kernel[(seq_lens.shape[0], kv_heads, num_splits)](
        q, k_cache, v_cache, block_table, seq_lens, query_start_loc, out, part_out, part_lse,
        scale, sliding_window, num_splits,
        q.stride(0), q.stride(1), k_cache.stride(0), k_cache.stride(1), k_cache.stride(2), block_table.stride(0),
        out.stride(0), out.stride(1), part_out.stride(0), part_out.stride(1), part_out.stride(2),
        part_lse.stride(0), part_lse.stride(1),
        GROUP=group, SHORT=short, ROWS=max(16, triton.next_power_of_2(short * group)), HEAD=head_size,
        HEAD_PAD=triton.next_power_of_2(head_size), PAGE=page, BLOCK_N=block_n, DOT_PRECISION=dot_precision,
        ONE_SPLIT=num_splits == 1, num_warps=num_warps, num_stages=num_stages,
    )
