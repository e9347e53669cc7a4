"""Paged decode attention balanced over the device: fixed-size chunks of context handed out by a fixed grid.

The split kernel (:mod:`infercore_triton.decode_attention`) cuts every sequence into the same number of
splits, a count fixed per captured graph that cannot see the step's lengths: on a ragged batch the
programs of long sequences run long after the short ones are done, and the last wave leaves most of the
device idle. Here every sequence's context is cut into chunks of ``chunk`` tokens (a sequence of any
length has at least one), the chunks of all sequences are numbered in order, and a fixed number of
programs per KV head walk that list in strides, so each program gets about the same number of tokens
whatever the lengths. The list is counted on the device from ``seq_lens`` by every program (a prefix sum
over the batch), so a captured graph replays it for any lengths.

A sequence of one chunk is written straight to the output. A longer one writes a partial output and its
log-sum-exp per chunk; the program that finishes the sequence's last chunk (counted with an atomic per
sequence and KV head) merges them and puts the counter back to zero, so no second kernel is launched.
"""

from __future__ import annotations

import torch
import triton
import triton.language as tl

from infercore_triton.decode_attention import NO_WINDOW, DecodeConfig, _attend_range, _runs_ptx, dot_precision


@triton.jit
def _merge_chunks(part_out_ptr, part_lse_ptr, out_ptr, row, seq, kv_head, n_chunks,
                  stride_pt, stride_ph, stride_ps, stride_lt, stride_lh, stride_ot, stride_oh,
                  GROUP: tl.constexpr, GROUP_PAD: tl.constexpr, HEAD: tl.constexpr, HEAD_PAD: tl.constexpr,
                  CHUNKS_PAD: tl.constexpr):
    """Merges a sequence's ``n_chunks`` partial outputs (base-2 log-sum-exps) into ``out``, one KV head's group."""
    g = tl.arange(0, GROUP_PAD)
    d = tl.arange(0, HEAD_PAD)
    c = tl.arange(0, CHUNKS_PAD)
    heads = kv_head * GROUP + g
    g_mask = g < GROUP
    # The partials were written by other programs: read them from L2, past this multiprocessor's L1.
    lse = tl.load(part_lse_ptr + seq * stride_lt + heads[:, None] * stride_lh + c[None, :],
                  mask=g_mask[:, None] & (c < n_chunks)[None, :], other=float("-inf"), cache_modifier=".cg")
    m = tl.max(lse, axis=1)
    m = tl.where(m == float("-inf"), 0.0, m)
    weights = tl.exp2(lse - m[:, None])
    total = tl.sum(weights, axis=1)
    acc = tl.zeros([GROUP_PAD, HEAD_PAD], tl.float32)
    out_mask = g_mask[:, None] & (d < HEAD)[None, :]
    for i in range(0, n_chunks):
        w = tl.sum(tl.where(c[None, :] == i, weights, 0.0), axis=1)
        part = tl.load(part_out_ptr + seq * stride_pt + heads[:, None] * stride_ph + i * stride_ps + d[None, :],
                       mask=out_mask, other=0.0, cache_modifier=".cg")
        acc += part * w[:, None]
    result = acc / tl.where(total == 0.0, 1.0, total)[:, None]
    tl.store(out_ptr + row * stride_ot + heads[:, None] * stride_oh + d[None, :],
             result.to(out_ptr.dtype.element_ty), mask=out_mask)


