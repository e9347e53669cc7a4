"""The fused-MoE custom op with block-scaled FP8 experts (``fused_moe_fp8_block``): W8A8 grouped GEMMs.

The layout is :mod:`infercore_triton.fused_moe`'s: slots sorted by expert in whole row blocks
(:mod:`infercore_triton.fused_moe_align`), each program a ``BLOCK_M`` x ``BLOCK_N`` tile of one expert's
rows. Here the rows' activations are fp8, quantized per token and group of ``block_k`` columns (the hidden
states once per token before the first GEMM; the SiLU-and-mul output per row, in the same pass as the
activation), the expert's weight tiles are read as fp8 straight from the stacked [E, N, K] parameter,
and each K step is one scale group: the fp8 dot's float32 partial is scaled by the rows' activation
scales and the columns' weight-block scales before it is added. A column's block row is looked up per
column, so the gate and up halves of ``w13`` keep their own block rows (and a tile may straddle blocks).
No host sync and no per-batch compile: the op is safe to capture in CUDA graphs.
"""

from __future__ import annotations

import torch
import triton
import triton.language as tl

from infercore.plugin_api import op_reference
from infercore_triton.activation import silu_and_mul
from infercore_triton.fp8_fused_quant import SILU_BLOCK, fused_group, silu_quant
from infercore_triton.fp8_quant import quantize_groups
from infercore_triton.fp8_support import has_fp8_dot
from infercore_triton.fused_moe import expert_tile
from infercore_triton.fused_moe_align import ExpertAlignment, align_slots_to_experts
from infercore_triton.fused_moe_fp8_configs import GemmLaunch, MoeFp8Config, config_for


