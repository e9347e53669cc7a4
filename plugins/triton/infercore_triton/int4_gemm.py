"""W4A16 GEMM: ``out[M, N] = x[M, K] @ W[K, N]`` with W stored as 4-bit codes, a scale and a zero-point per
group of input rows and output column (:class:`~infercore.ops.int4_math.Int4Weight`).

The ideas are Marlin's, as far as Triton takes them. The weight was repacked when it loaded into
int32 words of eight consecutive input rows ([K/8, N]), so a program's tile of words is contiguous
along N and every byte of weight is read once; the codes are unpacked, offset by their zero-point and
scaled in registers (in 16-bit pairs, without integer-to-float conversions) and multiplied on the
tensor cores with float32 accumulation. A tile of ``BLOCK_K`` rows never straddles two groups (``BLOCK_K`` divides the group
size), so each step loads one row of scales and zeros. This kernel takes what the others do not
(act-order shards, whose rows carry their own groups) and what the launch table
(:mod:`infercore_triton.int4_table`) gives it; :func:`int4_product` dispatches: decode batches to the packed
16-bit kernel (:mod:`infercore_triton.int4_skinny`) or the multiply-add one (:mod:`infercore_triton.int4_gemv`),
larger M to the weight dequantized into a 16-bit scratch and the dense GEMM. When the tiles alone are too few
to fill the GPU, K is split over several programs whose float32 partials are summed afterwards.

Nothing here syncs with the host: M is a runtime argument and the only allocations are the output, the
partials and the prefill path's dense weight (caching allocator), so the op is safe in CUDA graphs.
"""

from __future__ import annotations

import functools
from dataclasses import dataclass

import torch
import triton
import triton.language as tl

from infercore.plugin_api import int4_reference, op_reference
from infercore_triton.int4_gemv import Int4GemvConfig, gemv_fits, sum_splits, w4a16_gemv
from infercore_triton.int4_skinny import Int4SkinnyConfig, dequantize_skinny, skinny_fits, w4a16_skinny
from infercore_triton.int4_table import TABLE
from infercore_triton.split_k_counters import tile_counters

Int4Weight = int4_reference.Int4Weight

#: From this many rows on, unless the launch table (:data:`infercore_triton.int4_table.TABLE`) measured this
#: bucket, :func:`int4_linear` dequantizes the weight and runs the dense GEMM (compute-bound prefill).
DENSE_MIN_M = 1024
_KERNEL_DTYPES = (torch.bfloat16, torch.float16)
#: Pipeline depth when each row loads its own scales and zeros (act-order shards, narrow groups): their
#: [BLOCK_K, BLOCK_N] tiles would otherwise take more shared memory than an H100/H200 has.
PER_ROW_GROUP_STAGES = 2


@dataclass(frozen=True)
class Int4GemmConfig:
    """Launch settings of one W4A16 product: the output tile (``block_m`` x ``block_n``), the input rows per
    step (``block_k``, at least 16 for ``tl.dot``), Triton's warps and stages, ``split_k`` (0: as many
    splits as fill the GPU) and how words are unpacked."""

    block_m: int
    block_n: int
    block_k: int
    num_warps: int = 4
    num_stages: int = 4
    split_k: int = 0
    #: Load each int32 word once and unpack its eight rows in registers (else each row loads its word).
    unpack_words: bool = True


#: Settings by M bucket (the next power of two of M, at least 16), for M up to 256 and the prefill path's
#: fallback above; shapes measured with ``benchmarks/int4_gemm.py --sweep`` may override them in :data:`TUNED`.
#: Up to 32 rows the tiles are those that issue the fewest instructions per weight compiled for sm_90
#: (``benchmarks/int4_sass.py``: 7.4 and 8.2 lane-instructions a weight), since there the dequantization
#: and not the dot bounds the kernel; not yet timed on a GPU.
LAUNCH_TABLE: dict[int, Int4GemmConfig] = {
    16: Int4GemmConfig(16, 128, 128),
    32: Int4GemmConfig(32, 256, 128, num_warps=8, num_stages=3),
    64: Int4GemmConfig(64, 256, 64, num_warps=8, num_stages=3),
    128: Int4GemmConfig(64, 128, 64, num_warps=4, num_stages=3),
    256: Int4GemmConfig(128, 128, 64, num_warps=8, num_stages=3),
}
#: Measured settings by ``(m_bucket, N, K)``.
TUNED: dict[tuple[int, int, int], Int4GemmConfig] = {}


