"""Norms and activations that quantize their output for the FP8 linear after them, and that linear's GEMM
on the quantized activation: the torch references of the fused ops.

Each is the platform's unfused ops run one after the other (``get_op("rms_norm")`` then
:func:`~infercore.ops.fp8_math.quantize_per_group`, ...), so a fused kernel is checked against exactly
what the unfused path computes and a model gives the same numbers either way.
"""

from __future__ import annotations

import torch

from infercore.ops import fp8_math
from infercore.ops.dispatch import get_op


def _quantize(y: torch.Tensor, group: int) -> tuple[torch.Tensor, torch.Tensor]:
    q, scale = fp8_math.quantize_per_group(y.reshape(-1, y.shape[-1]), group)
    return q.view(y.shape), scale.view(*y.shape[:-1], scale.shape[-1])


def rms_norm_quant(x: torch.Tensor, weight: torch.Tensor, eps: float,
                   group: int) -> tuple[torch.Tensor, torch.Tensor]:
    """``rms_norm(x, weight, eps)`` quantized to fp8 with a float32 scale per token and ``group`` columns:
    ``(values [..., K], scales [..., ceil(K/group)])``."""
    return _quantize(get_op("rms_norm")(x, weight, eps), group)


def fused_add_rms_norm_quant(x: torch.Tensor, residual: torch.Tensor, weight: torch.Tensor, eps: float,
                             group: int) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """``residual = x + residual``, then :func:`rms_norm_quant` of it: ``(values, scales, residual)``."""
    normed, new_residual = get_op("fused_add_rms_norm")(x, residual, weight, eps)
    q, scale = _quantize(normed, group)
    return q, scale, new_residual


def silu_and_mul_quant(x: torch.Tensor, group: int) -> tuple[torch.Tensor, torch.Tensor]:
    """``silu(x[..., :I]) * x[..., I:]`` quantized to fp8 per token and ``group`` columns."""
    return _quantize(get_op("silu_and_mul")(x), group)


def fp8_block_linear_quantized(x_q: torch.Tensor, x_scale: torch.Tensor, weight: torch.Tensor,
                               weight_scale_inv: torch.Tensor, block_n: int, block_k: int,
                               bias: torch.Tensor | None, out_dtype: torch.dtype) -> torch.Tensor:
    """:func:`~infercore.ops.fp8_math.fp8_block_linear` on an activation already quantized per token and
    group of ``block_k`` columns (``x_q`` fp8 [..., K], ``x_scale`` float32 [..., ceil(K/block_k)]), in
    ``out_dtype``."""
    q2, s2 = x_q.reshape(-1, x_q.shape[-1]), x_scale.reshape(-1, x_scale.shape[-1])
    k = q2.shape[1]
    x_deq = q2.float() * s2.float().repeat_interleave(block_k, dim=1)[:, :k]
    out = x_deq @ fp8_math.dequantize_blockwise(weight, weight_scale_inv, block_n, block_k).t()
    if bias is not None:
        out = out + bias.float()
    return out.to(out_dtype).reshape(*x_q.shape[:-1], weight.shape[0])


def fp8_linear_quantized(x_q: torch.Tensor, x_scale: torch.Tensor, weight: torch.Tensor, weight_scale: torch.Tensor,
                         bias: torch.Tensor | None, out_dtype: torch.dtype) -> torch.Tensor:
    """:func:`~infercore.ops.fp8_math.fp8_linear` on an activation already quantized per token (``x_q`` fp8
    [..., K], ``x_scale`` float32 [..., 1]), in ``out_dtype``."""
    q2, s2 = x_q.reshape(-1, x_q.shape[-1]), x_scale.reshape(-1, 1)
    out = (q2.float() @ weight.float().t()) * s2.float() * weight_scale.float().reshape(1, -1)
    if bias is not None:
        out = out + bias.float()
    return out.to(out_dtype).reshape(*x_q.shape[:-1], weight.shape[0])