# The slot counts change with every batch; specializing on them would build kernels while serving.
@triton.jit(do_not_specialize=["num_slots", "capacity"])
def _fp8_grouped_gemm_kernel(a_ptr, a_scale_ptr, b_ptr, b_scale_ptr, c_ptr, weights_ptr, sorted_slots_ptr,
                             block_experts_ptr, num_padded_ptr, N, K, num_slots, capacity, half_n, half_blocks,
                             stride_am, stride_asm, stride_be, stride_bn, stride_bse, stride_bsn, stride_bsk,
                             stride_cm, ROWS_PER_A: tl.constexpr, MUL_WEIGHT: tl.constexpr, GROUP_N: tl.constexpr,
                             BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr, BLOCK_K: tl.constexpr,
                             GROUP_M: tl.constexpr):
    live, slots, valid, expert, offs_n, mask_n = expert_tile(
        tl.program_id(0), capacity, N, num_slots, num_padded_ptr, sorted_slots_ptr, block_experts_ptr,
        BLOCK_M, BLOCK_N, GROUP_M)
    if not live:
        return
    a_rows = slots // ROWS_PER_A
    # Each column's block row: columns past half_n (w13's up half) start their own block rows.
    in_second = offs_n >= half_n
    scale_rows = tl.where(in_second, half_blocks + (offs_n - half_n) // GROUP_N, offs_n // GROUP_N)
    offs_k = tl.arange(0, BLOCK_K)
    a_ptrs = a_ptr + a_rows[:, None] * stride_am + offs_k[None, :]
    b_ptrs = b_ptr + expert * stride_be + offs_n[None, :].to(tl.int64) * stride_bn + offs_k[:, None]
    a_scale_ptrs = a_scale_ptr + a_rows * stride_asm
    b_scale_ptrs = b_scale_ptr + expert * stride_bse + scale_rows * stride_bsn
    acc = tl.zeros((BLOCK_M, BLOCK_N), dtype=tl.float32)
    for k in range(0, tl.cdiv(K, BLOCK_K)):
        k_left = K - k * BLOCK_K
        a = tl.load(a_ptrs, mask=valid[:, None] & (offs_k[None, :] < k_left), other=0.0)
        b = tl.load(b_ptrs, mask=(offs_k[:, None] < k_left) & mask_n[None, :], other=0.0)
        a_scale = tl.load(a_scale_ptrs + k, mask=valid, other=0.0)
        b_scale = tl.load(b_scale_ptrs + k * stride_bsk, mask=mask_n, other=0.0)
        acc += tl.dot(a, b) * a_scale[:, None] * b_scale[None, :]
        a_ptrs += BLOCK_K
        b_ptrs += BLOCK_K
    if MUL_WEIGHT:
        acc = acc * tl.load(weights_ptr + slots, mask=valid, other=0.0)[:, None]
    c_ptrs = c_ptr + slots[:, None] * stride_cm + offs_n[None, :]
    tl.store(c_ptrs, acc.to(c_ptr.dtype.element_ty), mask=valid[:, None] & mask_n[None, :])


def fp8_grouped_gemm(a: torch.Tensor, a_scale: torch.Tensor, b: torch.Tensor, b_scale: torch.Tensor,
                     align: ExpertAlignment, rows_per_a: int, block_n: int, block_k: int, out_dtype: torch.dtype,
                     split_half: bool, launch: GemmLaunch, weights: torch.Tensor | None = None) -> torch.Tensor:
    """Slot rows ``(a * a_scale)[slot // rows_per_a] @ (b * b_scale)[expert(slot)]^T`` (times the slot's
    routing weight when ``weights`` is given): [num_slots, N] in ``out_dtype``. ``a`` fp8 [M, K] with
    ``a_scale`` [M, ceil(K/block_k)]; ``b`` fp8 [E, N, K] with ``b_scale`` [E, rows of blocks, ceil(K/block_k)],
    whose two halves of N have block rows of their own when ``split_half`` (``w13``); ``launch`` its tiles."""
    n, k = b.shape[1], b.shape[2]
    if b.stride(2) != 1 or a.stride(1) != 1 or a_scale.stride(1) != 1:
        raise ValueError("the FP8 grouped GEMM reads rows of contiguous columns (weights, activations and scales)")
    out = torch.empty((align.num_slots, n), dtype=out_dtype, device=a.device)
    capacity = align.sorted_slots.shape[0]
    tile_n = launch.tile_n
    half_n, half_blocks = (n // 2, b_scale.shape[1] // 2) if split_half else (n, 0)
    grid = (triton.cdiv(capacity, align.block_m) * triton.cdiv(n, tile_n),)
    _fp8_grouped_gemm_kernel[grid](
        a, a_scale, b, b_scale, out, weights if weights is not None else out, align.sorted_slots,
        align.block_experts, align.num_padded, n, k, align.num_slots, capacity, half_n, half_blocks,
        a.stride(0), a_scale.stride(0), b.stride(0), b.stride(1), b_scale.stride(0), b_scale.stride(1),
        b_scale.stride(2), out.stride(0), ROWS_PER_A=rows_per_a, MUL_WEIGHT=weights is not None,
        GROUP_N=block_n, BLOCK_M=align.block_m, BLOCK_N=tile_n, BLOCK_K=block_k, GROUP_M=8,
        num_warps=launch.num_warps, num_stages=launch.num_stages,
    )
    return out


def _silu_and_mul_quantized(gate_up: torch.Tensor, group: int) -> tuple[torch.Tensor, torch.Tensor]:
    """SiLU-and-mul of the rows, quantized per row and ``group`` columns (one launch where the kernel tiles it)."""
    if fused_group(group, gate_up.shape[-1] // 2, SILU_BLOCK) is None:
        return quantize_groups(silu_and_mul(gate_up), group)
    return silu_quant(gate_up, group)


def kernel_fits(block_k: int) -> bool:
    """Whether the kernels tile ``block_k`` (each K step is one whole scale group of a power of two)."""
    return block_k >= 16 and block_k & (block_k - 1) == 0


def fp8_fused_experts(hidden: torch.Tensor, w13: torch.Tensor, w13_scale: torch.Tensor, w2: torch.Tensor,
                      w2_scale: torch.Tensor, topk_weights: torch.Tensor, topk_ids: torch.Tensor, block_n: int,
                      block_k: int, config: MoeFp8Config | None = None) -> torch.Tensor:
    """The kernels' computation of ``fused_moe_fp8_block`` on any device Triton runs on (its interpreter
    included); the op checks the GPU first. ``config`` overrides the launch settings (:func:`config_for`)."""
    tokens, top_k = topk_ids.shape
    num_experts, inter2, hidden_size = w13.shape
    if tokens == 0:
        return torch.zeros_like(hidden)
    cfg = config or config_for(tokens, top_k, num_experts, inter2, hidden_size)
    x_q, x_scale = quantize_groups(hidden, block_k)
    align = align_slots_to_experts(topk_ids, num_experts, cfg.block_m)
    gate_up = fp8_grouped_gemm(x_q, x_scale, w13, w13_scale, align, top_k, block_n, block_k, hidden.dtype,
                               split_half=True, launch=cfg.up)
    act_q, act_scale = _silu_and_mul_quantized(gate_up, block_k)
    down = fp8_grouped_gemm(act_q, act_scale, w2, w2_scale, align, 1, block_n, block_k, hidden.dtype,
                            split_half=False, launch=cfg.down, weights=topk_weights.reshape(-1).float().contiguous())
    return down.view(tokens, top_k, -1).sum(dim=1, dtype=torch.float32).to(hidden.dtype)


def fused_moe_fp8_block(hidden: torch.Tensor, w13: torch.Tensor, w13_scale: torch.Tensor, w2: torch.Tensor,
                        w2_scale: torch.Tensor, topk_weights: torch.Tensor, topk_ids: torch.Tensor, block_n: int,
                        block_k: int) -> torch.Tensor:
    """Custom op ``fused_moe_fp8_block`` on GPUs with FP8 tensor cores; elsewhere (or for scale groups the
    kernels do not tile) the reference."""
    if not (has_fp8_dot(hidden.device) and kernel_fits(block_k)):
        return op_reference.fused_moe_fp8_block(hidden, w13, w13_scale, w2, w2_scale, topk_weights, topk_ids,
                                                block_n, block_k)
    return fp8_fused_experts(hidden.contiguous(), w13, w13_scale, w2, w2_scale, topk_weights, topk_ids, block_n,
                             block_k)
