"""The ``fused_moe_fp8_block`` custom op in plain torch: mixture of SwiGLU experts with block-scaled FP8
weights and activations quantized per token and group, the definition platform kernels are checked against.

Weights are e4m3 with one float32 scale per ``block_n`` x ``block_k`` block (HF ``weight_scale_inv``):
``w13`` [E, 2I, H] holds each expert's gate rows then its up rows, and each half has its own block rows
(``w13_scale`` [E, 2 * ceil(I/block_n), ceil(H/block_k)]: the gate's, then the up projection's), as the
checkpoint's separate ``gate_proj`` and ``up_proj`` tensors have; ``w2`` [E, H, I] with ``w2_scale``
[E, ceil(H/block_n), ceil(I/block_k)]. Each GEMM's input is quantized per token and ``block_k`` columns
(the hidden states once per token, the SwiGLU output once per routed row), as the dense FP8 linears do.
"""

from __future__ import annotations

import torch

from infercore.ops import fp8_math
from infercore.ops.dispatch import get_op
from infercore.ops.moe_reference import routed_tokens


def dequantize_w13(w13: torch.Tensor, scale: torch.Tensor, block_n: int, block_k: int) -> torch.Tensor:
    """float32 gate-and-up weights [..., 2I, H] of fp8 ``w13`` and its per-half block ``scale``."""
    inter = w13.shape[-2] // 2
    half = scale.shape[-2] // 2
    gate = fp8_math.dequantize_blockwise(w13[..., :inter, :], scale[..., :half, :], block_n, block_k)
    up = fp8_math.dequantize_blockwise(w13[..., inter:, :], scale[..., half:, :], block_n, block_k)
    return torch.cat([gate, up], dim=-2)


def quantize_w13(w13: torch.Tensor, block_n: int, block_k: int) -> tuple[torch.Tensor, torch.Tensor]:
    """Gate-and-up weights [..., 2I, H] as fp8 with per-half block scales [..., 2 * ceil(I/block_n), ...]."""
    inter = w13.shape[-2] // 2
    gate_q, gate_s = fp8_math.quantize_blockwise(w13[..., :inter, :], block_n, block_k)
    up_q, up_s = fp8_math.quantize_blockwise(w13[..., inter:, :], block_n, block_k)
    return torch.cat([gate_q, up_q], dim=-2), torch.cat([gate_s, up_s], dim=-2)


def _dequantized_activation(x: torch.Tensor, group: int) -> torch.Tensor:
    """``x`` [M, K] quantized per row and ``group`` columns, as the float32 values the FP8 GEMM multiplies."""
    q, scale = fp8_math.quantize_per_group(x, group)
    return q.float() * scale.float().repeat_interleave(group, dim=1)[:, :x.shape[1]]


def fused_moe_fp8_block(hidden: torch.Tensor, w13: torch.Tensor, w13_scale: torch.Tensor, w2: torch.Tensor,
                        w2_scale: torch.Tensor, topk_weights: torch.Tensor, topk_ids: torch.Tensor, block_n: int,
                        block_k: int) -> torch.Tensor:
    """``sum_j topk_weights[t, j] * down_e(silu(gate_e(x)) * up_e(x))`` with ``e = topk_ids[t, j]``, W8A8.

    ``hidden`` [T, H] is quantized per token and ``block_k`` columns; each expert's gate-and-up product
    accumulates in float32 and is rounded to ``hidden``'s dtype, goes through the platform's
    ``silu_and_mul``, is quantized the same way and multiplied by the down projection (float32, rounded
    to ``hidden``'s dtype); the routing-weighted sum accumulates in float32. Returns [T, H] in
    ``hidden``'s dtype.
    """
    out = torch.zeros(topk_ids.shape[0], hidden.shape[1], dtype=torch.float32, device=hidden.device)
    if topk_ids.shape[0] == 0:
        return out.to(hidden.dtype)
    silu_and_mul = get_op("silu_and_mul")
    x = _dequantized_activation(hidden, block_k)
    for expert, rows, weights in routed_tokens(topk_weights, topk_ids, w13.shape[0]):
        gate_up = (x[rows] @ dequantize_w13(w13[expert], w13_scale[expert], block_n, block_k).t()).to(hidden.dtype)
        act = _dequantized_activation(silu_and_mul(gate_up), block_k)
        w2_deq = fp8_math.dequantize_blockwise(w2[expert], w2_scale[expert], block_n, block_k)
        down = (act @ w2_deq.t()).to(hidden.dtype)
        out.index_add_(0, rows, down.float() * weights[:, None])
    return out.to(hidden.dtype)
