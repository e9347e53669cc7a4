"""Dynamic FP8 quantization of activations in one launch: a float32 scale per token and group of columns."""

from __future__ import annotations

import torch
import triton
import triton.language as tl

from infercore.plugin_api import fp8_reference


@triton.jit
def _quantize_groups_kernel(x_ptr, q_ptr, scale_ptr, K, stride_xm, stride_qm, stride_sm, fp8_max, min_scale,
                            GROUP: tl.constexpr, BLOCK: tl.constexpr):
    row = tl.program_id(0).to(tl.int64)
    group = tl.program_id(1)
    cols = group * GROUP + tl.arange(0, BLOCK)
    mask = (tl.arange(0, BLOCK) < GROUP) & (cols < K)
    x = tl.load(x_ptr + row * stride_xm + cols, mask=mask, other=0.0).to(tl.float32)
    scale = tl.maximum(tl.math.div_rn(tl.max(tl.abs(x), axis=0), fp8_max), min_scale)
    # Correctly rounded division, as torch divides: a faster approximate one moves values across fp8 steps.
    q = tl.clamp(tl.math.div_rn(x, scale), -fp8_max, fp8_max)
    tl.store(q_ptr + row * stride_qm + cols, q.to(q_ptr.dtype.element_ty, fp_downcast_rounding="rtne"), mask=mask)
    tl.store(scale_ptr + row * stride_sm + group, scale)


def quantize_groups(x: torch.Tensor, group: int) -> tuple[torch.Tensor, torch.Tensor]:
    """``x`` [M, K] as fp8 with a float32 scale per row and ``group`` columns [M, ceil(K/group)]; the
    same numbers as ``fp8_reference.quantize_per_group`` (``group >= K``: one scale per row)."""
    if x.stride(-1) != 1:
        x = x.contiguous()
    m, k = x.shape
    groups = triton.cdiv(k, group)
    q = torch.empty((m, k), dtype=fp8_reference.FP8_DTYPE, device=x.device)
    scale = torch.empty((m, groups), dtype=torch.float32, device=x.device)
    # A wide group (per token: the whole row) takes one program with up to 16 warps, as the norm kernel does,
    # rather than 4 warps holding thousands of values each.
    block = triton.next_power_of_2(group)
    if m > 0:
        _quantize_groups_kernel[(m, groups)](
            x, q, scale, k, x.stride(0), q.stride(0), scale.stride(0), fp8_reference.FP8_MAX,
            fp8_reference.MIN_SCALE, GROUP=group, BLOCK=block, num_warps=min(16, max(4, block // 256)),
        )
    return q, scale
