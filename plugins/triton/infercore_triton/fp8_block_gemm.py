"""W8A8 GEMM with block-scaled FP8 weights: activations quantized per token and group of ``block_k``
columns, weights with one scale per ``block_n`` x ``block_k`` block, float32 accumulation.

One program computes a ``block_m`` x ``tile_n`` tile of the output over a range of K's scale groups.
At decode sizes (a few rows against a wide weight) tiles alone are too few to keep every multiprocessor
reading the weight, so narrower tiles and a split of K fill the machine: each split writes float32
partials that a second launch sums (and adds the bias to). Launch settings come from :data:`TUNED`
(filled from ``benchmarks/fp8_gemm.py --sweep``) or else from :func:`default_config`. No host sync and
no per-M compile: the op is safe to capture in CUDA graphs.
"""

from __future__ import annotations

import functools
from dataclasses import dataclass

import torch
import triton
import triton.language as tl

from infercore.plugin_api import op_reference
from infercore_triton.fp8_quant import quantize_groups
from infercore_triton.fp8_support import has_fp8_dot
from infercore_triton.skinny_gemm import split_k_reduce


@dataclass(frozen=True)
class BlockGemmConfig:
    """Launch settings: output tile (``block_m`` rows by ``tile_n`` columns), K split in ``split_k``
    ranges of whole scale groups, Triton's warps and pipeline stages."""

    block_m: int
    tile_n: int
    split_k: int = 1
    num_warps: int = 4
    num_stages: int = 3

    def __post_init__(self) -> None:
        for name in ("block_m", "tile_n", "split_k"):
            value = getattr(self, name)
            if value < 1 or value & (value - 1):
                raise ValueError(f"BlockGemmConfig.{name} must be a power of two, got {value}")
        if self.block_m < 16 or self.tile_n < 16:
            raise ValueError(f"tl.dot needs tiles of at least 16 rows and columns, got {self}")


def _tuned(block_m: int, tile_n: int, split_k: int, num_stages: int) -> BlockGemmConfig:
    return BlockGemmConfig(block_m=block_m, tile_n=tile_n, split_k=split_k, num_stages=num_stages)


#: Measured settings by ``(m_bucket(M), N, K)`` where they beat :func:`default_config` by 3% or more
#: (``benchmarks/fp8_gemm.py --sweep`` on an H200, Qwen3-8B's projections); other shapes use the default.
#: At one row the qkv projection takes 13.0 µs against 15.5 (default) and cuBLAS bf16's 19.7.
TUNED: dict[tuple[int, int, int], BlockGemmConfig] = {
    (16, 6144, 4096): _tuned(16, 32, 4, 3), (32, 6144, 4096): _tuned(32, 32, 4, 3),
    (64, 6144, 4096): _tuned(64, 32, 2, 4), (128, 6144, 4096): _tuned(64, 64, 2, 4),
    (16, 4096, 4096): _tuned(16, 32, 4, 4), (256, 4096, 4096): _tuned(64, 64, 1, 4),
    (16, 24576, 4096): _tuned(16, 32, 1, 4), (128, 24576, 4096): _tuned(64, 64, 1, 4),
    (16, 4096, 12288): _tuned(16, 32, 8, 3), (32, 4096, 12288): _tuned(32, 32, 4, 4),
    (64, 4096, 12288): _tuned(64, 32, 4, 4), (128, 4096, 12288): _tuned(64, 64, 4, 3),
    (256, 4096, 12288): _tuned(64, 64, 2, 3),
}


def m_bucket(m: int) -> int:
    """The tuning bucket of ``m`` rows: the next power of two, at least 16."""
    return max(16, triton.next_power_of_2(m))


def _block_m(m: int) -> int:
    return 16 if m <= 16 else 32 if m <= 32 else 64


