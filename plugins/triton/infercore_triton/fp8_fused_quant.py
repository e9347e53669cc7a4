"""RMSNorm (with or without the residual add) and SiLU-and-mul that quantize their output to fp8 in the
same pass, one float32 scale per token and group of columns: the input of the FP8 block-scaled linear
after them, with no quantization launch of its own.

Each value is rounded to the activation dtype first, as the unfused op stores it, then quantized as
:func:`infercore.ops.fp8_math.quantize_per_group` does (a correctly rounded division: each element is
quantized once, by one program, so it costs nothing next to the loads), giving the unfused path's numbers.
"""

from __future__ import annotations

import torch
import triton
import triton.language as tl

from infercore.plugin_api import fp8_reference, op_reference
from infercore_triton.activation import silu_and_mul
from infercore_triton.fp8_quant import quantize_groups
from infercore_triton.fp8_support import has_fp8_dot
from infercore_triton.rms_norm import add_and_norm_row, fused_add_rms_norm, rms_norm

#: Widest chunk of a row one SiLU program quantizes (whole groups), where the groups are narrower than the row.
#: Per token (one group a row) one program takes the whole row, as the norm kernel does, up to
#: :data:`NORM_MAX_BLOCK` columns.
SILU_BLOCK = 1024
#: Widest row the norm kernel holds in one program.
NORM_MAX_BLOCK = 65536


