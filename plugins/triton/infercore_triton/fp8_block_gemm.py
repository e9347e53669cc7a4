"""W8A8 GEMM with block-scaled FP8 weights: activations quantized per token and group of ``block_k``
columns, weights with one scale per ``block_n`` x ``block_k`` block, float32 accumulation.

One program computes a ``block_m`` x ``tile_n`` tile of the output over a range of K's scale groups.
At decode sizes (a few rows against a wide weight) tiles alone are too few to keep every multiprocessor
reading the weight, so narrower tiles and a split of K fill the machine: each split writes float32
partials, and the split of a tile that finishes last sums them (and adds the bias), counted in by an
atomic per tile (:mod:`infercore_triton.split_k_counters`; a second launch sums them where no counters
are at hand). Launch settings come from
:mod:`infercore_triton.fp8_block_configs` (a measured table, one a sweep wrote, or the default). No host
sync and no per-M compile: the op is safe to capture in CUDA graphs.

From :data:`~infercore_triton.fp8_block_cublas.MIN_M_ENV` rows up (unset: never) the product goes through cuBLASLt's
block scaling instead (:mod:`infercore_triton.fp8_block_cublas`), where the device passed its probe.

Activations come quantized (``fp8_block_linear_quantized``: the norm or activation before the linear
quantized them in its own pass) or are quantized here first (``fp8_block_linear``).
"""

from __future__ import annotations

import functools

import torch
import triton
import triton.language as tl

from infercore.plugin_api import op_reference
from infercore_triton import fp8_block_cublas
from infercore_triton.fp8_block_configs import (  # noqa: F401 - the settings' names, as they were here
    TUNED,
    BlockGemmConfig,
    config_for,
    default_config,
    m_bucket,
)
from infercore_triton.fp8_quant import quantize_groups
from infercore_triton.fp8_support import has_fp8_dot
from infercore_triton.skinny_gemm import split_k_reduce
from infercore_triton.split_k_counters import tile_counters


@functools.cache
def _num_sms(device: torch.device) -> int:
    if device.type == "cuda":
        return torch.cuda.get_device_properties(device).multi_processor_count
    return 132


@triton.jit(do_not_specialize=["M"])
def _fp8_block_gemm_kernel(a_ptr, a_scale_ptr, b_ptr, b_scale_ptr, c_ptr, part_ptr, bias_ptr, counter_ptr, M, N, K,
                           stride_am, stride_ak, stride_asm, stride_ask, stride_bn, stride_bk,
                           stride_bsn, stride_bsk, stride_cm, stride_cn, steps_per_split,
                           GROUP_N: tl.constexpr, PER_COLUMN: tl.constexpr, HAS_BIAS: tl.constexpr,
                           SPLIT: tl.constexpr, LAST_REDUCES: tl.constexpr, BLOCK_M: tl.constexpr,
                           BLOCK_N: tl.constexpr, BLOCK_K: tl.constexpr):
    # BLOCK_K is the scale group along K, so each step's partial product takes one activation scale
    # per row and one weight scale per block of rows. Per-column weight scales come with one activation scale
    # per row (PER_COLUMN): the products accumulate unscaled in the dot and both scales apply once at the end.
    pid_m = tl.program_id(0)
    pid_n = tl.program_id(1)
    pid_k = tl.program_id(2)
    rows = pid_m * BLOCK_M + tl.arange(0, BLOCK_M)
    cols = pid_n * BLOCK_N + tl.arange(0, BLOCK_N)
    ks = tl.arange(0, BLOCK_K)
    row_ok = rows < M
    col_ok = cols < N
    block_row = (pid_n * BLOCK_N) // GROUP_N
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
        if PER_COLUMN:
            acc = tl.dot(a, b, acc)
        else:
            a_scale = tl.load(a_scale_ptr + rows * stride_asm + step * stride_ask, mask=row_ok, other=0.0)
            # The tile lies inside one block of weight rows (BLOCK_N divides GROUP_N): one weight scale a step.
            b_scale = tl.load(b_scale_ptr + block_row * stride_bsn + step * stride_bsk)
            acc += tl.dot(a, b) * (a_scale * b_scale)[:, None]
    if PER_COLUMN:
        a_scale = tl.load(a_scale_ptr + rows * stride_asm, mask=row_ok, other=0.0)
        b_scales = tl.load(b_scale_ptr + cols * stride_bsn, mask=col_ok, other=0.0)
        acc = acc * a_scale[:, None] * b_scales[None, :]
    mask = row_ok[:, None] & col_ok[None, :]
    if SPLIT:
        # Partials [SPLIT_K, M, N] in float32; the reduce kernel (or the tile's last split) adds the bias
        # and rounds once.
        tiles = part_ptr + rows[:, None] * N + cols[None, :]
        tl.store(tiles + pid_k * M * N, acc, mask=mask)
        if LAST_REDUCES:
            # Every thread's partial is stored before one thread counts the split in (barrier, then a
            # release at GPU scope); the split counted last reads the others' after its acquire.
            tl.debug_barrier()
            counter = counter_ptr + pid_m * tl.num_programs(1) + pid_n
            arrived = tl.atomic_add(counter, 1, sem="acq_rel", scope="gpu")
            if arrived == tl.num_programs(2) - 1:
                tl.debug_barrier()
                total = tl.zeros((BLOCK_M, BLOCK_N), dtype=tl.float32)
                for split in range(0, tl.num_programs(2)):
                    total += tl.load(tiles + split * M * N, mask=mask, other=0.0, cache_modifier=".cg")
                if HAS_BIAS:
                    total += tl.load(bias_ptr + cols, mask=col_ok, other=0.0).to(tl.float32)[None, :]
                tl.store(c_ptr + rows[:, None] * stride_cm + cols[None, :] * stride_cn,
                         total.to(c_ptr.dtype.element_ty), mask=mask)
                tl.atomic_xchg(counter, 0, sem="relaxed", scope="gpu")
    else:
        if HAS_BIAS:
            acc += tl.load(bias_ptr + cols, mask=col_ok, other=0.0).to(tl.float32)[None, :]
        tl.store(c_ptr + rows[:, None] * stride_cm + cols[None, :] * stride_cn, acc.to(c_ptr.dtype.element_ty),
                 mask=mask)