# The batch's lengths and table width change from step to step (views into the runner's buffers): not
# specialised on, so a step of a new shape never compiles a variant mid-run.
@triton.jit(do_not_specialize=["block_table_ptr", "seq_lens_ptr", "stride_bt", "num_seqs"])
def _decode_chunked_kernel(
    q_ptr, k_cache_ptr, v_cache_ptr, block_table_ptr, seq_lens_ptr,
    out_ptr, part_out_ptr, part_lse_ptr, counters_ptr,
    scale, v_scale, sliding_window, num_seqs,
    stride_qt, stride_qh,
    stride_cb, stride_cs, stride_ch,
    stride_bt,
    stride_ot, stride_oh,
    stride_pt, stride_ph, stride_ps,
    stride_lt, stride_lh,
    GROUP: tl.constexpr, GROUP_PAD: tl.constexpr, HEAD: tl.constexpr, HEAD_PAD: tl.constexpr,
    PAGE: tl.constexpr, BLOCK_N: tl.constexpr, CHUNK: tl.constexpr, SEQS_PAD: tl.constexpr,
    CHUNKS_PAD: tl.constexpr, KV_HEADS: tl.constexpr, DOT_PRECISION: tl.constexpr,
    FP16_MATH: tl.constexpr, FP8_PTX: tl.constexpr,
):
    kv_head = tl.program_id(1)
    # Every program counts the chunk list: chunks per sequence and where each sequence's first one falls.
    i = tl.arange(0, SEQS_PAD)
    lens = tl.load(seq_lens_ptr + i, mask=i < num_seqs, other=0)
    starts = tl.maximum(lens - sliding_window, 0)
    chunks = tl.where(i < num_seqs, tl.maximum(tl.cdiv(lens - starts, CHUNK), 1), 0)
    ends = tl.cumsum(chunks, axis=0)
    total = tl.sum(chunks, axis=0)
    for w in range(tl.program_id(0), total, tl.num_programs(0)):
        seq_i = tl.sum((ends <= w).to(tl.int32), axis=0)
        mine = i == seq_i
        n_chunks = tl.sum(tl.where(mine, chunks, 0), axis=0)
        chunk = w - tl.sum(tl.where(mine, ends - chunks, 0), axis=0)
        seq_len = tl.sum(tl.where(mine, lens, 0), axis=0)
        lo = tl.sum(tl.where(mine, starts, 0), axis=0) + chunk * CHUNK
        hi = tl.minimum(lo + CHUNK, seq_len)
        seq = seq_i.to(tl.int64)
        acc, m, denom = _attend_range(q_ptr, k_cache_ptr, v_cache_ptr, block_table_ptr + seq * stride_bt, lo, hi,
                                      seq, kv_head, scale, stride_qt, stride_qh, stride_cs, stride_cb, stride_ch,
                                      GROUP, GROUP_PAD, HEAD, HEAD_PAD, PAGE, BLOCK_N, DOT_PRECISION, FP16_MATH,
                                      FP8_PTX)
        g = tl.arange(0, GROUP_PAD)
        d = tl.arange(0, HEAD_PAD)
        heads = kv_head * GROUP + g
        g_mask = g < GROUP
        out_mask = g_mask[:, None] & (d < HEAD)[None, :]
        empty = denom == 0.0
        # An fp8 cache's V scale is applied once to the output rather than to every loaded value.
        result = acc * (v_scale / tl.where(empty, 1.0, denom))[:, None]
        if n_chunks == 1:
            tl.store(out_ptr + seq * stride_ot + heads[:, None] * stride_oh + d[None, :],
                     result.to(out_ptr.dtype.element_ty), mask=out_mask)
        else:
            lse = tl.where(empty, float("-inf"), m + tl.log2(tl.where(empty, 1.0, denom)))
            tl.store(part_out_ptr + seq * stride_pt + heads[:, None] * stride_ph + chunk * stride_ps + d[None, :],
                     result, mask=out_mask)
            tl.store(part_lse_ptr + seq * stride_lt + heads * stride_lh + chunk, lse, mask=g_mask)
            # Every thread's stores are issued before the count is released to the other programs.
            tl.debug_barrier()
            counter = counters_ptr + seq * KV_HEADS + kv_head
            if tl.atomic_add(counter, 1, sem="acq_rel", scope="gpu") == n_chunks - 1:
                _merge_chunks(part_out_ptr, part_lse_ptr, out_ptr, seq, seq, kv_head, n_chunks,
                              stride_pt, stride_ph, stride_ps, stride_lt, stride_lh, stride_ot, stride_oh,
                              GROUP, GROUP_PAD, HEAD, HEAD_PAD, CHUNKS_PAD)
                tl.atomic_xchg(counter, 0, sem="relaxed", scope="gpu")