def m_bucket(m: int) -> int:
    """The launch table's bucket of ``m`` rows: the next power of two, between 16 and 256."""
    return min(256, max(16, triton.next_power_of_2(m)))


def config_for(m: int, n: int, k: int) -> Int4GemmConfig:
    """The settings of an ``m`` x ``n`` x ``k`` product (:data:`TUNED`'s, else the launch table's)."""
    bucket = m_bucket(m)
    return TUNED.get((bucket, n, k)) or LAUNCH_TABLE[bucket]


@functools.cache
def _num_sms(device: torch.device) -> int:
    if device.type == "cuda":
        return torch.cuda.get_device_properties(device).multi_processor_count
    return 132


def _split_to_fill(tiles: int, k: int, block_k: int, num_sms: int) -> int:
    """The fewest splits of K (a power of two) that give two programs per SM, each split at least two steps."""
    split = 1
    while tiles * split < 2 * num_sms and k >= 4 * split * block_k:
        split *= 2
    return split


@triton.jit
def _tile_rows(k0, BLOCK_K: tl.constexpr, UNPACK_WORDS: tl.constexpr, INTERLEAVED: tl.constexpr):
    """The input row of each of a step's BLOCK_K rows. Unpacking words in registers puts nibble ``i`` of
    every word before nibble ``i + 1`` (row ``r`` is nibble ``r // (BLOCK_K/8)`` of word ``r % (BLOCK_K/8)``,
    which holds the word's row ``AWQ_ORDER[i]`` when ``INTERLEAVED``): a dot sums over K in any order, so the
    activations are gathered in the same order instead."""
    r = tl.arange(0, BLOCK_K)
    if UNPACK_WORDS:
        nibble = r // (BLOCK_K // 8)
        if INTERLEAVED:
            nibble = 2 * (nibble % 4) + nibble // 4
        return k0 + 8 * (r % (BLOCK_K // 8)) + nibble
    return k0 + r


@triton.jit
def _dequantized_tile(qw_ptr, s_ptr, z_ptr, rg_ptr, k, k0, k_hi, cols, col_ok, N, GROUP: tl.constexpr,
                      TILE_IN_GROUP: tl.constexpr, ROW_GROUPS: tl.constexpr, UNPACK_WORDS: tl.constexpr,
                      INTERLEAVED: tl.constexpr, BLOCK_K: tl.constexpr, BLOCK_N: tl.constexpr,
                      out_dtype: tl.constexpr):
    """W[k, cols] as [BLOCK_K, BLOCK_N] of ``out_dtype`` (the scales' dtype) for the rows ``k`` of
    :func:`_tile_rows`; eight rows share each int32 word, nibble ``k % 8``."""
    k_ok = k < k_hi
    mask = k_ok[:, None] & col_ok[None, :]
    if UNPACK_WORDS:
        # Each word is loaded once and its eight nibbles spread over eight rows in registers.
        word_rows = k0 // 8 + tl.arange(0, BLOCK_K // 8)
        words = tl.load(qw_ptr + word_rows.to(tl.int64)[:, None] * N + cols[None, :],
                        mask=(word_rows * 8 < k_hi)[:, None] & col_ok[None, :], other=0)
        shifts = tl.arange(0, 8) * 4
        codes = tl.reshape((words[None, :, :] >> shifts[:, None, None]) & 0xF, (BLOCK_K, BLOCK_N))
    else:
        # Each word is loaded by the eight rows it holds (the repeats hit L1).
        words = tl.load(qw_ptr + (k // 8).to(tl.int64)[:, None] * N + cols[None, :], mask=mask, other=0)
        row_in_word = k % 8
        if INTERLEAVED:
            row_in_word = row_in_word // 2 + 4 * (row_in_word % 2)  # the nibble that holds it
        codes = (words >> (row_in_word * 4)[:, None]) & 0xF
    if ROW_GROUPS:
        groups = tl.load(rg_ptr + k, mask=k_ok, other=0)
        offsets = groups[:, None] * N + cols[None, :]
        scales = tl.load(s_ptr + offsets, mask=mask, other=0.0)
        zeros = tl.load(z_ptr + offsets, mask=mask, other=0)
    elif TILE_IN_GROUP:
        # The whole tile is in one group: one row of scales and zeros for every row of codes.
        offsets = (k0 // GROUP) * N + cols
        scales = tl.load(s_ptr + offsets, mask=col_ok, other=0.0)[None, :]
        zeros = tl.load(z_ptr + offsets, mask=col_ok, other=0)[None, :]
    else:
        offsets = (k // GROUP)[:, None] * N + cols[None, :]
        scales = tl.load(s_ptr + offsets, mask=mask, other=0.0)
        zeros = tl.load(z_ptr + offsets, mask=mask, other=0)
    # No integer-to-float conversion (a quarter-rate instruction): a code ORed into the mantissa of a power
    # of two 2^e is the float 2^e + q, and subtracting 2^e + zero leaves q - zero exactly. In 16-bit math
    # (2^7 in bfloat16, 2^10 in float16, as Marlin does) two rows share each instruction.
    if out_dtype == tl.bfloat16:
        values = (codes.to(tl.int16) | 0x4300).to(tl.bfloat16, bitcast=True)
        w = (values - (zeros.to(tl.float32) + 128.0).to(tl.bfloat16)) * scales
    elif out_dtype == tl.float16:
        values = (codes.to(tl.int16) | 0x6400).to(tl.float16, bitcast=True)
        w = (values - (zeros.to(tl.float32) + 1024.0).to(tl.float16)) * scales
    else:
        values = (codes | 0x4B000000).to(tl.float32, bitcast=True)
        w = (values - (zeros.to(tl.float32) + 8388608.0)) * scales.to(tl.float32)
    return w


@triton.jit(do_not_specialize=["M"])
def _w4a16_kernel(x_ptr, qw_ptr, s_ptr, z_ptr, rg_ptr, bias_ptr, out_ptr, part_ptr, M, N, K, stride_xm,
                  stride_om, k_per_split, GROUP: tl.constexpr, TILE_IN_GROUP: tl.constexpr,
                  ROW_GROUPS: tl.constexpr, UNPACK_WORDS: tl.constexpr, INTERLEAVED: tl.constexpr,
                  HAS_BIAS: tl.constexpr,
                  SPLIT: tl.constexpr, DOT_PRECISION: tl.constexpr, BLOCK_M: tl.constexpr,
                  BLOCK_N: tl.constexpr, BLOCK_K: tl.constexpr):
    pid_m = tl.program_id(0)
    pid_n = tl.program_id(1)
    pid_k = tl.program_id(2)
    rows = pid_m * BLOCK_M + tl.arange(0, BLOCK_M)
    cols = pid_n * BLOCK_N + tl.arange(0, BLOCK_N)
    row_ok = rows < M
    col_ok = cols < N
    k_lo = pid_k * k_per_split
    k_hi = tl.minimum(k_lo + k_per_split, K)
    x_rows = x_ptr + rows.to(tl.int64)[:, None] * stride_xm
    acc = tl.zeros((BLOCK_M, BLOCK_N), dtype=tl.float32)
    for k0 in range(k_lo, k_hi, BLOCK_K):
        k = _tile_rows(k0, BLOCK_K, UNPACK_WORDS, INTERLEAVED)
        x = tl.load(x_rows + k[None, :], mask=row_ok[:, None] & (k < k_hi)[None, :], other=0.0)
        w = _dequantized_tile(qw_ptr, s_ptr, z_ptr, rg_ptr, k, k0, k_hi, cols, col_ok, N, GROUP, TILE_IN_GROUP,
                              ROW_GROUPS, UNPACK_WORDS, INTERLEAVED, BLOCK_K, BLOCK_N, s_ptr.dtype.element_ty)
        acc += tl.dot(x, w.to(x.dtype), input_precision=DOT_PRECISION)
    mask = row_ok[:, None] & col_ok[None, :]
    if SPLIT:
        tl.store(part_ptr + (pid_k * M + rows[:, None]) * N + cols[None, :], acc, mask=mask)
    else:
        if HAS_BIAS:
            acc += tl.load(bias_ptr + cols, mask=col_ok, other=0.0).to(tl.float32)[None, :]
        tl.store(out_ptr + rows[:, None] * stride_om + cols[None, :], acc.to(out_ptr.dtype.element_ty), mask=mask)


@triton.jit
def _dequantize_kernel(qw_ptr, s_ptr, z_ptr, rg_ptr, out_ptr, N, K, GROUP: tl.constexpr,
                       TILE_IN_GROUP: tl.constexpr, ROW_GROUPS: tl.constexpr, UNPACK_WORDS: tl.constexpr,
                       INTERLEAVED: tl.constexpr, BLOCK_N: tl.constexpr, BLOCK_K: tl.constexpr):
    k0 = tl.program_id(0) * BLOCK_K
    k = _tile_rows(k0, BLOCK_K, UNPACK_WORDS, INTERLEAVED)
    cols = tl.program_id(1) * BLOCK_N + tl.arange(0, BLOCK_N)
    col_ok = cols < N
    w = _dequantized_tile(qw_ptr, s_ptr, z_ptr, rg_ptr, k, k0, K, cols, col_ok, N, GROUP, TILE_IN_GROUP,
                          ROW_GROUPS, UNPACK_WORDS, INTERLEAVED, BLOCK_K, BLOCK_N, s_ptr.dtype.element_ty)
    tl.store(out_ptr + k.to(tl.int64)[:, None] * N + cols[None, :], w.to(out_ptr.dtype.element_ty),
             mask=(k < K)[:, None] & col_ok[None, :])


def _block_k_for(group: int, block_k: int) -> tuple[int, bool]:
    """(rows per step, whether a step stays inside one group): the table's ``block_k`` halved until it
    divides the group size, unless that would go below 16 (then each row finds its own group)."""
    bk = block_k
    while bk > 16 and group % bk:
        bk //= 2
    return bk, group % bk == 0


def _group_args(weight: Int4Weight, block_k: int) -> tuple[int, dict[str, object]]:
    bk, in_group = _block_k_for(weight.group_size, block_k)
    return bk, {"GROUP": weight.group_size, "TILE_IN_GROUP": in_group and weight.row_groups is None,
                "ROW_GROUPS": weight.row_groups is not None, "INTERLEAVED": weight.interleaved}


def w4a16_gemm(x: torch.Tensor, weight: Int4Weight, bias: torch.Tensor | None = None,
               config: Int4GemmConfig | None = None) -> torch.Tensor:
    """``x @ W + bias`` for ``x`` [M, K] (last dimension contiguous; columns already in ``weight.perm``'s
    order) and the 4-bit ``weight``; float32 accumulation, output in ``x``'s dtype. Single rows go to the
    multiply-add kernel (:mod:`infercore_triton.int4_gemv`) unless ``config`` asks for this one."""
    m, k = x.shape
    n = weight.out_features
    if k != weight.in_features or x.stride(1) != 1:
        raise ValueError(f"w4a16_gemm multiplies x [M, {weight.in_features}] with a contiguous last dimension; "
                         f"got {tuple(x.shape)} with strides {x.stride()}")
    if config is None and gemv_fits(x, weight):
        return w4a16_gemv(x, weight, bias, split_for=2 * _num_sms(x.device))
    out = torch.empty((m, n), dtype=x.dtype, device=x.device)
    if m == 0:
        return out
    cfg = config or config_for(m, n, k)
    block_k, group_args = _group_args(weight, cfg.block_k)
    tiles = triton.cdiv(m, cfg.block_m) * triton.cdiv(n, cfg.block_n)
    split = cfg.split_k or _split_to_fill(tiles, k, block_k, _num_sms(x.device))
    k_per_split = triton.cdiv(triton.cdiv(k, split), block_k) * block_k
    split = triton.cdiv(k, k_per_split)
    part = torch.empty((split, m, n), dtype=torch.float32, device=x.device) if split > 1 else out
    row_groups = weight.row_groups if weight.row_groups is not None else weight.zeros
    grid = (triton.cdiv(m, cfg.block_m), triton.cdiv(n, cfg.block_n), split)
    _w4a16_kernel[grid](
        x, weight.qweight, weight.scales, weight.zeros, row_groups, bias if bias is not None else out, out, part,
        m, n, k, x.stride(0), out.stride(0), k_per_split, HAS_BIAS=bias is not None, SPLIT=split > 1,
        DOT_PRECISION="ieee" if x.dtype == torch.float32 else "tf32", BLOCK_M=cfg.block_m, BLOCK_N=cfg.block_n,
        BLOCK_K=block_k, UNPACK_WORDS=cfg.unpack_words, num_warps=cfg.num_warps,
        num_stages=cfg.num_stages if group_args["TILE_IN_GROUP"] else min(cfg.num_stages, PER_ROW_GROUP_STAGES),
        **group_args)
    return sum_splits(part, bias, out) if split > 1 else out


def dequantize_int4(weight: Int4Weight, dtype: torch.dtype, unpack_words: bool = True) -> torch.Tensor:
    """The weight as a dense [K, N] tensor of ``dtype`` (rows in ``weight.perm``'s order)."""
    k, n = weight.in_features, weight.out_features
    out = torch.empty((k, n), dtype=dtype, device=weight.qweight.device)
    block_k, group_args = _group_args(weight, 64)
    row_groups = weight.row_groups if weight.row_groups is not None else weight.zeros
    grid = (triton.cdiv(k, block_k), triton.cdiv(n, 128))
    _dequantize_kernel[grid](weight.qweight, weight.scales, weight.zeros, row_groups, out, n, k, BLOCK_N=128,
                             BLOCK_K=block_k, UNPACK_WORDS=unpack_words, **group_args)
    return out


def uses_kernel(x: torch.Tensor, weight: Int4Weight) -> bool:
    """Whether :func:`int4_linear` runs this product in Triton rather than the torch reference."""
    return (x.device.type == "cuda" and x.dtype in _KERNEL_DTYPES and weight.scales.dtype == x.dtype
            and weight.qweight.device == x.device)


def dequantize_for(weight: Int4Weight, x: torch.Tensor, via: str = "skinny") -> torch.Tensor:
    """The weight as dense [K, N] of ``x``'s dtype, by the packed 16-bit kernel where it applies (``via``
    "skinny"), else by the tile kernel's dequantization ("tile")."""
    if via == "skinny" and skinny_fits(x, weight):
        return dequantize_skinny(weight)
    return dequantize_int4(weight, x.dtype)


def _dense(x2: torch.Tensor, weight: Int4Weight, bias: torch.Tensor | None, via: str = "skinny") -> torch.Tensor:
    out = torch.matmul(x2, dequantize_for(weight, x2, via))
    if bias is not None:
        out += bias
    return out


def int4_product(x2: torch.Tensor, weight: Int4Weight, bias: torch.Tensor | None = None) -> torch.Tensor:
    """``x2 @ W + bias`` for ``x2`` [M, K] (contiguous rows, columns in ``weight.perm``'s order) by the path the
    launch table (:mod:`infercore_triton.int4_table`) picks, falling back where a path does not take it."""
    m, k = x2.shape
    n = weight.out_features
    tile_counters(x2.device, 0)  # made by the first eager call (the memory profile's), for the captured ones
    choice = TABLE.choice(m, n, k, exact=True)
    if choice is None and m >= min(DENSE_MIN_M, TABLE.dense_min_m):
        kernel = "dense"
    else:
        # Rows past the sweep's buckets (and below its dense threshold) take the largest measured bucket's.
        choice = choice or TABLE.choice(m, n, k)
        kernel = choice.kernel if choice else "skinny"
    settings = choice.config if choice and choice.kernel == kernel else {}
    if kernel == "dense":
        return _dense(x2, weight, bias, str(settings.get("via", "skinny")))
    if kernel == "skinny" and skinny_fits(x2, weight):
        return w4a16_skinny(x2, weight, bias, Int4SkinnyConfig(**settings) if settings else None)
    if kernel == "gemv" and gemv_fits(x2, weight):
        config = Int4GemvConfig(**settings) if settings else None
        return w4a16_gemv(x2, weight, bias, split_for=2 * _num_sms(x2.device), config=config)
    config = Int4GemmConfig(**settings) if kernel == "gemm" and settings else None
    return w4a16_gemm(x2, weight, bias, config=config)


def int4_linear(x: torch.Tensor, weight: Int4Weight, bias: torch.Tensor | None = None) -> torch.Tensor:
    """Custom op ``int4_linear`` on NVIDIA GPUs: the path :func:`int4_product` picks; the reference for other
    devices and dtypes."""
    if not uses_kernel(x, weight):
        return op_reference.int4_linear(x, weight, bias)
    x2 = x.reshape(-1, x.shape[-1])
    if weight.perm is not None:
        x2 = x2.index_select(1, weight.perm)
    elif x2.stride(1) != 1:
        x2 = x2.contiguous()
    return int4_product(x2, weight, bias).reshape(*x.shape[:-1], weight.out_features)
