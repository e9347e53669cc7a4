"""W4A16 product of decode batches (1 to a few dozen rows) on the tensor cores, dequantizing in packed 16-bit math.

A decode step reads each 4-bit weight once to multiply a few rows, so the kernel is bound by how few
instructions turn the codes into tensor-core operands. Each int32 word of
:class:`~infercore.ops.int4_math.Int4Weight` ([K/8, N], eight input rows per word) is shifted once per
nibble pair, and one ``lop3`` turns nibbles ``r`` and ``r + 4`` into the two 16-bit halves ``0x4300 | q``
of a register, which read as bfloat16 are exactly ``128 + q`` (float16: ``0x6400 | q`` is ``1024 + q``);
one packed ``fma`` subtracts ``128 + zero`` from both, exactly, leaving the small integers ``q - zero`` as
the dot's operand. The scale multiplies the float32 dot of each step (a step never straddles two groups),
so nothing is rounded before the float32 sums but the products.

Loaded weights are ``interleaved``: nibbles ``r`` and ``r + 4`` are rows ``2r`` and ``2r + 1``, so each
register already is the pair of consecutive rows the tensor cores take and the tile goes to shared memory
in 16-byte stores (compiled for sm_90, 3.25 instructions a weight against 3.75 for sequential words:
``benchmarks/int4_sass.py``). The tile is built as the weight's transpose [BLOCK_N, BLOCK_K], each word's
eight values in the registers of the thread that loaded it. ``SWAP`` computes ``(W^T x^T)^T``, the weight
tile as the dot's left operand (64 or more of its rows fill the tensor cores' M even for one row of
activations); else ``x @ W``. K is split over programs until the GPU is full; float32 partials are summed
after. Under Triton's interpreter (no inline assembly) the same values come from plain integer operations.
"""

from __future__ import annotations

import functools
from dataclasses import dataclass

import torch
import triton
import triton.language as tl

from infercore.plugin_api import int4_reference
from infercore_triton.int4_gemv import sum_splits
from infercore_triton.split_k_counters import tile_counters

Int4Weight = int4_reference.Int4Weight

#: 16-bit patterns whose low nibble is free: bfloat16 128.0 and float16 1024.0.
_MAGIC = {torch.bfloat16: 0x4300, torch.float16: 0x6400}


@dataclass(frozen=True)
class Int4SkinnyConfig:
    """Launch settings: activation rows per tile (``block_m``, at least 16), output columns (``block_n``),
    input rows per step (``block_k``, halved until it divides the group), warps, stages, ``split_k`` (0: as
    many K splits as fill the GPU), ``swap`` (weight tile as the dot's left operand) and ``asm`` (the
    inline-assembly dequantization; off under the interpreter)."""

    block_m: int = 16
    block_n: int = 128
    block_k: int = 128
    num_warps: int = 4
    num_stages: int = 4
    split_k: int = 0
    swap: bool = True
    asm: bool = True
    #: With K split, the last program of each tile sums the partials (no second launch;
    #: :mod:`infercore_triton.split_k_counters`).
    fused_reduce: bool = False
    #: Scale the 16-bit weights before the dot (rounding each once, as the dense path does) rather than the
    #: float32 dot of each step.
    scale_weights: bool = False