@functools.lru_cache(maxsize=512)
def default_config(m: int, n: int, k: int, block_n: int, block_k: int, num_sms: int = 132) -> BlockGemmConfig:
    """Tiles as wide as the weight's scale block (at most 128) over 16-64 rows; while there are fewer than
    two programs per multiprocessor, tiles narrow to 32 columns and then K splits (each split keeping at
    least two scale groups)."""
    block_m = _block_m(m)
    tile_n = min(128, triton.next_power_of_2(block_n))
    m_tiles = triton.cdiv(m, block_m)
    while tile_n > 32 and m_tiles * triton.cdiv(n, tile_n) < 2 * num_sms:
        tile_n //= 2
    split_k, groups = 1, triton.cdiv(k, block_k)
    while m_tiles * triton.cdiv(n, tile_n) * split_k < 2 * num_sms and groups >= 4 * split_k:
        split_k *= 2
    return BlockGemmConfig(block_m=block_m, tile_n=tile_n, split_k=split_k)


def config_for(m: int, n: int, k: int, block_n: int, block_k: int, num_sms: int = 132) -> BlockGemmConfig:
    """The settings for an ``m`` x ``n`` x ``k`` product: :data:`TUNED`'s entry or the default."""
    return TUNED.get((m_bucket(m), n, k)) or default_config(m, n, k, block_n, block_k, num_sms)


@functools.cache
def _num_sms(device: torch.device) -> int:
    if device.type == "cuda":
        return torch.cuda.get_device_properties(device).multi_processor_count
    return 132


