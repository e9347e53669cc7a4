"""Paged decode attention: one query token per sequence, split-K over the context.

Each program owns one (sequence, KV head, split) and attends with every query head of that KV
head's group at once, so a KV block is read from memory once per group rather than once per query
head. The context is cut into ``num_splits`` equal ranges per sequence; each split writes a partial
output and its log-sum-exp, and the split of each (sequence, KV head) that finishes last merges them
(an arrival counter per pair, :mod:`infercore_triton.split_k_counters`; a second kernel does it where no
counters are at hand). The number of splits is fixed per launch (a graph-stable choice) while each
sequence's ranges follow its own length.

Given ``query_start_loc``, sequence ``i``'s query token is row ``query_start_loc[i]`` and only
sequences with a one-token query are attended (the others are passed over): the decodes of a mixed
step replayed from a captured graph, whose grid cannot depend on where the decodes are. A fixed
number of programs then walk the sequences, so a step of few decodes among many padded rows does
not launch a program per row.
"""

from __future__ import annotations

import functools
import os
from dataclasses import dataclass

import torch
import triton
import triton.language as tl

from infercore.plugin_api import KernelSettings, current_platform
from infercore_triton.pdl import pdl_enabled
from infercore_triton.split_k_counters import tile_counters
from infercore_triton.verify_attention import shares_kv, verify_attention

#: Window passed to the kernels when attention is not windowed: longer than any context.
NO_WINDOW = 1 << 30
#: Split counts the merge kernel takes in one compiled variant (the backend uses at most 32).
REDUCE_SPLITS_PAD = 32
#: ``INFERCORE_DECODE_SPLIT_REDUCE=fused`` merges the splits of every decode launch in the split of each
#: (row, KV head) that finishes last, rather than in a kernel of its own (read at each call). Off by default:
#: on an H100 the merge launch measured faster (0.6B shape at batch 1: 1.163 ms/token against 1.180).
REDUCE_ENV = "INFERCORE_DECODE_SPLIT_REDUCE"


@dataclass(frozen=True)
class DecodeConfig:
    """Launch parameters of the decode kernel: tokens per step of the loop, warps and pipeline depth.

    The defaults came out of a sweep on an H200 (batch 256 x context 1024, 8 KV heads of 128, bf16):
    4.22 TB/s, within noise of the best of 48 configurations (4.25 TB/s).
    """

    block_n: int = 64
    num_warps: int = 4
    num_stages: int = 3
    #: Over an fp8 cache, do the dots in fp16 rather than bf16: e4m3 converts to fp16 in one instruction
    #: per pair of values (to bf16 it takes several), and every e4m3 value is exact in fp16.
    fp8_via_fp16: bool = True
    #: On CUDA, convert fp8 entries with inline PTX rather than Triton's conversion: the compiler moves its
    #: own conversion behind the tile's trip through shared memory (fp8 there, read back byte by byte)
    #: and keeps more registers live. 2.79 against 2.38 TB/s on an H200 (batch 256 x context 1024).
    fp8_inline_ptx: bool = True
    #: With ``fp8_inline_ptx``, load K as 32-bit words of four e4m3 values and convert them before the tile
    #: meets the Q·K dot, which then reads fp16 K from shared memory with ldmatrix, as over a bf16 cache, and the
    #: query's operand loads whole. Fewer instructions but slower: on an H200 (Triton 3.6, batch 256 x context
    #: 1024), with V loaded as words too (a variant since removed), 200 µs at two stages and 225 at one against
    #: 188 for the default; the words make an extra trip through shared memory (copied in as words, read back,
    #: converted, stored as fp16, read by the dot).
    fp8_k_words: bool = False


def dot_precision(dtype: torch.dtype, settings: KernelSettings | None = None) -> str:
    """The dot ``input_precision`` for inputs of ``dtype``, from the platform's kernel settings (the
    current platform's by default): AMD's and Intel's Triton backends refuse tf32 where NVIDIA's takes it."""
    settings = settings or current_platform().capabilities.kernel
    return settings.dot_precision(dtype == torch.float32)


