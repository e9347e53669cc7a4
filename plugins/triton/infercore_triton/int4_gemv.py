"""W4A16 product of decode batches of 1 to 4 rows by fused multiply-adds, without tensor cores.

At decode a 4-bit linear layer reads its whole weight to multiply a few rows: the time goes to the
instructions that turn each code into a number, not to the multiplications. This path spends about three
per weight at one row. Each code is moved into the mantissa of a float32 whose value is ``128 + q``
(a shift and one three-input logic op); the rows multiply those values with fused multiply-adds; the
zero-point and scale are applied once per group and word row, not per weight:

    sum_k x_k (q_k - z) s = s * (sum_k x_k (128 + q_k) - (128 + z) * sum_k x_k)

A program owns ``BLOCK_N`` output columns and a range of K in whole steps of ``8 * WORDS`` input rows that
stay inside one group; it loads each int32 word once (contiguous along N), and sums over K once at the end.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch
import triton
import triton.language as tl

from infercore.plugin_api import int4_reference

Int4Weight = int4_reference.Int4Weight

#: The most rows :func:`w4a16_gemv` takes (each row adds a multiply-add and a load per weight); compiled
#: for sm_90 it issues 5.4 instructions per weight at one row and 9.8 at two, where the tensor-core kernel
#: issues 8.8 (``benchmarks/int4_sass.py`` counts them).
GEMV_MAX_M = 1


@dataclass(frozen=True)
class Int4GemvConfig:
    """Launch settings: output columns per program, int32 word rows per step (8 input rows each; fewer
    when a group is narrower), warps, and ``split_k`` (0: as many K splits as fill the GPU)."""

    block_n: int = 512
    words: int = 8
    num_warps: int = 8
    split_k: int = 0


@triton.jit
def _codes_as_floats(words, NIBBLE: tl.constexpr):
    """Nibble NIBBLE of each word as the float32 ``128 + q``: the code moved to bits 16-19, under the exponent
    and leading mantissa bits of 128.0 (0x43000000)."""
    if NIBBLE < 4:
        bits = words << (16 - 4 * NIBBLE)
    elif NIBBLE == 4:
        bits = words
    else:
        bits = words >> (4 * NIBBLE - 16)
    return ((bits & 0x000F0000) | 0x43000000).to(tl.float32, bitcast=True)


@triton.jit(do_not_specialize=["M"])
def _w4a16_gemv_kernel(x_ptr, qw_ptr, s_ptr, z_ptr, bias_ptr, out_ptr, part_ptr, M, N, K, stride_xm, stride_om,
                       k_per_split, GROUP: tl.constexpr, M_PAD: tl.constexpr, WORDS: tl.constexpr,
                       BLOCK_N: tl.constexpr, HAS_BIAS: tl.constexpr, SPLIT: tl.constexpr, INTERLEAVED: tl.constexpr):
    pid_n = tl.program_id(0)
    pid_k = tl.program_id(1)
    cols = pid_n * BLOCK_N + tl.arange(0, BLOCK_N)
    col_ok = cols < N
    ms = tl.arange(0, M_PAD)[:, None, None]
    js = tl.arange(0, WORDS)[None, :, None]
    m_ok = ms < M
    k_lo = pid_k * k_per_split
    k_hi = tl.minimum(k_lo + k_per_split, K)
    x_rows = x_ptr + ms * stride_xm
    acc = tl.zeros((M_PAD, WORDS, BLOCK_N), dtype=tl.float32)
    for k0 in range(k_lo, k_hi, 8 * WORDS):
        word_rows = k0 // 8 + js
        w_ok = word_rows * 8 < k_hi
        words = tl.load(qw_ptr + word_rows.to(tl.int64) * N + cols[None, None, :],
                        mask=w_ok & col_ok[None, None, :], other=0)
        step = tl.zeros((M_PAD, WORDS, BLOCK_N), dtype=tl.float32)
        x_sum = tl.zeros((M_PAD, WORDS, 1), dtype=tl.float32)
        for nibble in tl.static_range(8):
            row = 2 * (nibble % 4) + nibble // 4 if INTERLEAVED else nibble  # the word's row this nibble holds
            x = tl.load(x_rows + 8 * word_rows + row, mask=m_ok & w_ok, other=0.0).to(tl.float32)
            step += x * _codes_as_floats(words, nibble)
            x_sum += x
        offsets = (k0 // GROUP) * N + cols
        scales = tl.load(s_ptr + offsets, mask=col_ok, other=0.0).to(tl.float32)[None, None, :]
        zeros = tl.load(z_ptr + offsets, mask=col_ok, other=0).to(tl.float32)[None, None, :]
        acc += scales * (step - (zeros + 128.0) * x_sum)
    out = tl.sum(acc, axis=1)
    rows = tl.arange(0, M_PAD)[:, None]
    mask = (rows < M) & col_ok[None, :]
    if SPLIT:
        tl.store(part_ptr + (pid_k * M + rows) * N + cols[None, :], out, mask=mask)
    else:
        if HAS_BIAS:
            out += tl.load(bias_ptr + cols, mask=col_ok, other=0.0).to(tl.float32)[None, :]
        tl.store(out_ptr + rows * stride_om + cols[None, :], out.to(out_ptr.dtype.element_ty), mask=mask)


@triton.jit(do_not_specialize=["M"])
def _sum_splits_kernel(part_ptr, bias_ptr, out_ptr, M, N, stride_om, SPLITS: tl.constexpr, BLOCK: tl.constexpr,
                       HAS_BIAS: tl.constexpr):
    row = tl.program_id(1)
    cols = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    col_ok = cols < N
    acc = tl.zeros((BLOCK,), dtype=tl.float32)
    for split in tl.static_range(SPLITS):
        acc += tl.load(part_ptr + (split * M + row) * N + cols, mask=col_ok, other=0.0)
    if HAS_BIAS:
        acc += tl.load(bias_ptr + cols, mask=col_ok, other=0.0).to(tl.float32)
    tl.store(out_ptr + row * stride_om + cols, acc.to(out_ptr.dtype.element_ty), mask=col_ok)


def sum_splits(part: torch.Tensor, bias: torch.Tensor | None, out: torch.Tensor) -> torch.Tensor:
    """``out = sum(part) + bias`` over the float32 partials ``part`` [splits, M, N] of a split-K product, rounded
    once into ``out``'s dtype: one launch."""
    splits, m, n = part.shape
    block = min(1024, triton.next_power_of_2(n))
    _sum_splits_kernel[(triton.cdiv(n, block), m)](part, bias if bias is not None else out, out, m, n, out.stride(0),
                                                   SPLITS=splits, BLOCK=block, HAS_BIAS=bias is not None)
    return out