def chunk_counters(max_seqs: int, kv_heads: int, device: torch.device | str) -> torch.Tensor:
    """The zeroed counters :func:`decode_attention_chunked` needs for batches of up to ``max_seqs`` sequences
    (each launch leaves them at zero again, so one buffer serves every layer and step on one stream)."""
    return torch.zeros(max_seqs * kv_heads, dtype=torch.int32, device=device)


def decode_attention_chunked(q: torch.Tensor, kv_cache: torch.Tensor, seq_lens: torch.Tensor,
                             block_table: torch.Tensor, scale: float, out: torch.Tensor, chunk: int,
                             programs: int, sliding_window: int | None = None, config: DecodeConfig | None = None,
                             k_scale: float = 1.0, v_scale: float = 1.0,
                             counters: torch.Tensor | None = None) -> torch.Tensor:
    """Attention of one query token per sequence over its paged context, in chunks of ``chunk`` tokens.

    Arguments as :func:`infercore_triton.decode_attention.decode_attention`'s; ``chunk`` is a multiple of the
    config's ``block_n``, ``programs`` the programs per KV head, and ``counters`` a buffer from
    :func:`chunk_counters` of at least ``len(seq_lens) * kv_heads`` zeros (one is made when none is given; a
    captured graph must be given one made outside it). The launch depends on the batch size, the block table's
    width and these settings alone, never on the lengths.
    """
    config = config or DecodeConfig()
    if chunk % config.block_n:
        raise ValueError(f"chunk {chunk} is not a multiple of the tile's {config.block_n} tokens")
    num_seqs, num_heads, head_size = q.shape
    if num_seqs == 0:
        return out
    _, _, page, kv_heads, _ = kv_cache.shape
    group = num_heads // kv_heads
    if counters is None:
        counters = chunk_counters(num_seqs, kv_heads, q.device)
    elif counters.numel() < num_seqs * kv_heads:
        raise ValueError(f"{counters.numel()} counters for {num_seqs} sequences x {kv_heads} KV heads")
    fp16_math = config.fp8_via_fp16 and kv_cache.element_size() == 1 and q.dtype == torch.bfloat16
    fp8_ptx = fp16_math and config.fp8_inline_ptx and _runs_ptx(q)
    if fp8_ptx:
        kv_cache = kv_cache.view(torch.uint8)
    k_cache, v_cache = kv_cache[0], kv_cache[1]
    max_chunks = max(1, triton.cdiv(block_table.shape[1] * page, chunk))
    part_out = torch.empty((num_seqs, num_heads, max_chunks, head_size), dtype=torch.float32, device=q.device)
    part_lse = torch.empty((num_seqs, num_heads, max_chunks), dtype=torch.float32, device=q.device)
    _decode_chunked_kernel[(programs, kv_heads)](
        q, k_cache, v_cache, block_table, seq_lens,
        out, part_out, part_lse, counters,
        scale * k_scale, float(v_scale), sliding_window or NO_WINDOW, num_seqs,
        q.stride(0), q.stride(1),
        k_cache.stride(0), k_cache.stride(1), k_cache.stride(2),
        block_table.stride(0),
        out.stride(0), out.stride(1),
        part_out.stride(0), part_out.stride(1), part_out.stride(2),
        part_lse.stride(0), part_lse.stride(1),
        GROUP=group, GROUP_PAD=max(16, triton.next_power_of_2(group)), HEAD=head_size,
        HEAD_PAD=triton.next_power_of_2(head_size), PAGE=page, BLOCK_N=config.block_n, CHUNK=chunk,
        SEQS_PAD=max(16, triton.next_power_of_2(num_seqs)), CHUNKS_PAD=max(16, triton.next_power_of_2(max_chunks)),
        KV_HEADS=kv_heads, DOT_PRECISION=dot_precision(q.dtype), FP16_MATH=fp16_math, FP8_PTX=fp8_ptx,
        num_warps=config.num_warps, num_stages=config.num_stages,
    )
    return out