@triton.jit
def _e4m3_ptx_to_fp16(raw):
    """e4m3 bytes (as uint8) to fp16 with the hardware's paired conversion (sm_89 and newer), as inline
    PTX: Triton's own conversion of the same tile held 248 registers against these 162, and ran 15% slower."""
    return tl.inline_asm_elementwise(
        asm="{ .reg .b16 lo, hi; mov.b32 {lo, hi}, $2; cvt.rn.f16x2.e4m3x2 $0, lo; cvt.rn.f16x2.e4m3x2 $1, hi; }",
        constraints="=r,=r,r", args=[raw], dtype=tl.float16, is_pure=True, pack=4)


@triton.jit
def _e4m3_words_to_fp16(words):
    """int32 words of four e4m3 bytes (in memory order) to fp16, the four values along a new last axis."""
    a, b = tl.inline_asm_elementwise(
        asm="{ .reg .b16 lo, hi; mov.b32 {lo, hi}, $2; cvt.rn.f16x2.e4m3x2 $0, lo; cvt.rn.f16x2.e4m3x2 $1, hi; }",
        constraints="=r,=r,r", args=[words], dtype=(tl.int32, tl.int32), is_pure=True, pack=1)
    v0, v1 = tl.inline_asm_elementwise(asm="mov.b32 {$0, $1}, $2;", constraints="=h,=h,r", args=[a],
                                       dtype=(tl.float16, tl.float16), is_pure=True, pack=1)
    v2, v3 = tl.inline_asm_elementwise(asm="mov.b32 {$0, $1}, $2;", constraints="=h,=h,r", args=[b],
                                       dtype=(tl.float16, tl.float16), is_pure=True, pack=1)
    # join(join(v0, v2), join(v1, v3)) is [[v0, v1], [v2, v3]] per word: v0..v3 once flattened.
    return tl.join(tl.join(v0, v2), tl.join(v1, v3))


