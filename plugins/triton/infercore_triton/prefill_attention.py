"""Paged prefill/extend attention: ragged query runs of any length over the paged cache.

Request ``i`` owns query rows ``query_start_loc[i]:query_start_loc[i+1]``; its ``Q`` query tokens
sit at positions ``seq_lens[i] - Q .. seq_lens[i] - 1``, so a cached prefix (earlier chunks, prefix
cache hits) and this step's tokens are all read from the cache, which must already hold this step's
K/V.

One program owns ``BLOCK_M`` rows of the dot's M dimension: ``BLOCK_M // PACK`` query tokens of one
request times ``PACK`` query heads that share one KV head, so each K/V tile is read once for the
packed heads rather than once per head. Key tiles that every row may see skip the mask; only the
tiles on the causal diagonal (or the sliding window's edge) pay it, and tiles that no row may see
are never read. A request's m-blocks run last-first: the longest programs start first.

A step replayed from a captured graph cannot size the grid by its own requests. With
``uniform_grid`` the grid depends only on the padded token count: program ``p`` owns the flat query
tokens ``TOKENS * p`` onwards (``TOKENS`` per program), finds their request by binary search over
``query_start_loc`` and attends each request's part of its rows in turn; programs past the step's
tokens exit at once. One-token queries are left to the decode kernel there, so a step should put its
prefills before its decodes: a program then never walks through decodes one by one.
"""

from __future__ import annotations

import functools
from dataclasses import dataclass

import torch
import triton
import triton.language as tl

from infercore_triton.decode_attention import NO_WINDOW, dot_precision, request_of


@dataclass(frozen=True)
class PrefillConfig:
    """Launch parameters of the prefill kernel.

    ``block_m`` is the dot's M dimension (query tokens times packed heads), ``block_n`` the keys per
    step of the loop. ``pack_heads`` packs the query heads of a KV group into one program (as many as
    the largest power of two that divides the group); off, each program owns one query head.
    ``m_blocks_inner`` launches one request's m-blocks for one KV head back to back, so the programs
    running at once read the same K/V tiles and L2 serves most of them; off, programs that run at once
    are the same m-block of different requests and heads.
    """

    block_m: int = 64
    block_n: int = 32
    num_warps: int = 4
    num_stages: int = 3
    pack_heads: bool = True
    m_blocks_inner: bool = True

    def __post_init__(self) -> None:
        for name in ("block_m", "block_n"):
            value = getattr(self, name)
            if value < 16 or value & (value - 1):
                raise ValueError(f"PrefillConfig.{name} is {value}; use a power of two of at least 16 "
                                 "(the smallest tile a tensor-core dot takes)")

    def heads_per_program(self, group: int) -> int:
        """Query heads one program packs for a KV group of ``group`` heads: a power of two, at most
        ``block_m`` (so each program keeps at least one query token)."""
        if not self.pack_heads:
            return 1
        return min(group & -group, self.block_m)


#: Fits any GPU Triton targets: 64 KiB of shared memory for bf16 heads of 128 at 3 stages.
_PORTABLE = PrefillConfig()
_PORTABLE_WIDE_HEADS = PrefillConfig(block_m=32)

#: GPUs with Hopper's 227 KiB of shared memory per block and its wgmma dots, keyed by (group, padded
#: head size); a shape not listed takes its head size's entry under group 1. ``benchmarks/prefill_attention.py``
#: sweeps the candidates and prints the fastest with its key. Measured on an H200 (group 2, head 128,
#: 2,048-token prompts, 57 settings): 128 x 32 tiles, 8 warps, heads packed, m-blocks outermost took
#: 404 us per layer (340 TFLOP/s) against 472 us for the portable setting and 505 us for the previous
#: guess (128 x 64); the group-1 entry of head 128 follows it, the others are unmeasured guesses.
_MEASURED_H200 = PrefillConfig(block_m=128, block_n=32, num_warps=8, num_stages=3, m_blocks_inner=False)
_HOPPER = {
    (1, 64): PrefillConfig(block_m=128, block_n=64, num_warps=8, num_stages=3),
    (1, 128): _MEASURED_H200,
    (2, 128): _MEASURED_H200,
    (1, 256): PrefillConfig(block_m=64, block_n=32, num_warps=4, num_stages=2),
}


