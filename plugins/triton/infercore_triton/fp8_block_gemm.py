"""W8A8 GEMM with block-scaled FP8 weights: activations quantized per token and group of ``block_k``
columns, weights with one scale per ``block_n`` x ``block_k`` block, float32 accumulation."""

from __future__ import annotations

import torch
import triton
import triton.language as tl

from infercore.plugin_api import op_reference
from infercore_triton.fp8_quant import quantize_groups
from infercore_triton.fp8_support import has_fp8_dot


@triton.jit
def _fp8_block_gemm_kernel(a_ptr, a_scale_ptr, b_ptr, b_scale_ptr, c_ptr, bias_ptr, M, N, K,
                           stride_am, stride_ak, stride_asm, stride_ask, stride_bn, stride_bk,
                           stride_bsn, stride_bsk, stride_cm, stride_cn,
                           GROUP_N: tl.constexpr, HAS_BIAS: tl.constexpr, BLOCK_M: tl.constexpr,
                           BLOCK_N: tl.constexpr, BLOCK_K: tl.constexpr):
    # One program computes a BLOCK_M x BLOCK_N tile of C; BLOCK_K is the scale group along K, so
    # each step's partial product takes one activation scale per row and one weight scale per column.
    pid_m = tl.program_id(0)
    pid_n = tl.program_id(1)
    rows = pid_m * BLOCK_M + tl.arange(0, BLOCK_M)
    cols = pid_n * BLOCK_N + tl.arange(0, BLOCK_N)
    ks = tl.arange(0, BLOCK_K)
    row_ok = rows < M
    col_ok = cols < N
    acc = tl.zeros((BLOCK_M, BLOCK_N), dtype=tl.float32)
    for step in range(0, tl.cdiv(K, BLOCK_K)):
        k = step * BLOCK_K + ks
        k_ok = k < K
        a = tl.load(a_ptr + rows[:, None] * stride_am + k[None, :] * stride_ak,
                    mask=row_ok[:, None] & k_ok[None, :], other=0.0)
        b = tl.load(b_ptr + cols[None, :] * stride_bn + k[:, None] * stride_bk,
                    mask=col_ok[None, :] & k_ok[:, None], other=0.0)
        a_scale = tl.load(a_scale_ptr + rows * stride_asm + step * stride_ask, mask=row_ok, other=0.0)
        b_scale = tl.load(b_scale_ptr + (cols // GROUP_N) * stride_bsn + step * stride_bsk, mask=col_ok, other=0.0)
        acc += tl.dot(a, b) * a_scale[:, None] * b_scale[None, :]
    if HAS_BIAS:
        acc += tl.load(bias_ptr + cols, mask=col_ok, other=0.0).to(tl.float32)[None, :]
    tl.store(c_ptr + rows[:, None] * stride_cm + cols[None, :] * stride_cn, acc.to(c_ptr.dtype.element_ty),
             mask=row_ok[:, None] & col_ok[None, :])


def _block_m(m: int) -> int:
    return 16 if m <= 16 else 32 if m <= 32 else 64


def fp8_block_gemm(a: torch.Tensor, a_scale: torch.Tensor, b: torch.Tensor, b_scale: torch.Tensor,
                   block_n: int, block_k: int, bias: torch.Tensor | None, out_dtype: torch.dtype) -> torch.Tensor:
    """``(a * a_scale) @ (b * b_scale)^T`` for fp8 ``a`` [M, K] with ``a_scale`` [M, K/block_k] and fp8 ``b``
    [N, K] with ``b_scale`` [N/block_n, K/block_k] (rounded up), in ``out_dtype``."""
    m, k = a.shape
    n = b.shape[0]
    out = torch.empty((m, n), dtype=out_dtype, device=a.device)
    if m == 0:
        return out
    block_m, tile_n = _block_m(m), min(128, triton.next_power_of_2(block_n))
    grid = (triton.cdiv(m, block_m), triton.cdiv(n, tile_n))
    _fp8_block_gemm_kernel[grid](
        a, a_scale, b, b_scale, out, bias if bias is not None else out, m, n, k,
        a.stride(0), a.stride(1), a_scale.stride(0), a_scale.stride(1), b.stride(0), b.stride(1),
        b_scale.stride(0), b_scale.stride(1), out.stride(0), out.stride(1),
        GROUP_N=block_n, HAS_BIAS=bias is not None, BLOCK_M=block_m, BLOCK_N=tile_n, BLOCK_K=block_k,
        num_warps=4, num_stages=3,
    )
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