@triton.jit
def _load_e4m3_tile(cache_ptr, offs, valid, HEAD: tl.constexpr, HEAD_PAD: tl.constexpr, BLOCK_N: tl.constexpr,
                    WORDS: tl.constexpr):
    """A [BLOCK_N, HEAD_PAD] tile of e4m3 bytes (token rows at ``offs``) as fp16: read as bytes, or as 32-bit
    words of four values (``WORDS``; the head size is a multiple of 4) converted before the tile meets a dot."""
    if WORDS:
        w = tl.arange(0, HEAD_PAD // 4)
        words = tl.load((cache_ptr + offs[:, None]).to(tl.pointer_type(tl.int32)) + w[None, :],
                        mask=valid[:, None] & (w < HEAD // 4)[None, :], other=0)
        return tl.reshape(_e4m3_words_to_fp16(words), (BLOCK_N, HEAD_PAD))
    d = tl.arange(0, HEAD_PAD)
    return _e4m3_ptx_to_fp16(tl.load(cache_ptr + offs[:, None] + d[None, :],
                                     mask=valid[:, None] & (d < HEAD)[None, :], other=0))


@triton.jit
def _tile_entries(table, n0, hi, kv_head, stride_cs, stride_cb, stride_ch, PAGE: tl.constexpr,
                  BLOCK_N: tl.constexpr):
    """Context positions ``n0 .. n0 + BLOCK_N`` of a sequence: which are below ``hi``, and where KV head
    ``kv_head``'s entries for them start in the paged cache (through the block table row ``table``)."""
    n = n0 + tl.arange(0, BLOCK_N)
    valid = n < hi
    page = tl.load(table + n // PAGE, mask=valid, other=0).to(tl.int64)
    return valid, page * stride_cb + (n % PAGE) * stride_cs + kv_head * stride_ch


@triton.jit
def _attend_range(q_ptr, k_cache_ptr, v_cache_ptr, table, lo, hi, row, kv_head, scale,
                  stride_qt, stride_qh, stride_cs, stride_cb, stride_ch,
                  GROUP: tl.constexpr, GROUP_PAD: tl.constexpr, HEAD: tl.constexpr, HEAD_PAD: tl.constexpr,
                  PAGE: tl.constexpr, BLOCK_N: tl.constexpr,
                  DOT_PRECISION: tl.constexpr, FP16_MATH: tl.constexpr, FP8_PTX: tl.constexpr,
                  FP8_K_WORDS: tl.constexpr):
    """Attention of the query token at ``row`` (every query head of KV head ``kv_head``) over context positions
    [lo, hi) of the sequence whose block table row is ``table``: the unnormalised output, the running maximum
    (base 2) and the softmax denominator, one row per query head of the group."""
    g = tl.arange(0, GROUP_PAD)
    d = tl.arange(0, HEAD_PAD)
    heads = kv_head * GROUP + g
    g_mask = g < GROUP
    d_mask = d < HEAD
    q = tl.load(q_ptr + row * stride_qt + heads[:, None] * stride_qh + d[None, :],
                mask=g_mask[:, None] & d_mask[None, :], other=0.0)
    if FP16_MATH:
        # Clamped to fp16's range first: an outsized query value saturates instead of becoming inf.
        q = tl.clamp(q.to(tl.float32), -65504.0, 65504.0).to(tl.float16)
    # Scores live in base 2 (exp2 is the cheap exponential); the merges stay in base 2 too.
    qk_scale = scale * 1.4426950408889634

    m = tl.full([GROUP_PAD], float("-inf"), tl.float32)
    denom = tl.zeros([GROUP_PAD], tl.float32)
    acc = tl.zeros([GROUP_PAD, HEAD_PAD], tl.float32)
    for n0 in range(lo, hi, BLOCK_N):
        valid, offs = _tile_entries(table, n0, hi, kv_head, stride_cs, stride_cb, stride_ch, PAGE, BLOCK_N)
        kv_mask = valid[:, None] & d_mask[None, :]
        if FP8_PTX:
            k = _load_e4m3_tile(k_cache_ptr, offs, valid, HEAD, HEAD_PAD, BLOCK_N, FP8_K_WORDS)
            v = _load_e4m3_tile(v_cache_ptr, offs, valid, HEAD, HEAD_PAD, BLOCK_N, False)
        else:
            k = tl.load(k_cache_ptr + offs[:, None] + d[None, :], mask=kv_mask, other=0.0)
            v = tl.load(v_cache_ptr + offs[:, None] + d[None, :], mask=kv_mask, other=0.0)
        s = tl.dot(q, tl.trans(k.to(q.dtype)), input_precision=DOT_PRECISION) * qk_scale
        s = tl.where(valid[None, :], s, float("-inf"))
        m_new = tl.maximum(m, tl.max(s, axis=1))
        alpha = tl.exp2(m - m_new)
        p = tl.exp2(s - m_new[:, None])
        denom = denom * alpha + tl.sum(p, axis=1)
        acc = acc * alpha[:, None] + tl.dot(p.to(q.dtype), v.to(q.dtype), input_precision=DOT_PRECISION)
        m = m_new
    return acc, m, denom


@triton.jit
def _attend_sequence(q_ptr, k_cache_ptr, v_cache_ptr, table, seq_len, row, seq, kv_head, split, num_splits,
                     out_ptr, part_out_ptr, part_lse_ptr, counter_ptr, scale, v_scale, sliding_window,
                     stride_qt, stride_qh, stride_cs, stride_cb, stride_ch, stride_ot, stride_oh,
                     stride_pt, stride_ph, stride_ps, stride_lt, stride_lh,
                     GROUP: tl.constexpr, GROUP_PAD: tl.constexpr, HEAD: tl.constexpr, HEAD_PAD: tl.constexpr,
                     PAGE: tl.constexpr, BLOCK_N: tl.constexpr, NUM_SPLITS: tl.constexpr,
                     DOT_PRECISION: tl.constexpr, FP16_MATH: tl.constexpr, FP8_PTX: tl.constexpr,
                     FP8_K_WORDS: tl.constexpr, LAST_REDUCES: tl.constexpr, SPLITS_PAD: tl.constexpr):
    """Split ``split`` of sequence ``seq`` (query token at row ``row``) for one KV head's query heads; with
    ``LAST_REDUCES`` the split that finishes last merges the partials of them all into ``out``."""
    start = tl.maximum(seq_len - sliding_window, 0)
    # Splits start on BLOCK_N boundaries so the loop's tiles never straddle two splits.
    # NUM_SPLITS is the compile-time split count, or 0 for the run-time ``num_splits``.
    if NUM_SPLITS > 0:
        chunk = tl.cdiv(tl.cdiv(seq_len - start, NUM_SPLITS), BLOCK_N) * BLOCK_N
    else:
        chunk = tl.cdiv(tl.cdiv(seq_len - start, num_splits), BLOCK_N) * BLOCK_N
    lo = start + split * chunk
    hi = tl.minimum(lo + chunk, seq_len)
    acc, m, denom = _attend_range(q_ptr, k_cache_ptr, v_cache_ptr, table, lo, hi, row, kv_head, scale,
                                  stride_qt, stride_qh, stride_cs, stride_cb, stride_ch,
                                  GROUP, GROUP_PAD, HEAD, HEAD_PAD, PAGE, BLOCK_N, DOT_PRECISION, FP16_MATH,
                                  FP8_PTX, FP8_K_WORDS)

    g = tl.arange(0, GROUP_PAD)
    d = tl.arange(0, HEAD_PAD)
    heads = kv_head * GROUP + g
    g_mask = g < GROUP
    empty = denom == 0.0
    # An fp8 cache's V scale is applied once to the output rather than to every loaded value.
    result = acc * (v_scale / tl.where(empty, 1.0, denom))[:, None]
    out_mask = g_mask[:, None] & (d < HEAD)[None, :]
    if NUM_SPLITS == 1:
        tl.store(out_ptr + row * stride_ot + heads[:, None] * stride_oh + d[None, :],
                 result.to(out_ptr.dtype.element_ty), mask=out_mask)
    else:
        lse = tl.where(empty, float("-inf"), m + tl.log2(tl.where(empty, 1.0, denom)))
        tl.store(part_out_ptr + seq * stride_pt + heads[:, None] * stride_ph + split * stride_ps + d[None, :],
                 result, mask=out_mask)
        tl.store(part_lse_ptr + seq * stride_lt + heads * stride_lh + split, lse, mask=g_mask)
        if LAST_REDUCES:
            # Every thread's partial is stored before one thread counts the split in (barrier, then a release
            # at GPU scope); the split counted last reads the others' after its acquire, and puts the counter
            # back to zero for the next launch.
            tl.debug_barrier()
            counter = counter_ptr + seq * tl.num_programs(1) + kv_head
            arrived = tl.atomic_add(counter, 1, sem="acq_rel", scope="gpu")
            splits = NUM_SPLITS if NUM_SPLITS > 0 else num_splits
            if arrived == splits - 1:
                tl.debug_barrier()
                _merge_splits(part_out_ptr + seq * stride_pt, part_lse_ptr + seq * stride_lt,
                              out_ptr + row * stride_ot, kv_head, splits, stride_ph, stride_ps, stride_lh,
                              stride_oh, GROUP, HEAD, HEAD_PAD, SPLITS_PAD)
                tl.atomic_xchg(counter, 0, sem="relaxed", scope="gpu")


@triton.jit
def _merge_splits(part_out_ptr, part_lse_ptr, out_ptr, kv_head, splits, stride_ph, stride_ps, stride_lh,
                  stride_oh, GROUP: tl.constexpr, HEAD: tl.constexpr, HEAD_PAD: tl.constexpr,
                  SPLITS_PAD: tl.constexpr):
    """One row's output for KV head ``kv_head``'s query heads from its ``splits`` partial outputs and log-sum-exps
    (base 2), as :func:`_decode_reduce_kernel` computes it: per query head, every split's partial in one tile, so
    the loads go out together rather than one split after another. Loads bypass L1, where other programs'
    stores are not seen."""
    s = tl.arange(0, SPLITS_PAD)
    d = tl.arange(0, HEAD_PAD)
    for g in tl.static_range(GROUP):
        head = kv_head * GROUP + g
        lse = tl.load(part_lse_ptr + head * stride_lh + s, mask=s < splits, other=float("-inf"), cache_modifier=".cg")
        m = tl.max(lse, axis=0)
        w = tl.where(lse == float("-inf"), 0.0, tl.exp2(lse - tl.where(m == float("-inf"), 0.0, m)))
        total = tl.sum(w, axis=0)
        parts = tl.load(part_out_ptr + head * stride_ph + s[:, None] * stride_ps + d[None, :],
                        mask=(w > 0.0)[:, None] & (d < HEAD)[None, :], other=0.0, cache_modifier=".cg")
        result = tl.sum(parts * w[:, None], axis=0) / tl.where(total == 0.0, 1.0, total)
        tl.store(out_ptr + head * stride_oh + d, result.to(out_ptr.dtype.element_ty), mask=d < HEAD)


@triton.jit
def request_of(query_start_loc_ptr, num_reqs, token):
    """The request whose query holds flat ``token``: the last whose query starts at or before it (requests
    without query tokens start at the batch's end, past every token)."""
    lo = token * 0
    hi = lo + num_reqs - 1
    while lo < hi:
        mid = (lo + hi + 1) // 2
        after = tl.load(query_start_loc_ptr + mid) > token
        lo = tl.where(after, lo, mid)
        hi = tl.where(after, mid - 1, hi)
    return lo


@triton.jit
def _short_query_token(query_start_loc_ptr, seq_lens_ptr, num_seqs, token, SHORT: tl.constexpr):
    """For flat query ``token``: its request, the context length it sees (its own position plus one) and
    whether its request's query has at most ``SHORT`` tokens (false past the step's tokens)."""
    seq = request_of(query_start_loc_ptr, num_seqs, token)
    q_end = tl.load(query_start_loc_ptr + seq + 1)
    mine = (token < tl.load(query_start_loc_ptr + num_seqs)) & (q_end - tl.load(query_start_loc_ptr + seq) <= SHORT)
    return seq.to(tl.int64), tl.load(seq_lens_ptr + seq) - (q_end - 1 - token), mine


# Arguments that change from step to step (the block table's width, views at an offset into the
# runner's buffers, a run-time split count and the partial log-sum-exps' strides that follow it) are not
# specialised on: a step of a new shape would compile a variant mid-run. (Triton specialises an integer on
# being 1 and on divisibility by 16: ``stride_lh`` is the split count, 16 and 32 splits compiled variants of
# their own.)
@triton.jit(do_not_specialize=["block_table_ptr", "seq_lens_ptr", "query_start_loc_ptr", "stride_bt", "num_seqs",
                               "num_splits", "stride_lt", "stride_lh"])
def _decode_split_kernel(
    q_ptr, k_cache_ptr, v_cache_ptr, block_table_ptr, seq_lens_ptr, query_start_loc_ptr,
    out_ptr, part_out_ptr, part_lse_ptr, counter_ptr,
    scale, v_scale, sliding_window, num_seqs, num_splits,
    stride_qt, stride_qh,
    stride_cb, stride_cs, stride_ch,
    stride_bt,
    stride_ot, stride_oh,
    stride_pt, stride_ph, stride_ps,
    stride_lt, stride_lh,
    GROUP: tl.constexpr, GROUP_PAD: tl.constexpr, HEAD: tl.constexpr, HEAD_PAD: tl.constexpr,
    PAGE: tl.constexpr, BLOCK_N: tl.constexpr, NUM_SPLITS: tl.constexpr, DOT_PRECISION: tl.constexpr,
    FP16_MATH: tl.constexpr, FP8_PTX: tl.constexpr, FP8_K_WORDS: tl.constexpr,
    QUERY_STARTS: tl.constexpr, SHORT: tl.constexpr,
    LAST_REDUCES: tl.constexpr, SPLITS_PAD: tl.constexpr, LAUNCH_DEPENDENTS: tl.constexpr,
):
    if LAUNCH_DEPENDENTS:
        # The kernel after this one, launched as a programmatic dependent (the skinny o_proj), may start loading
        # its weights now; it waits for this kernel's output before reading it (infercore_triton.pdl).
        tl.extra.cuda.gdc_launch_dependents()
    kv_head = tl.program_id(1)
    split = tl.program_id(2)
    if SHORT > 0:
        # One program per flat query token (the grid is the padded token count); the tokens of queries of
        # at most SHORT tokens (a speculating row's verification) attend as decodes at their own positions.
        token = tl.program_id(0).to(tl.int64)
        seq, seq_len, mine = _short_query_token(query_start_loc_ptr, seq_lens_ptr, num_seqs, token, SHORT)
        if mine:
            _attend_sequence(q_ptr, k_cache_ptr, v_cache_ptr, block_table_ptr + seq * stride_bt,
                             seq_len, token, token, kv_head, split, num_splits,
                             out_ptr, part_out_ptr, part_lse_ptr, counter_ptr, scale, v_scale, sliding_window,
                             stride_qt, stride_qh, stride_cs, stride_cb, stride_ch, stride_ot, stride_oh,
                             stride_pt, stride_ph, stride_ps, stride_lt, stride_lh,
                             GROUP, GROUP_PAD, HEAD, HEAD_PAD, PAGE, BLOCK_N, NUM_SPLITS, DOT_PRECISION,
                             FP16_MATH, FP8_PTX, FP8_K_WORDS, LAST_REDUCES, SPLITS_PAD)
    elif QUERY_STARTS:
        # A fixed number of programs walk the sequences (most of a mixed step's may not be decodes).
        for i in range(tl.program_id(0), num_seqs, tl.num_programs(0)):
            seq = (tl.program_id(0) * 0 + i).to(tl.int64)
            row = tl.load(query_start_loc_ptr + seq)
            if tl.load(query_start_loc_ptr + seq + 1) - row == 1:
                _attend_sequence(q_ptr, k_cache_ptr, v_cache_ptr, block_table_ptr + seq * stride_bt,
                                 tl.load(seq_lens_ptr + seq), row.to(tl.int64), seq, kv_head, split, num_splits,
                                 out_ptr, part_out_ptr, part_lse_ptr, counter_ptr, scale, v_scale, sliding_window,
                                 stride_qt, stride_qh, stride_cs, stride_cb, stride_ch, stride_ot, stride_oh,
                                 stride_pt, stride_ph, stride_ps, stride_lt, stride_lh,
                                 GROUP, GROUP_PAD, HEAD, HEAD_PAD, PAGE, BLOCK_N, NUM_SPLITS, DOT_PRECISION,
                                 FP16_MATH, FP8_PTX, FP8_K_WORDS, LAST_REDUCES, SPLITS_PAD)
    else:
        seq = tl.program_id(0).to(tl.int64)
        _attend_sequence(q_ptr, k_cache_ptr, v_cache_ptr, block_table_ptr + seq * stride_bt,
                         tl.load(seq_lens_ptr + seq), seq, seq, kv_head, split, num_splits,
                         out_ptr, part_out_ptr, part_lse_ptr, counter_ptr, scale, v_scale, sliding_window,
                         stride_qt, stride_qh, stride_cs, stride_cb, stride_ch, stride_ot, stride_oh,
                         stride_pt, stride_ph, stride_ps, stride_lt, stride_lh,
                         GROUP, GROUP_PAD, HEAD, HEAD_PAD, PAGE, BLOCK_N, NUM_SPLITS, DOT_PRECISION,
                         FP16_MATH, FP8_PTX, FP8_K_WORDS, LAST_REDUCES, SPLITS_PAD)


@triton.jit(do_not_specialize=["num_splits", "query_start_loc_ptr", "seq_lens_ptr", "num_seqs", "stride_lt",
                               "stride_lh"])
def _decode_reduce_kernel(
    part_out_ptr, part_lse_ptr, out_ptr, num_splits, query_start_loc_ptr, seq_lens_ptr, num_seqs,
    stride_pt, stride_ph, stride_ps,
    stride_lt, stride_lh,
    stride_ot, stride_oh,
    HEAD: tl.constexpr, HEAD_PAD: tl.constexpr, SPLITS_PAD: tl.constexpr, SHORT: tl.constexpr,
    QUERY_STARTS: tl.constexpr,
):
    seq = tl.program_id(0).to(tl.int64)
    head = tl.program_id(1)
    row = seq
    if SHORT > 0:
        # Rows are flat query tokens; those the split kernel left alone (longer queries, padding) stay untouched.
        _, _, mine = _short_query_token(query_start_loc_ptr, seq_lens_ptr, num_seqs, seq, SHORT)
        if not mine:
            return
    elif QUERY_STARTS:
        # Partials are per sequence; only one-token queries were attended, each at its query's row.
        row = tl.load(query_start_loc_ptr + seq).to(tl.int64)
        if tl.load(query_start_loc_ptr + seq + 1) - row != 1:
            return
    s = tl.arange(0, SPLITS_PAD)
    d = tl.arange(0, HEAD_PAD)
    s_mask = s < num_splits
    lse = tl.load(part_lse_ptr + seq * stride_lt + head * stride_lh + s, mask=s_mask, other=float("-inf"))
    m = tl.max(lse, axis=0)
    w = tl.where(lse == float("-inf"), 0.0, tl.exp2(lse - tl.where(m == float("-inf"), 0.0, m)))
    total = tl.sum(w, axis=0)
    parts = tl.load(part_out_ptr + seq * stride_pt + head * stride_ph + s[:, None] * stride_ps + d[None, :],
                    mask=(w > 0.0)[:, None] & (d < HEAD)[None, :], other=0.0)
    result = tl.sum(parts * w[:, None], axis=0) / tl.where(total == 0.0, 1.0, total)
    tl.store(out_ptr + row * stride_ot + head * stride_oh + d, result.to(out_ptr.dtype.element_ty), mask=d < HEAD)


@functools.lru_cache(maxsize=8)
def multiprocessor_count(device: torch.device) -> int:
    """Multiprocessors (CUDA/ROCm) or subslices (Intel) of ``device``; a handful on the host, where the
    interpreter runs the kernels."""
    if device.type == "cuda":
        return torch.cuda.get_device_properties(device).multi_processor_count
    if device.type == "xpu":
        props = torch.xpu.get_device_properties(device)
        return int(getattr(props, "gpu_subslice_count", 0) or getattr(props, "max_compute_units", 64))
    return 4


def _runs_ptx(x: torch.Tensor) -> bool:
    """Whether kernels on ``x``'s device compile to PTX with fp8 conversions (an NVIDIA GPU of compute
    capability 8.9 or newer; not ROCm, not the interpreter)."""
    if not x.is_cuda or torch.version.hip is not None or os.environ.get("TRITON_INTERPRET", "0") == "1":
        return False
    return torch.cuda.get_device_capability(x.device) >= (8, 9)


def merges_in_kernel(device: torch.device) -> bool:
    """Whether the last split merges the partials (arrival counters) on ``device``: where
    ``INFERCORE_DECODE_SPLIT_REDUCE=fused`` asks for it, on an NVIDIA GPU, where the pattern runs in the FP8
    block GEMM too, or the host (Triton's interpreter); ROCm and Intel GPUs, untested, merge in a launch of
    their own."""
    return os.environ.get(REDUCE_ENV) == "fused" and (
        device.type == "cpu" or (device.type == "cuda" and torch.version.hip is None))


def decode_attention(q: torch.Tensor, kv_cache: torch.Tensor, seq_lens: torch.Tensor, block_table: torch.Tensor,
                     scale: float, out: torch.Tensor, num_splits: int = 1, sliding_window: int | None = None,
                     config: DecodeConfig | None = None, k_scale: float = 1.0,
                     v_scale: float = 1.0, query_start_loc: torch.Tensor | None = None,
                     runtime_splits: bool = False, short_queries: int = 0) -> torch.Tensor:
    """Attention of one query token per sequence over its paged context.

    ``q``/``out`` are [num_seqs, heads, head_size] (row ``i`` is sequence ``i``'s token at position
    ``seq_lens[i] - 1``); ``kv_cache`` is [2, blocks, block_size, kv_heads, head_size], its entries
    multiplied by ``k_scale`` / ``v_scale`` when read (an fp8 cache's scales; 1.0 otherwise). A
    sequence of length 0 gets zeros. Fills ``out`` and returns it.

    With ``query_start_loc`` (``len(seq_lens) + 1`` entries), ``q``/``out`` are a ragged batch's
    [num_tokens, heads, head_size] and only the sequences with one query token (at row
    ``query_start_loc[i]``) are attended, in ``num_splits`` splits; the launch depends on ``len(seq_lens)``
    alone, and its programs (about two per multiprocessor and split) walk the sequences in turn.

    With ``query_start_loc`` and ``short_queries`` > 1, every query of at most ``short_queries`` tokens (a
    speculating row's last token and its drafts) is attended, each of its tokens as a decode at its own
    position, in ``num_splits`` splits: the launch has a row of programs per flat query token (``q``'s rows,
    padding included), and rows of other queries are left alone.

    The split count is compiled into the kernel (a graph-captured decode step's sizes are built before
    serving); with ``runtime_splits`` it is an argument instead, so steps whose split counts vary (the
    decodes of mixed steps) share one compiled variant.
    """
    config = config or DecodeConfig()
    _, num_heads, head_size = q.shape
    short = short_queries if query_start_loc is not None and short_queries > 1 else 0
    num_seqs = q.shape[0] if query_start_loc is None else seq_lens.shape[0]
    # Partial results and the launch's rows: one per flat query token with short queries, else per sequence.
    num_rows = q.shape[0] if short else num_seqs
    _, _, page, kv_heads, _ = kv_cache.shape
    group = num_heads // kv_heads
    fp16_math = config.fp8_via_fp16 and kv_cache.element_size() == 1 and q.dtype == torch.bfloat16
    fp8_ptx = fp16_math and config.fp8_inline_ptx and _runs_ptx(q)
    head_pad = triton.next_power_of_2(head_size)
    if fp8_ptx:
        kv_cache = kv_cache.view(torch.uint8)
    k_cache, v_cache = kv_cache[0], kv_cache[1]
    if num_seqs == 0 or num_rows == 0:
        return out
    counters = None
    if num_splits > 1:
        part_out = torch.empty((num_rows, num_heads, num_splits, head_size), dtype=torch.float32, device=q.device)
        part_lse = torch.empty((num_rows, num_heads, num_splits), dtype=torch.float32, device=q.device)
        counters = tile_counters(q.device, num_rows * kv_heads, REDUCE_ENV) if merges_in_kernel(q.device) else None
    else:
        part_out = out.new_empty((1, 1, 1, 1), dtype=torch.float32)
        part_lse = out.new_empty((1, 1, 1), dtype=torch.float32)
    if short and counters is None and shares_kv(kv_cache):
        verify_attention(q, kv_cache, seq_lens, block_table, query_start_loc, scale * k_scale, out, part_out,
                         part_lse, num_splits, short, sliding_window or NO_WINDOW, config.block_n,
                         dot_precision(q.dtype), config.num_warps, config.num_stages)
    else:
        if query_start_loc is None or short:
            rows = num_rows
        else:
            rows = min(num_seqs, triton.cdiv(2 * multiprocessor_count(q.device), kv_heads))
        _decode_split_kernel[(rows, kv_heads, num_splits)](
            q, k_cache, v_cache, block_table, seq_lens, seq_lens if query_start_loc is None else query_start_loc,
            out, part_out, part_lse, counters if counters is not None else part_lse,
            scale * k_scale, float(v_scale), sliding_window or NO_WINDOW, num_seqs, num_splits,
            q.stride(0), q.stride(1),
            k_cache.stride(0), k_cache.stride(1), k_cache.stride(2),
            block_table.stride(0),
            out.stride(0), out.stride(1),
            part_out.stride(0), part_out.stride(1), part_out.stride(2),
            part_lse.stride(0), part_lse.stride(1),
            GROUP=group, GROUP_PAD=max(16, triton.next_power_of_2(group)), HEAD=head_size, HEAD_PAD=head_pad,
            PAGE=page, BLOCK_N=config.block_n, NUM_SPLITS=0 if runtime_splits and num_splits > 1 else num_splits,
            DOT_PRECISION=dot_precision(q.dtype),
            FP16_MATH=fp16_math, FP8_PTX=fp8_ptx, FP8_K_WORDS=fp8_ptx and config.fp8_k_words and head_size % 4 == 0,
            QUERY_STARTS=query_start_loc is not None, SHORT=short, LAST_REDUCES=counters is not None,
            SPLITS_PAD=max(REDUCE_SPLITS_PAD, triton.next_power_of_2(num_splits)),
            LAUNCH_DEPENDENTS=pdl_enabled(q.device),
            num_warps=config.num_warps, num_stages=config.num_stages,
        )
    if num_splits > 1 and counters is None:
        _decode_reduce_kernel[(num_rows, num_heads)](
            part_out, part_lse, out, num_splits, seq_lens if query_start_loc is None else query_start_loc, seq_lens,
            num_seqs,
            part_out.stride(0), part_out.stride(1), part_out.stride(2),
            part_lse.stride(0), part_lse.stride(1),
            out.stride(0), out.stride(1),
            HEAD=head_size, HEAD_PAD=head_pad, SPLITS_PAD=max(REDUCE_SPLITS_PAD, triton.next_power_of_2(num_splits)),
            SHORT=short, QUERY_STARTS=query_start_loc is not None and not short, num_warps=4,
        )
    return out