@triton.jit
def _quantize_store(y, cols, width, q_ptr, scale_ptr, first_group, n_groups, fp8_max, min_scale,
                    GROUP: tl.constexpr, BLOCK: tl.constexpr):
    # y [BLOCK] float32, zero past the row's ``width`` columns, holds BLOCK // GROUP whole groups of ``cols``.
    groups = tl.reshape(y, (BLOCK // GROUP, GROUP))
    scale = tl.maximum(tl.math.div_rn(tl.max(tl.abs(groups), axis=1), fp8_max), min_scale)
    q = tl.clamp(tl.math.div_rn(groups, scale[:, None]), -fp8_max, fp8_max)
    q = tl.reshape(q, (BLOCK,)).to(q_ptr.dtype.element_ty, fp_downcast_rounding="rtne")
    tl.store(q_ptr + cols, q, mask=cols < width)
    g = first_group + tl.arange(0, BLOCK // GROUP)
    tl.store(scale_ptr + g, scale, mask=g < n_groups)


@triton.jit
def _rms_norm_quant_kernel(x_ptr, residual_ptr, weight_ptr, q_ptr, scale_ptr, residual_out_ptr,
                           stride_x, stride_r, stride_q, stride_s, stride_ro, hidden, n_groups, eps, fp8_max,
                           min_scale, HAS_RESIDUAL: tl.constexpr, GROUP: tl.constexpr, BLOCK: tl.constexpr):
    row = tl.program_id(0).to(tl.int64)
    cols = tl.arange(0, BLOCK)
    y = add_and_norm_row(x_ptr, residual_ptr, weight_ptr, residual_out_ptr, row, cols, stride_x, stride_r,
                         stride_ro, hidden, eps, HAS_RESIDUAL)
    y = y.to(x_ptr.dtype.element_ty).to(tl.float32)
    _quantize_store(y, cols, hidden, q_ptr + row * stride_q, scale_ptr + row * stride_s, 0, n_groups,
                    fp8_max, min_scale, GROUP, BLOCK)


@triton.jit
def _silu_and_mul_quant_kernel(x_ptr, q_ptr, scale_ptr, stride_x, stride_q, stride_s, inter, n_groups, fp8_max,
                               min_scale, GROUP: tl.constexpr, BLOCK: tl.constexpr):
    row = tl.program_id(0).to(tl.int64)
    chunk = tl.program_id(1)
    cols = chunk * BLOCK + tl.arange(0, BLOCK)
    mask = cols < inter
    gate = tl.load(x_ptr + row * stride_x + cols, mask=mask, other=0.0).to(tl.float32)
    up = tl.load(x_ptr + row * stride_x + inter + cols, mask=mask, other=0.0)
    # Round the activation and the product to the input dtype, as the unfused ops do.
    act = (gate / (1.0 + tl.exp(-gate))).to(up.dtype).to(tl.float32)
    y = (act * up.to(tl.float32)).to(up.dtype).to(tl.float32)
    _quantize_store(y, cols, inter, q_ptr + row * stride_q, scale_ptr + row * stride_s, chunk * (BLOCK // GROUP),
                    n_groups, fp8_max, min_scale, GROUP, BLOCK)


def fused_group(group: int, width: int, max_block: int) -> int | None:
    """The kernels' group (a power of two; a row of one group when ``group`` covers it), or None when
    they cannot tile ``group``: then the ops run their references."""
    if group >= width:
        block = triton.next_power_of_2(width)
        return block if block <= max_block else None
    return group if group & (group - 1) == 0 and group <= max_block else None


def _rows(x: torch.Tensor) -> torch.Tensor:
    rows = x.reshape(-1, x.shape[-1])
    return rows if rows.stride(-1) == 1 else rows.contiguous()


def _outputs(rows: torch.Tensor, width: int, group: int) -> tuple[torch.Tensor, torch.Tensor]:
    q = torch.empty((rows.shape[0], width), dtype=fp8_reference.FP8_DTYPE, device=rows.device)
    return q, torch.empty((rows.shape[0], triton.cdiv(width, group)), dtype=torch.float32, device=rows.device)


def norm_quant(x: torch.Tensor, residual: torch.Tensor | None, weight: torch.Tensor, eps: float,
               group: int) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor | None]:
    """The norm kernel's launch: ``(values, scales, new residual or None)``; raises for a ``group`` it
    cannot tile (see :func:`fused_group`)."""
    hidden = x.shape[-1]
    kernel_group = _checked(fused_group(group, hidden, NORM_MAX_BLOCK), group)
    x2 = _rows(x)
    q, scale = _outputs(x2, hidden, group)
    r2 = _rows(residual) if residual is not None else x2
    r_out = torch.empty_like(x2) if residual is not None else x2
    block = max(triton.next_power_of_2(hidden), kernel_group)
    if x2.shape[0] > 0:
        _rms_norm_quant_kernel[(x2.shape[0],)](
            x2, r2, weight, q, scale, r_out, x2.stride(0), r2.stride(0), q.stride(0), scale.stride(0),
            r_out.stride(0), hidden, scale.shape[1], eps, fp8_reference.FP8_MAX, fp8_reference.MIN_SCALE,
            HAS_RESIDUAL=residual is not None, GROUP=kernel_group, BLOCK=block,
            num_warps=min(16, max(1, block // 256)),
        )
    lead = x.shape[:-1]
    return (q.view(*lead, hidden), scale.view(*lead, scale.shape[1]),
            r_out.view(x.shape) if residual is not None else None)


def _silu_max_block(group: int, inter: int) -> int:
    """The widest row chunk a SiLU program may take for ``group``: the whole row per token, else :data:`SILU_BLOCK`."""
    return NORM_MAX_BLOCK if group >= inter else SILU_BLOCK


def silu_quant(x: torch.Tensor, group: int) -> tuple[torch.Tensor, torch.Tensor]:
    """The SiLU kernel's launch: ``(values, scales)``; raises for a ``group`` it cannot tile."""
    inter = x.shape[-1] // 2
    kernel_group = _checked(fused_group(group, inter, _silu_max_block(group, inter)), group)
    x2 = _rows(x)
    q, scale = _outputs(x2, inter, group)
    block = max(kernel_group, min(SILU_BLOCK, triton.next_power_of_2(inter)))
    if x2.shape[0] > 0:
        _silu_and_mul_quant_kernel[(x2.shape[0], triton.cdiv(inter, block))](
            x2, q, scale, x2.stride(0), q.stride(0), scale.stride(0), inter, scale.shape[1],
            fp8_reference.FP8_MAX, fp8_reference.MIN_SCALE, GROUP=kernel_group, BLOCK=block,
            num_warps=min(16, max(4, block // 1024)),
        )
    lead = x.shape[:-1]
    return q.view(*lead, inter), scale.view(*lead, scale.shape[1])


def _checked(kernel_group: int | None, group: int) -> int:
    if kernel_group is None:
        raise ValueError(f"the fused quantization kernels tile groups of a power of two columns; got {group}")
    return kernel_group


def _unfused(y: torch.Tensor, group: int) -> tuple[torch.Tensor, torch.Tensor]:
    """Triton's quantizer on an op's output: groups the fused kernels cannot tile (per token over a row
    wider than one program holds), as fast as the linear quantizing its own input."""
    q, scale = quantize_groups(y.reshape(-1, y.shape[-1]), group)
    return q.view(y.shape), scale.view(*y.shape[:-1], scale.shape[-1])


def rms_norm_quant(x: torch.Tensor, weight: torch.Tensor, eps: float,
                   group: int) -> tuple[torch.Tensor, torch.Tensor]:
    """Custom op ``rms_norm_quant``: RMSNorm of ``x`` as fp8 values and float32 scales per token and
    ``group`` columns, in one launch (the reference on GPUs without FP8 tensor cores)."""
    if not has_fp8_dot(x.device):
        return op_reference.rms_norm_quant(x, weight, eps, group)
    if fused_group(group, x.shape[-1], NORM_MAX_BLOCK) is None:
        return _unfused(rms_norm(x, weight, eps), group)
    q, scale, _ = norm_quant(x, None, weight, eps, group)
    return q, scale


def fused_add_rms_norm_quant(x: torch.Tensor, residual: torch.Tensor, weight: torch.Tensor, eps: float,
                             group: int) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """Custom op ``fused_add_rms_norm_quant``: ``residual = x + residual``, then :func:`rms_norm_quant` of
    it, in one launch; returns ``(values, scales, residual)``."""
    if not has_fp8_dot(x.device):
        return op_reference.fused_add_rms_norm_quant(x, residual, weight, eps, group)
    if fused_group(group, x.shape[-1], NORM_MAX_BLOCK) is None:
        normed, new_residual = fused_add_rms_norm(x, residual, weight, eps)
        return (*_unfused(normed, group), new_residual)
    q, scale, new_residual = norm_quant(x, residual, weight, eps, group)
    assert new_residual is not None
    return q, scale, new_residual


def silu_and_mul_quant(x: torch.Tensor, group: int) -> tuple[torch.Tensor, torch.Tensor]:
    """Custom op ``silu_and_mul_quant``: ``silu(gate) * up`` as fp8 values and float32 scales per token and
    ``group`` columns, in one launch (per token, one program a row; groups the kernel cannot tile, wider than
    :data:`SILU_BLOCK` columns but narrower than the row, or rows wider than :data:`NORM_MAX_BLOCK`: SiLU,
    then the quantizer)."""
    if not has_fp8_dot(x.device):
        return op_reference.silu_and_mul_quant(x, group)
    inter = x.shape[-1] // 2
    if fused_group(group, inter, _silu_max_block(group, inter)) is None:
        return _unfused(silu_and_mul(x), group)
    return silu_quant(x, group)