_BF16_ASM = tl.constexpr("""{
.reg .b32 t, one;
mov.b32 one, 0x3F803F80;
lop3.b32 t, $2, 0x000F000F, 0x43004300, 0xea;
fma.rn.bf16x2 t, t, one, $3;
mov.b32 {$0, $1}, t;
}""")
#: The same, then times the scale pair in $4 (plus -0.0: one rounding of the exact product).
_BF16_SCALED_ASM = tl.constexpr("""{
.reg .b32 t, one, nz;
mov.b32 one, 0x3F803F80;
mov.b32 nz, 0x80008000;
lop3.b32 t, $2, 0x000F000F, 0x43004300, 0xea;
fma.rn.bf16x2 t, t, one, $3;
fma.rn.bf16x2 t, t, $4, nz;
mov.b32 {$0, $1}, t;
}""")
_F16_SCALED_ASM = tl.constexpr("""{
.reg .b32 t, one, nz;
mov.b32 one, 0x3C003C00;
mov.b32 nz, 0x80008000;
lop3.b32 t, $2, 0x000F000F, 0x64006400, 0xea;
fma.rn.f16x2 t, t, one, $3;
fma.rn.f16x2 t, t, $4, nz;
mov.b32 {$0, $1}, t;
}""")
_F16_ASM = tl.constexpr("""{
.reg .b32 t, one;
mov.b32 one, 0x3C003C00;
lop3.b32 t, $2, 0x000F000F, 0x64006400, 0xea;
fma.rn.f16x2 t, t, one, $3;
mov.b32 {$0, $1}, t;
}""")


@triton.jit
def _codes_minus_zeros(shifted, neg_zero, scale_pair, SCALED: tl.constexpr, ASM: tl.constexpr, MAGIC: tl.constexpr,
                       dtype: tl.constexpr):
    """``(q_lo - z, q_hi - z)`` in ``dtype`` for the nibbles in bits 0-3 and 16-19 of ``shifted``; ``neg_zero``
    holds the 16-bit pattern of ``-(MAGIC value + z)`` in both halves. ``SCALED``: times the scale whose
    16-bit pattern ``scale_pair`` holds in both halves, rounded once."""
    if ASM and SCALED:
        if MAGIC == 0x4300:
            lo, hi = tl.inline_asm_elementwise(_BF16_SCALED_ASM, "=h,=h,r,r,r", [shifted, neg_zero, scale_pair],
                                               dtype=(tl.bfloat16, tl.bfloat16), is_pure=True, pack=1)
        else:
            lo, hi = tl.inline_asm_elementwise(_F16_SCALED_ASM, "=h,=h,r,r,r", [shifted, neg_zero, scale_pair],
                                               dtype=(tl.float16, tl.float16), is_pure=True, pack=1)
    elif ASM:
        if MAGIC == 0x4300:
            lo, hi = tl.inline_asm_elementwise(_BF16_ASM, "=h,=h,r,r", [shifted, neg_zero],
                                               dtype=(tl.bfloat16, tl.bfloat16), is_pure=True, pack=1)
        else:
            lo, hi = tl.inline_asm_elementwise(_F16_ASM, "=h,=h,r,r", [shifted, neg_zero],
                                               dtype=(tl.float16, tl.float16), is_pure=True, pack=1)
    else:
        zero = (neg_zero & 0xFFFF) - (MAGIC | 0x8000)
        lo = ((shifted & 0xF) - zero).to(tl.float32)
        hi = (((shifted >> 16) & 0xF) - zero).to(tl.float32)
        if SCALED:
            scale = (scale_pair & 0xFFFF).to(tl.int16).to(dtype, bitcast=True).to(tl.float32)
            lo, hi = lo * scale, hi * scale
        lo, hi = lo.to(dtype), hi.to(dtype)
    return lo, hi