def _words_per_step(group: int, words: int) -> int:
    """The configured word rows per step, halved until a step stays inside one group."""
    while words > 1 and (group // 8) % words:
        words //= 2
    return words


def gemv_fits(x: torch.Tensor, weight: Int4Weight) -> bool:
    """Whether :func:`w4a16_gemv` takes this product: up to :data:`GEMV_MAX_M` rows, groups of whole words,
    and groups that are runs of rows (not an act-order shard's ``row_groups``)."""
    return 1 <= x.shape[0] <= GEMV_MAX_M and weight.group_size % 8 == 0 and weight.row_groups is None


def w4a16_gemv(x: torch.Tensor, weight: Int4Weight, bias: torch.Tensor | None, split_for: int,
               config: Int4GemvConfig | None = None) -> torch.Tensor:
    """``x @ W + bias`` for ``x`` [M, K] (M small: :data:`GEMV_MAX_M`) (contiguous rows, in ``weight.perm``'s column order); K is split
    until there are ``split_for`` programs (or ``config.split_k`` ways); float32 partials are summed after."""
    cfg = config or Int4GemvConfig()
    m, k = x.shape
    n = weight.out_features
    words = _words_per_step(weight.group_size, cfg.words)
    step = 8 * words
    tiles = triton.cdiv(n, cfg.block_n)
    split = cfg.split_k or 1
    while not cfg.split_k and tiles * split < split_for and k >= 4 * split * step:
        split *= 2
    k_per_split = triton.cdiv(triton.cdiv(k, split), step) * step
    split = triton.cdiv(k, k_per_split)
    out = torch.empty((m, n), dtype=x.dtype, device=x.device)
    part = torch.empty((split, m, n), dtype=torch.float32, device=x.device) if split > 1 else out
    _w4a16_gemv_kernel[(tiles, split)](
        x, weight.qweight, weight.scales, weight.zeros, bias if bias is not None else out, out, part, m, n, k,
        x.stride(0), out.stride(0), k_per_split, GROUP=weight.group_size, M_PAD=triton.next_power_of_2(m),
        WORDS=words, BLOCK_N=cfg.block_n, HAS_BIAS=bias is not None, SPLIT=split > 1, INTERLEAVED=weight.interleaved,
        num_warps=cfg.num_warps)
    return sum_splits(part, bias, out) if split > 1 else out