@functools.lru_cache(maxsize=16)
def _hopper_class(device: torch.device) -> bool:
    """Whether ``device`` is an NVIDIA data-center GPU of Hopper's generation or the next (capability 9.x
    or 10.x); consumer Blackwell (12.x) has under half their shared memory."""
    return (device.type == "cuda" and torch.version.hip is None
            and torch.cuda.get_device_capability(device)[0] in (9, 10))


def default_config(group: int, head_size: int, device: torch.device) -> PrefillConfig:
    """The launch parameters for a KV group of ``group`` query heads of ``head_size`` on ``device``."""
    head_pad = triton.next_power_of_2(head_size)
    if _hopper_class(device):
        found = _HOPPER.get((group, head_pad)) or _HOPPER.get((1, head_pad))
        if found is not None:
            return found
    return _PORTABLE if head_pad <= 128 else _PORTABLE_WIDE_HEADS


@triton.jit
def _attend_tile(q, k_cache_ptr, v_cache_ptr, table, n0, hi, q_pos, q_lim, m, denom, acc, qk_scale, sliding_window,
                 kv_offset, d, stride_cb, stride_cs,
                 HEAD: tl.constexpr, HEAD_PAD: tl.constexpr, PAGE: tl.constexpr, BLOCK_N: tl.constexpr,
                 DOT_PRECISION: tl.constexpr, MASKED: tl.constexpr, WINDOWED: tl.constexpr):
    """One online-softmax step over key tile ``n0 .. n0 + BLOCK_N``; returns the new (m, denom, acc).

    An unmasked tile lies wholly before ``hi`` and inside every row's causal window, so it is read
    and scored without a mask. Row ``r`` sees keys up to ``q_lim[r]`` (its position, or past it with
    visibility bounds), within the window of its position ``q_pos[r]``.
    """
    n = n0 + tl.arange(0, BLOCK_N)
    if MASKED:
        valid = n < hi
        page = tl.load(table + n // PAGE, mask=valid, other=0).to(tl.int64)
    else:
        page = tl.load(table + n // PAGE).to(tl.int64)
    ptrs = (page * stride_cb + (n % PAGE) * stride_cs + kv_offset)[:, None] + d[None, :]
    if MASKED:
        kv_mask = valid[:, None] & (d < HEAD)[None, :]
        k = tl.load(k_cache_ptr + ptrs, mask=kv_mask, other=0.0)
        v = tl.load(v_cache_ptr + ptrs, mask=kv_mask, other=0.0)
    elif HEAD == HEAD_PAD:
        k = tl.load(k_cache_ptr + ptrs)
        v = tl.load(v_cache_ptr + ptrs)
    else:
        k = tl.load(k_cache_ptr + ptrs, mask=(d < HEAD)[None, :], other=0.0)
        v = tl.load(v_cache_ptr + ptrs, mask=(d < HEAD)[None, :], other=0.0)
    # Scores stay unscaled until the exponent, where the scale and the shift make one fused multiply-add.
    s = tl.dot(q, tl.trans(k.to(q.dtype)), input_precision=DOT_PRECISION)
    if MASKED:
        # Keys past ``hi`` read as zeros and lie after every real row's bound, so the causal test
        # alone hides them.
        allowed = n[None, :] <= q_lim[:, None]
        if WINDOWED:
            allowed = allowed & (n[None, :] > q_pos[:, None] - sliding_window)
        s = tl.where(allowed, s, float("-inf"))
        m_new = tl.maximum(m, tl.max(s, axis=1) * qk_scale)
        # Rows with nothing allowed yet keep m = -inf; shift by 0 there so no NaN appears.
        shift = tl.where(m_new == float("-inf"), 0.0, m_new)
    else:
        m_new = tl.maximum(m, tl.max(s, axis=1) * qk_scale)
        shift = m_new
    alpha = tl.exp2(m - shift)
    p = tl.exp2(s * qk_scale - shift[:, None])
    denom = denom * alpha + tl.sum(p, axis=1)
    acc = tl.dot(p.to(q.dtype), v.to(q.dtype), acc * alpha[:, None], input_precision=DOT_PRECISION)
    return m_new, denom, acc


@triton.jit
def key_ranges(first_pos, hi, sliding_window, BLOCK_N: tl.constexpr, WINDOWED: tl.constexpr):
    """The key tiles of a block of query rows at positions ``first_pos .. hi - 1``, as
    ``(start, full_lo, full_hi)``: masked tiles from ``start`` to ``full_lo``, unmasked tiles from
    ``full_lo`` to ``full_hi``, masked tiles from ``full_hi`` to ``hi``, all ``BLOCK_N`` apart.

    Unmasked tiles hold only keys that every row sees; no tile lies wholly outside what the rows see.
    """
    if WINDOWED:
        lo = tl.maximum(first_pos - sliding_window + 1, 0)
        start = lo // BLOCK_N * BLOCK_N
        # The last row sees keys from hi - sliding_window on, and every earlier row sees more of them.
        seen_by_all = tl.maximum(hi - sliding_window, lo)
        full_lo = tl.minimum((seen_by_all + BLOCK_N - 1) // BLOCK_N * BLOCK_N, hi)
    else:
        start = first_pos * 0
        full_lo = start
    full_hi = tl.maximum((first_pos + 1) // BLOCK_N * BLOCK_N, full_lo)
    return start, full_lo, full_hi


@triton.jit
def _attend_rows(q_ptr, k_cache_ptr, v_cache_ptr, out_ptr, table, visible_ptr, q_start, context, r0, r1, head0,
                 kv_offset, qk_scale, v_scale, sliding_window, stride_qt, stride_qh, stride_cb, stride_cs, stride_ot,
                 stride_oh, PACK: tl.constexpr, HEAD: tl.constexpr, HEAD_PAD: tl.constexpr, PAGE: tl.constexpr,
                 BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr, DOT_PRECISION: tl.constexpr, WINDOWED: tl.constexpr,
                 BOUNDED: tl.constexpr):
    """Query rows ``r0 .. r1 - 1`` (at most ``BLOCK_M // PACK``) of the request whose query starts at token
    ``q_start`` after ``context`` cached tokens, for query heads ``head0 .. head0 + PACK - 1``. With
    ``BOUNDED``, flat token ``t`` sees keys up to ``visible_ptr[t]`` (at least its own position): the
    tiles past the block's last position up to the largest bound are scored under the mask too."""
    # Row r of the tile is query token r // PACK of the block, for query head head0 + r % PACK.
    r = tl.arange(0, BLOCK_M)
    rows = r0 + r // PACK
    heads = head0 + r % PACK
    row_mask = rows < r1
    q_pos = context + rows
    d = tl.arange(0, HEAD_PAD)
    d_mask = d < HEAD
    tokens = (q_start + rows).to(tl.int64)
    q = tl.load(q_ptr + (tokens * stride_qt + heads * stride_qh)[:, None] + d[None, :],
                mask=row_mask[:, None] & d_mask[None, :], other=0.0)

    m = tl.full([BLOCK_M], float("-inf"), tl.float32)
    denom = tl.zeros([BLOCK_M], tl.float32)
    acc = tl.zeros([BLOCK_M, HEAD_PAD], tl.float32)
    first_pos = context + r0
    hi = context + r1
    start, full_lo, full_hi = key_ranges(first_pos, hi, sliding_window, BLOCK_N, WINDOWED)
    tail = full_hi
    if BOUNDED:
        q_lim = tl.maximum(tl.load(visible_ptr + tokens, mask=row_mask, other=0), q_pos)
        keys_end = tl.maximum(tl.max(tl.where(row_mask, q_lim + 1, 0), axis=0), hi)
        # The window's masked tiles may end past ``full_hi`` (when ``full_lo`` is ``hi``, unaligned): the keys
        # past the block's positions start after the last tile read.
        tail = tl.maximum(full_hi, start + tl.cdiv(full_lo - start, BLOCK_N) * BLOCK_N)
    else:
        q_lim = q_pos
        keys_end = hi
    for n0 in range(start, full_lo, BLOCK_N):
        m, denom, acc = _attend_tile(q, k_cache_ptr, v_cache_ptr, table, n0, keys_end, q_pos, q_lim, m, denom, acc,
                                     qk_scale, sliding_window, kv_offset, d, stride_cb, stride_cs,
                                     HEAD, HEAD_PAD, PAGE, BLOCK_N, DOT_PRECISION, True, WINDOWED)
    for n0 in range(full_lo, full_hi, BLOCK_N):
        m, denom, acc = _attend_tile(q, k_cache_ptr, v_cache_ptr, table, n0, keys_end, q_pos, q_lim, m, denom, acc,
                                     qk_scale, sliding_window, kv_offset, d, stride_cb, stride_cs,
                                     HEAD, HEAD_PAD, PAGE, BLOCK_N, DOT_PRECISION, False, WINDOWED)
    for n0 in range(tail, keys_end, BLOCK_N):
        m, denom, acc = _attend_tile(q, k_cache_ptr, v_cache_ptr, table, n0, keys_end, q_pos, q_lim, m, denom, acc,
                                     qk_scale, sliding_window, kv_offset, d, stride_cb, stride_cs,
                                     HEAD, HEAD_PAD, PAGE, BLOCK_N, DOT_PRECISION, True, WINDOWED)

    result = acc * (v_scale / tl.where(denom == 0.0, 1.0, denom))[:, None]
    tl.store(out_ptr + (tokens * stride_ot + heads * stride_oh)[:, None] + d[None, :],
             result.to(out_ptr.dtype.element_ty), mask=row_mask[:, None] & d_mask[None, :])


# Step-varying arguments are not specialised on (see the decode kernel).
@triton.jit(do_not_specialize=["block_table_ptr", "seq_lens_ptr", "query_start_loc_ptr", "visible_ptr", "stride_bt",
                               "num_reqs"])
def _prefill_kernel(
    q_ptr, k_cache_ptr, v_cache_ptr, out_ptr, block_table_ptr, seq_lens_ptr, query_start_loc_ptr, visible_ptr,
    scale, v_scale, sliding_window, num_reqs,
    stride_qt, stride_qh,
    stride_cb, stride_cs, stride_ch,
    stride_bt,
    stride_ot, stride_oh,
    GROUP: tl.constexpr, PACK: tl.constexpr, HEAD: tl.constexpr, HEAD_PAD: tl.constexpr, PAGE: tl.constexpr,
    BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr, DOT_PRECISION: tl.constexpr, WINDOWED: tl.constexpr,
    M_BLOCKS_INNER: tl.constexpr, UNIFORM_GRID: tl.constexpr, BOUNDED: tl.constexpr, SHORT: tl.constexpr,
):
    TOKENS: tl.constexpr = BLOCK_M // PACK
    head0 = tl.program_id(1) * PACK
    kv_offset = (head0 // GROUP) * stride_ch
    qk_scale = scale * 1.4426950408889634
    if UNIFORM_GRID:
        # Program p owns flat tokens TOKENS * p onwards, last block first (the most keys start first);
        # its rows run through every request they touch, one segment per request (requests are
        # contiguous, so only the first is searched for), skipping queries of up to SHORT tokens (the
        # decode kernel's). Prefills placed before decodes keep that to a segment or two.
        token = (tl.num_programs(0) - 1 - tl.program_id(0)) * TOKENS
        end = tl.minimum(token + TOKENS, tl.load(query_start_loc_ptr + num_reqs))
        seq = request_of(query_start_loc_ptr, num_reqs, token)
        q_start = tl.load(query_start_loc_ptr + seq)
        while token < end:
            q_end = tl.load(query_start_loc_ptr + seq + 1)
            segment_end = tl.minimum(q_end, end)
            if q_end - q_start > SHORT:
                context = tl.load(seq_lens_ptr + seq) - (q_end - q_start)
                _attend_rows(q_ptr, k_cache_ptr, v_cache_ptr, out_ptr, block_table_ptr + seq.to(tl.int64) * stride_bt,
                             visible_ptr, q_start, context, token - q_start, segment_end - q_start, head0, kv_offset,
                             qk_scale, v_scale, sliding_window, stride_qt, stride_qh, stride_cb, stride_cs, stride_ot,
                             stride_oh, PACK, HEAD, HEAD_PAD, PAGE, BLOCK_M, BLOCK_N, DOT_PRECISION, WINDOWED, BOUNDED)
            token = segment_end
            seq += 1
            q_start = q_end
    else:
        # The grid's first axis varies fastest in launch order.
        if M_BLOCKS_INNER:
            seq = tl.program_id(2)
            m_index = tl.program_id(0)
        else:
            seq = tl.program_id(0)
            m_index = tl.program_id(2)
        q_start = tl.load(query_start_loc_ptr + seq)
        q_len = tl.load(query_start_loc_ptr + seq + 1) - q_start
        # The request's last m-block (the most keys) first, so the longest programs are launched first.
        m_block = tl.cdiv(q_len, TOKENS) - 1 - m_index
        if m_block < 0:
            return
        context = tl.load(seq_lens_ptr + seq) - q_len
        _attend_rows(q_ptr, k_cache_ptr, v_cache_ptr, out_ptr, block_table_ptr + seq.to(tl.int64) * stride_bt,
                     visible_ptr, q_start, context, m_block * TOKENS, tl.minimum(m_block * TOKENS + TOKENS, q_len), head0,
                     kv_offset, qk_scale, v_scale, sliding_window, stride_qt, stride_qh, stride_cb, stride_cs, stride_ot,
                     stride_oh, PACK, HEAD, HEAD_PAD, PAGE, BLOCK_M, BLOCK_N, DOT_PRECISION, WINDOWED, BOUNDED)


def prefill_attention(q: torch.Tensor, kv_cache: torch.Tensor, query_start_loc: torch.Tensor,
                      seq_lens: torch.Tensor, block_table: torch.Tensor, scale: float, out: torch.Tensor,
                      max_query_len: int, sliding_window: int | None = None, config: PrefillConfig | None = None,
                      k_scale: float = 1.0, v_scale: float = 1.0, uniform_grid: bool = False,
                      visible_until: torch.Tensor | None = None, short_queries: int = 1) -> torch.Tensor:
    """Causal attention of every request's query run over its paged context.

    ``q``/``out`` are [num_tokens, heads, head_size]; ``query_start_loc`` has ``num_reqs + 1`` entries;
    ``max_query_len`` bounds the query runs (it sizes the launch grid). Cache entries are multiplied by
    ``k_scale`` / ``v_scale`` when read (an fp8 cache's scales). ``config`` defaults to
    :func:`default_config` for the shape and device. Fills ``out`` and returns it.

    ``uniform_grid`` sizes the grid from ``q``'s rows alone (a captured graph's launch; ``max_query_len``
    is ignored) and leaves queries of up to ``short_queries`` tokens out (one-token queries by default): run
    :func:`~infercore_triton.decode_attention.decode_attention` with ``query_start_loc`` (and the same
    ``short_queries``) for them. It is fastest with every prefill before every decode in the batch.

    ``visible_until`` (int32, one entry per flat query token) lets token ``t`` see context positions up to
    ``visible_until[t]`` instead of its own (:mod:`infercore.attention.visible_bounds`; Gemma 3's images).
    """
    num_reqs = seq_lens.shape[0]
    _, num_heads, head_size = q.shape
    _, _, page, kv_heads, _ = kv_cache.shape
    group = num_heads // kv_heads
    # The launch parameters are constexprs, so they follow the model and device, never the step:
    # a short prefill run would otherwise build a kernel variant while serving.
    config = config or default_config(group, head_size, q.device)
    pack = config.heads_per_program(group)
    if num_reqs == 0 or (max_query_len == 0 and not uniform_grid):
        return out
    k_cache, v_cache = kv_cache[0], kv_cache[1]
    tokens_per_program = config.block_m // pack
    if uniform_grid:
        grid: tuple[int, ...] = (triton.cdiv(q.shape[0], tokens_per_program), num_heads // pack)
    else:
        m_blocks = triton.cdiv(max_query_len, tokens_per_program)
        grid = (m_blocks, num_heads // pack, num_reqs) if config.m_blocks_inner else (num_reqs, num_heads // pack, m_blocks)
    _prefill_kernel[grid](
        q, k_cache, v_cache, out, block_table, seq_lens, query_start_loc,
        seq_lens if visible_until is None else visible_until, scale * k_scale, float(v_scale), sliding_window or NO_WINDOW, num_reqs,
        q.stride(0), q.stride(1),
        k_cache.stride(0), k_cache.stride(1), k_cache.stride(2),
        block_table.stride(0),
        out.stride(0), out.stride(1),
        GROUP=group, PACK=pack, HEAD=head_size, HEAD_PAD=triton.next_power_of_2(head_size), PAGE=page,
        BLOCK_M=config.block_m, BLOCK_N=config.block_n, DOT_PRECISION=dot_precision(q.dtype),
        WINDOWED=bool(sliding_window), M_BLOCKS_INNER=config.m_blocks_inner, UNIFORM_GRID=uniform_grid,
        BOUNDED=visible_until is not None, SHORT=short_queries if uniform_grid else 1,
        num_warps=config.num_warps,
        num_stages=config.num_stages,
    )
    return out
