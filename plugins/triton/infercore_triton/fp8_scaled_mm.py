"""W8A8 GEMM with per-channel FP8 weight scales: through ``torch._scaled_mm`` (cuBLASLt / CUTLASS row-wise
scaled FP8), or up to :func:`~infercore_triton.fp8_block_configs.channel_triton_max_m` rows through the
block GEMM's Triton kernel with one scale per weight row (where the sweep measured it faster)."""

from __future__ import annotations

import torch

from infercore.plugin_api import fp8_reference, op_reference
from infercore_triton.fp8_block_configs import channel_triton_max_m
from infercore_triton.fp8_block_gemm import fp8_block_gemm
from infercore_triton.fp8_quant import quantize_groups
from infercore_triton.fp8_support import has_fp8_dot, has_rowwise_scaled_mm

#: K step of the Triton kernel on per-channel weights.
TRITON_K_STEP = 128


def _fits(x: torch.Tensor, weight: torch.Tensor, out_dtype: torch.dtype | None = None) -> bool:
    # cuBLASLt's FP8 GEMM wants K and N in multiples of 16 and, with row-wise scales, bf16 output.
    n, k = weight.shape
    return ((out_dtype or x.dtype) == torch.bfloat16 and k % 16 == 0 and n % 16 == 0 and x.numel() > 0
            and has_rowwise_scaled_mm(x.device))


def _gemm(xq: torch.Tensor, xs: torch.Tensor, weight: torch.Tensor, weight_scale: torch.Tensor,
          bias: torch.Tensor | None, out_dtype: torch.dtype) -> torch.Tensor:
    """``xq`` [M, K] fp8 with ``xs`` [M, 1] float32 by the weight, in ``out_dtype`` (bias added)."""
    if xq.shape[0] <= channel_triton_max_m() and has_fp8_dot(xq.device):
        return fp8_block_gemm(xq, xs, weight, weight_scale, TRITON_K_STEP, TRITON_K_STEP, bias, out_dtype,
                              per_channel=True)
    out = torch._scaled_mm(xq, weight.t(), scale_a=xs.contiguous(), scale_b=weight_scale.float().reshape(1, -1),
                           out_dtype=out_dtype)
    return out if bias is None else out + bias


def fp8_linear(x: torch.Tensor, weight: torch.Tensor, weight_scale: torch.Tensor,
               bias: torch.Tensor | None = None, input_scale: torch.Tensor | None = None) -> torch.Tensor:
    """Custom op ``fp8_linear`` on GPUs with row-wise scaled FP8 GEMMs; elsewhere the reference."""
    if not _fits(x, weight):
        return op_reference.fp8_linear(x, weight, weight_scale, bias, input_scale)
    x2 = x.reshape(-1, x.shape[-1])
    if input_scale is None:
        xq, xs = quantize_groups(x2, x2.shape[1])
    else:
        xs = input_scale.float().reshape(1, 1).expand(x2.shape[0], 1).contiguous()
        xq = (x2.float() / xs).clamp(-fp8_reference.FP8_MAX, fp8_reference.FP8_MAX).to(fp8_reference.FP8_DTYPE)
    return _gemm(xq, xs, weight, weight_scale, bias, x.dtype).reshape(*x.shape[:-1], weight.shape[0])


def fp8_linear_quantized(x_q: torch.Tensor, x_scale: torch.Tensor, weight: torch.Tensor, weight_scale: torch.Tensor,
                         bias: torch.Tensor | None, out_dtype: torch.dtype) -> torch.Tensor:
    """Custom op ``fp8_linear_quantized``: the GEMM on an activation quantized per token by the kernel
    before it; elsewhere the reference."""
    if not _fits(x_q, weight, out_dtype):
        return op_reference.fp8_linear_quantized(x_q, x_scale, weight, weight_scale, bias, out_dtype)
    q2, s2 = x_q.reshape(-1, x_q.shape[-1]), x_scale.reshape(-1, 1)
    return _gemm(q2, s2, weight, weight_scale, bias, out_dtype).reshape(*x_q.shape[:-1], weight.shape[0])