@triton.jit
def _weight_tile(qw_ptr, z_ptr, scales, k0, k_hi, cols, col_ok, N, stride_qk, stride_qn, GROUP: tl.constexpr,
                 BLOCK_K: tl.constexpr, INTERLEAVED: tl.constexpr, SCALED: tl.constexpr, ASM: tl.constexpr,
                 MAGIC: tl.constexpr, dtype: tl.constexpr):
    """``q - zero`` (times ``scales`` [BLOCK_N] when ``SCALED``) of columns ``cols`` and rows ``k0 .. k0 + BLOCK_K``
    as [BLOCK_N, BLOCK_K] of ``dtype`` (the weight's transpose): each word's eight values stay in the registers
    of the thread that loaded it."""
    word_rows = k0 // 8 + tl.arange(0, BLOCK_K // 8)
    words = tl.load(qw_ptr + cols.to(tl.int64)[:, None] * stride_qn + word_rows.to(tl.int64)[None, :] * stride_qk,
                    mask=col_ok[:, None] & (word_rows * 8 < k_hi)[None, :], other=0)
    zeros = tl.load(z_ptr + (k0 // GROUP) * N + cols, mask=col_ok, other=0).to(tl.int32)
    neg_zero = (MAGIC | 0x8000) + zeros
    neg_zero = (neg_zero | (neg_zero << 16))[:, None]
    scale_pair = scales.to(tl.int16, bitcast=True).to(tl.int32) & 0xFFFF
    scale_pair = (scale_pair | (scale_pair << 16))[:, None]
    # Register r = 2 * r1 + r0 of a word (``word >> 4r`` masked) holds its nibbles r and r + 4 as the halves h.
    lo0, hi0 = _codes_minus_zeros(words, neg_zero, scale_pair, SCALED, ASM, MAGIC, dtype)
    lo1, hi1 = _codes_minus_zeros(words >> 4, neg_zero, scale_pair, SCALED, ASM, MAGIC, dtype)
    lo2, hi2 = _codes_minus_zeros(words >> 8, neg_zero, scale_pair, SCALED, ASM, MAGIC, dtype)
    lo3, hi3 = _codes_minus_zeros(words >> 12, neg_zero, scale_pair, SCALED, ASM, MAGIC, dtype)
    if INTERLEAVED:
        # Nibbles r and r + 4 are rows 2r and 2r + 1: each register is a pair of consecutive rows, as the
        # tensor cores' operands are; [N, words, h, r1, r0] -> row 4 * r1 + 2 * r0 + h.
        w = tl.join(tl.join(tl.join(lo0, hi0), tl.join(lo2, hi2)), tl.join(tl.join(lo1, hi1), tl.join(lo3, hi3)))
        w = tl.permute(w, (0, 1, 3, 4, 2))
    else:
        # Nibbles r and r + 4 are rows r and r + 4: [N, words, r0, r1, h] -> row 4 * h + 2 * r1 + r0.
        w = tl.join(tl.join(tl.join(lo0, lo1), tl.join(lo2, lo3)), tl.join(tl.join(hi0, hi1), tl.join(hi2, hi3)))
        w = tl.permute(w, (0, 1, 4, 3, 2))
    return tl.reshape(w, (w.shape[0], BLOCK_K))


@triton.jit(do_not_specialize=["M"])
def _w4a16_skinny_kernel(x_ptr, qw_ptr, s_ptr, z_ptr, bias_ptr, out_ptr, part_ptr, lock_ptr, M, N, K, stride_xm,
                         stride_om, stride_qk, stride_qn, k_per_split, GROUP: tl.constexpr, INTERLEAVED: tl.constexpr,
                         MAGIC: tl.constexpr, ASM: tl.constexpr, SWAP: tl.constexpr, HAS_BIAS: tl.constexpr,
                         SPLIT: tl.constexpr, FUSED_REDUCE: tl.constexpr, SCALE_WEIGHTS: tl.constexpr,
                         BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr, BLOCK_K: tl.constexpr):
    pid_m = tl.program_id(0)
    pid_n = tl.program_id(1)
    pid_k = tl.program_id(2)
    rows = pid_m * BLOCK_M + tl.arange(0, BLOCK_M)
    cols = pid_n * BLOCK_N + tl.arange(0, BLOCK_N)
    row_ok = rows < M
    col_ok = cols < N
    k_lo = pid_k * k_per_split
    k_hi = tl.minimum(k_lo + k_per_split, K)
    dtype = s_ptr.dtype.element_ty
    x_rows = x_ptr + rows.to(tl.int64)[:, None] * stride_xm
    if SWAP:
        acc = tl.zeros((BLOCK_N, BLOCK_M), dtype=tl.float32)
    else:
        acc = tl.zeros((BLOCK_M, BLOCK_N), dtype=tl.float32)
    for k0 in range(k_lo, k_hi, BLOCK_K):
        k = k0 + tl.arange(0, BLOCK_K)
        x = tl.load(x_rows + k[None, :], mask=row_ok[:, None] & (k < k_hi)[None, :], other=0.0).to(dtype)
        scales = tl.load(s_ptr + (k0 // GROUP) * N + cols, mask=col_ok, other=0.0)
        # SCALE_WEIGHTS: one packed multiply a pair of weights (rounded once, to the weight's 16 bits) instead of
        # one float32 multiply-add per output per step, cheaper when many rows share each weight.
        w = _weight_tile(qw_ptr, z_ptr, scales, k0, k_hi, cols, col_ok, N, stride_qk, stride_qn, GROUP, BLOCK_K,
                         INTERLEAVED, SCALE_WEIGHTS, ASM, MAGIC, dtype)
        if SCALE_WEIGHTS:
            if SWAP:
                acc = tl.dot(w, tl.trans(x), acc)
            else:
                acc = tl.dot(x, tl.trans(w), acc)
        elif SWAP:
            acc += tl.dot(w, tl.trans(x)) * scales.to(tl.float32)[:, None]
        else:
            acc += tl.dot(x, tl.trans(w)) * scales.to(tl.float32)[None, :]
    if SWAP:
        result = tl.trans(acc)
    else:
        result = acc
    mask = row_ok[:, None] & col_ok[None, :]
    last = True
    if SPLIT:
        parts = part_ptr + rows[:, None] * N + cols[None, :]
        tl.store(parts + pid_k * M * N, result, mask=mask)
        last = False
        if FUSED_REDUCE:
            # The tile's last split to finish sums the partials (read from L2) and resets the tile's counter.
            tl.debug_barrier()
            tile = pid_m * tl.num_programs(1) + pid_n
            arrived = tl.atomic_add(lock_ptr + tile, 1, sem="acq_rel", scope="gpu")
            last = arrived == tl.num_programs(2) - 1
            if last:
                result = tl.zeros_like(result)
                for split in range(0, tl.num_programs(2)):
                    result += tl.load(parts + split * M * N, mask=mask, other=0.0, cache_modifier=".cg")
                tl.atomic_xchg(lock_ptr + tile, 0, sem="relaxed", scope="gpu")
    if last:
        if HAS_BIAS:
            result += tl.load(bias_ptr + cols, mask=col_ok, other=0.0).to(tl.float32)[None, :]
        tl.store(out_ptr + rows[:, None] * stride_om + cols[None, :], result.to(out_ptr.dtype.element_ty), mask=mask)


@triton.jit
def _dequantize_kernel(qw_ptr, s_ptr, z_ptr, out_ptr, N, K, stride_qk, stride_qn, GROUP: tl.constexpr,
                       INTERLEAVED: tl.constexpr, MAGIC: tl.constexpr, ASM: tl.constexpr, BLOCK_N: tl.constexpr,
                       BLOCK_K: tl.constexpr):
    k0 = tl.program_id(0) * BLOCK_K
    cols = tl.program_id(1) * BLOCK_N + tl.arange(0, BLOCK_N)
    col_ok = cols < N
    dtype = s_ptr.dtype.element_ty
    scales = tl.load(s_ptr + (k0 // GROUP) * N + cols, mask=col_ok, other=0.0)
    w = _weight_tile(qw_ptr, z_ptr, scales, k0, K, cols, col_ok, N, stride_qk, stride_qn, GROUP, BLOCK_K, INTERLEAVED,
                     True, ASM, MAGIC, dtype)
    k = k0 + tl.arange(0, BLOCK_K)
    tl.store(out_ptr + k.to(tl.int64)[None, :] * N + cols[:, None], w.to(out_ptr.dtype.element_ty),
             mask=(k < K)[None, :] & col_ok[:, None])


@functools.cache
def _num_sms(device: torch.device) -> int:
    if device.type == "cuda":
        return torch.cuda.get_device_properties(device).multi_processor_count
    return 132


def step_rows(group: int, block_k: int) -> int:
    """The configured rows per step, halved until they divide the group (at least 16)."""
    while block_k > 16 and group % block_k:
        block_k //= 2
    return block_k


def skinny_fits(x: torch.Tensor, weight: Int4Weight) -> bool:
    """Whether :func:`w4a16_skinny` takes this product: 16-bit activations with scales of their dtype, groups of
    whole 16-row steps that are runs of rows (not an act-order shard's ``row_groups``)."""
    return (x.dtype in _MAGIC and weight.scales.dtype == x.dtype and weight.row_groups is None
            and weight.group_size % 16 == 0)


def w4a16_skinny(x: torch.Tensor, weight: Int4Weight, bias: torch.Tensor | None = None,
                 config: Int4SkinnyConfig | None = None) -> torch.Tensor:
    """``x @ W + bias`` for ``x`` [M, K] (contiguous last dimension, columns in ``weight.perm``'s order); float32
    accumulation, output in ``x``'s dtype. Needs :func:`skinny_fits`."""
    cfg = config or Int4SkinnyConfig()
    m, k = x.shape
    n = weight.out_features
    out = torch.empty((m, n), dtype=x.dtype, device=x.device)
    if m == 0:
        return out
    block_k = step_rows(weight.group_size, cfg.block_k)
    tiles = triton.cdiv(m, cfg.block_m) * triton.cdiv(n, cfg.block_n)
    split = cfg.split_k or 1
    if not cfg.split_k:
        while tiles * split < 2 * _num_sms(x.device) and k >= 4 * split * block_k:
            split *= 2
    k_per_split = triton.cdiv(triton.cdiv(k, split), block_k) * block_k
    split = triton.cdiv(k, k_per_split)
    part = torch.empty((split, m, n), dtype=torch.float32, device=x.device) if split > 1 else out
    grid = (triton.cdiv(m, cfg.block_m), triton.cdiv(n, cfg.block_n), split)
    counters = tile_counters(x.device, tiles) if cfg.fused_reduce and split > 1 else None
    fused = counters is not None
    locks = counters if fused else part
    _w4a16_skinny_kernel[grid](
        x, weight.qweight, weight.scales, weight.zeros, bias if bias is not None else out, out, part, locks, m, n, k,
        x.stride(0), out.stride(0), weight.qweight.stride(0), weight.qweight.stride(1), k_per_split, GROUP=weight.group_size,
        INTERLEAVED=weight.interleaved, MAGIC=_MAGIC[x.dtype],
        ASM=cfg.asm and x.device.type == "cuda", SWAP=cfg.swap, HAS_BIAS=bias is not None, SPLIT=split > 1,
        FUSED_REDUCE=fused, SCALE_WEIGHTS=cfg.scale_weights, BLOCK_M=cfg.block_m, BLOCK_N=cfg.block_n, BLOCK_K=block_k, num_warps=cfg.num_warps,
        num_stages=cfg.num_stages)
    return sum_splits(part, bias, out) if split > 1 and not fused else out


def dequantize_skinny(weight: Int4Weight, block_n: int = 128, block_k: int = 64, asm: bool = True) -> torch.Tensor:
    """The weight as a dense [K, N] tensor of the scales' dtype (rows in ``weight.perm``'s order); needs
    :func:`skinny_fits`' conditions on the weight."""
    k, n = weight.in_features, weight.out_features
    out = torch.empty((k, n), dtype=weight.scales.dtype, device=weight.qweight.device)
    block_k = step_rows(weight.group_size, block_k)
    grid = (triton.cdiv(k, block_k), triton.cdiv(n, block_n))
    _dequantize_kernel[grid](weight.qweight, weight.scales, weight.zeros, out, n, k, weight.qweight.stride(0),
                             weight.qweight.stride(1), GROUP=weight.group_size, INTERLEAVED=weight.interleaved,
                             MAGIC=_MAGIC[weight.scales.dtype], ASM=asm and out.device.type == "cuda",
                             BLOCK_N=block_n, BLOCK_K=block_k)
    return out