def fp8_block_gemm(a: torch.Tensor, a_scale: torch.Tensor, b: torch.Tensor, b_scale: torch.Tensor,
                   block_n: int, block_k: int, bias: torch.Tensor | None, out_dtype: torch.dtype,
                   config: BlockGemmConfig | None = None, per_channel: bool = False) -> torch.Tensor:
    """``(a * a_scale) @ (b * b_scale)^T`` for fp8 ``a`` [M, K] with ``a_scale`` [M, K/block_k] and fp8 ``b``
    [N, K] with ``b_scale`` [N/block_n, K/block_k] (rounded up), in ``out_dtype``. ``config`` overrides the
    launch settings (:func:`config_for`). ``per_channel``: ``a_scale`` is one per row [M, 1] (or [1, 1]
    expanded) and ``b_scale`` one per weight row [N]; ``block_k`` is then only the K step."""
    m, k = a.shape
    n = b.shape[0]
    out = torch.empty((m, n), dtype=out_dtype, device=a.device)
    if m == 0:
        return out
    cfg = config or config_for(m, n, k, block_n, block_k, _num_sms(a.device))
    if block_n % cfg.tile_n and not per_channel:
        raise ValueError(f"tile_n {cfg.tile_n} must divide the weight's scale block of {block_n} rows")
    a_scale_strides = (a_scale.stride(0), 0) if per_channel else a_scale.stride()
    if per_channel:
        b_scale = b_scale.reshape(-1, 1)
    b_scale_strides = (b_scale.stride(0), 0) if per_channel else b_scale.stride()
    groups = triton.cdiv(k, block_k)
    steps_per_split = triton.cdiv(groups, cfg.split_k)
    split_k = triton.cdiv(groups, steps_per_split)
    part = torch.empty((split_k, m, n), dtype=torch.float32, device=a.device) if split_k > 1 else out
    bias_arg = bias if bias is not None else out
    grid = (triton.cdiv(m, cfg.block_m), triton.cdiv(n, cfg.tile_n), split_k)
    counters = tile_counters(a.device, grid[0] * grid[1]) if split_k > 1 else None
    _fp8_block_gemm_kernel[grid](
        a, a_scale, b, b_scale, out, part, bias_arg, counters if counters is not None else out, m, n, k,
        a.stride(0), a.stride(1), *a_scale_strides, b.stride(0), b.stride(1), *b_scale_strides,
        out.stride(0), out.stride(1), steps_per_split, GROUP_N=1 if per_channel else block_n,
        PER_COLUMN=per_channel, HAS_BIAS=bias is not None, SPLIT=split_k > 1, LAST_REDUCES=counters is not None,
        BLOCK_M=cfg.block_m, BLOCK_N=cfg.tile_n, BLOCK_K=block_k, num_warps=cfg.num_warps,
        num_stages=cfg.num_stages,
    )
    if split_k > 1 and counters is None:
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
    if fp8_block_cublas.serves(x2.shape[0], weight, block_n, block_k, x.dtype):
        out = fp8_block_cublas.gemm(xq, xs, weight, weight_scale_inv, bias)
    else:
        out = fp8_block_gemm(xq, xs, weight, weight_scale_inv, block_n, block_k, bias, x.dtype)
    return out.reshape(*x.shape[:-1], weight.shape[0])


def fp8_block_linear_quantized(x_q: torch.Tensor, x_scale: torch.Tensor, weight: torch.Tensor,
                               weight_scale_inv: torch.Tensor, block_n: int, block_k: int,
                               bias: torch.Tensor | None, out_dtype: torch.dtype) -> torch.Tensor:
    """Custom op ``fp8_block_linear_quantized``: the GEMM on an activation quantized per token and group of
    ``block_k`` columns by the kernel before it; elsewhere the reference."""
    if not (has_fp8_dot(x_q.device) and _kernel_fits(block_n, block_k)):
        return op_reference.fp8_block_linear_quantized(x_q, x_scale, weight, weight_scale_inv, block_n, block_k,
                                                       bias, out_dtype)
    q2, s2 = x_q.reshape(-1, x_q.shape[-1]), x_scale.reshape(-1, x_scale.shape[-1])
    if fp8_block_cublas.serves(q2.shape[0], weight, block_n, block_k, out_dtype):
        out = fp8_block_cublas.gemm(q2, s2, weight, weight_scale_inv, bias)
    else:
        out = fp8_block_gemm(q2, s2, weight, weight_scale_inv, block_n, block_k, bias, out_dtype)
    return out.reshape(*x_q.shape[:-1], weight.shape[0])