@triton.jit(do_not_specialize=["M"])
def _fp8_block_gemm_kernel(a_ptr, a_scale_ptr, b_ptr, b_scale_ptr, c_ptr, part_ptr, bias_ptr, M, N, K,
                           stride_am, stride_ak, stride_asm, stride_ask, stride_bn, stride_bk,
                           stride_bsn, stride_bsk, stride_cm, stride_cn, steps_per_split,
                           GROUP_N: tl.constexpr, HAS_BIAS: tl.constexpr, SPLIT: tl.constexpr,
                           BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr, BLOCK_K: tl.constexpr):
    # BLOCK_K is the scale group along K, so each step's partial product takes one activation scale
    # per row and one weight scale per column.
    pid_m = tl.program_id(0)
    pid_n = tl.program_id(1)
    pid_k = tl.program_id(2)
    rows = pid_m * BLOCK_M + tl.arange(0, BLOCK_M)
    cols = pid_n * BLOCK_N + tl.arange(0, BLOCK_N)
    ks = tl.arange(0, BLOCK_K)
    row_ok = rows < M
    col_ok = cols < N
    step_lo = pid_k * steps_per_split
    step_hi = tl.minimum(step_lo + steps_per_split, tl.cdiv(K, BLOCK_K))
    acc = tl.zeros((BLOCK_M, BLOCK_N), dtype=tl.float32)
    for step in range(step_lo, step_hi):
        k = step * BLOCK_K + ks
        k_ok = k < K
        a = tl.load(a_ptr + rows[:, None] * stride_am + k[None, :] * stride_ak,
                    mask=row_ok[:, None] & k_ok[None, :], other=0.0)
        b = tl.load(b_ptr + cols[None, :].to(tl.int64) * stride_bn + k[:, None] * stride_bk,
                    mask=col_ok[None, :] & k_ok[:, None], other=0.0)
        a_scale = tl.load(a_scale_ptr + rows * stride_asm + step * stride_ask, mask=row_ok, other=0.0)
        b_scale = tl.load(b_scale_ptr + (cols // GROUP_N) * stride_bsn + step * stride_bsk, mask=col_ok, other=0.0)
        acc += tl.dot(a, b) * a_scale[:, None] * b_scale[None, :]
    mask = row_ok[:, None] & col_ok[None, :]
    if SPLIT:
        # Partials [SPLIT_K, M, N] in float32; the reduce kernel adds the bias and rounds once.
        tl.store(part_ptr + (pid_k * M + rows[:, None]) * N + cols[None, :], acc, mask=mask)
    else:
        if HAS_BIAS:
            acc += tl.load(bias_ptr + cols, mask=col_ok, other=0.0).to(tl.float32)[None, :]
        tl.store(c_ptr + rows[:, None] * stride_cm + cols[None, :] * stride_cn, acc.to(c_ptr.dtype.element_ty),
                 mask=mask)


def fp8_block_gemm(a: torch.Tensor, a_scale: torch.Tensor, b: torch.Tensor, b_scale: torch.Tensor,
                   block_n: int, block_k: int, bias: torch.Tensor | None, out_dtype: torch.dtype,
                   config: BlockGemmConfig | None = None) -> torch.Tensor:
    """``(a * a_scale) @ (b * b_scale)^T`` for fp8 ``a`` [M, K] with ``a_scale`` [M, K/block_k] and fp8 ``b``
    [N, K] with ``b_scale`` [N/block_n, K/block_k] (rounded up), in ``out_dtype``. ``config`` overrides the
    launch settings (:func:`config_for`)."""
    m, k = a.shape
    n = b.shape[0]
    out = torch.empty((m, n), dtype=out_dtype, device=a.device)
    if m == 0:
        return out
    cfg = config or config_for(m, n, k, block_n, block_k, _num_sms(a.device))
    if block_n % cfg.tile_n:
        raise ValueError(f"tile_n {cfg.tile_n} must divide the weight's scale block of {block_n} rows")
    groups = triton.cdiv(k, block_k)
    steps_per_split = triton.cdiv(groups, cfg.split_k)
    split_k = triton.cdiv(groups, steps_per_split)
    part = torch.empty((split_k, m, n), dtype=torch.float32, device=a.device) if split_k > 1 else out
    bias_arg = bias if bias is not None else out
    grid = (triton.cdiv(m, cfg.block_m), triton.cdiv(n, cfg.tile_n), split_k)
    _fp8_block_gemm_kernel[grid](
        a, a_scale, b, b_scale, out, part, bias_arg, m, n, k,
        a.stride(0), a.stride(1), a_scale.stride(0), a_scale.stride(1), b.stride(0), b.stride(1),
        b_scale.stride(0), b_scale.stride(1), out.stride(0), out.stride(1), steps_per_split,
        GROUP_N=block_n, HAS_BIAS=bias is not None, SPLIT=split_k > 1, BLOCK_M=cfg.block_m, BLOCK_N=cfg.tile_n,
        BLOCK_K=block_k, num_warps=cfg.num_warps, num_stages=cfg.num_stages,
    )
    if split_k > 1:
        split_k_reduce(part, bias, out)
    return out


def _kernel_fits(block_n: int, block_k: int) -> bool:
    # The tile along N must stay inside one scale block, and the K step be one whole group.
    tile_n = min(128, triton.next_power_of_2(block_n))
    return block_n % tile_n == 0 and block_k >= 16 and block_k & (block_k - 1) == 0


def fp8_block_linear(x: torch.Tensor, weight: torch.Tensor, weight_scale_inv: torch.Tensor, block_n: int,
                     block_k: int, bias: torch.Tensor | None = None) -> torch.Tensor:
    """Custom op ``fp8_block_linear`` on GPUs with FP8 tensor cores; elsewhere (or for block shapes the
    kernel does not tile) the reference."""
    if not (has_fp8_dot(x.device) and _kernel_fits(block_n, block_k)):
        return op_reference.fp8_block_linear(x, weight, weight_scale_inv, block_n, block_k, bias)
    x2 = x.reshape(-1, x.shape[-1])
    xq, xs = quantize_groups(x2, block_k)
    out = fp8_block_gemm(xq, xs, weight, weight_scale_inv, block_n, block_k, bias, x.dtype)
    return out.reshape(*x.shape[:-1], weight.shape[0])
