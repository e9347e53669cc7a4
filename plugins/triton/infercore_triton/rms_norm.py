"""RMSNorm, alone and with the residual add fused in."""

from __future__ import annotations

import torch
import triton
import triton.language as tl


@triton.jit
def add_and_norm_row(x_ptr, residual_ptr, weight_ptr, residual_out_ptr, row, cols, stride_x, stride_r, stride_ro,
                     hidden, eps, HAS_RESIDUAL: tl.constexpr):
    """Row ``row`` of ``rms_norm(x [+ residual]) * weight`` in float32, rounded to the activation dtype at the
    steps the unfused ops round; with ``HAS_RESIDUAL`` the sum is stored to ``residual_out_ptr`` first."""
    mask = cols < hidden
    x = tl.load(x_ptr + row * stride_x + cols, mask=mask, other=0.0)
    if HAS_RESIDUAL:
        r = tl.load(residual_ptr + row * stride_r + cols, mask=mask, other=0.0)
        # The sum is rounded to the activation dtype first, as the unfused ops do.
        x = (x.to(tl.float32) + r.to(tl.float32)).to(x.dtype)
        tl.store(residual_out_ptr + row * stride_ro + cols, x, mask=mask)
    xf = x.to(tl.float32)
    rstd = tl.rsqrt(tl.sum(xf * xf, axis=0) / hidden + eps)
    normed = (xf * rstd).to(x.dtype).to(tl.float32)
    w = tl.load(weight_ptr + cols, mask=mask, other=0.0).to(tl.float32)
    return normed * w


@triton.jit
def _rms_norm_kernel(
    x_ptr, residual_ptr, weight_ptr, out_ptr, residual_out_ptr,
    stride_x, stride_r, stride_o, stride_ro,
    hidden, eps,
    HAS_RESIDUAL: tl.constexpr, BLOCK: tl.constexpr,
):
    row = tl.program_id(0).to(tl.int64)
    cols = tl.arange(0, BLOCK)
    y = add_and_norm_row(x_ptr, residual_ptr, weight_ptr, residual_out_ptr, row, cols, stride_x, stride_r,
                         stride_ro, hidden, eps, HAS_RESIDUAL)
    tl.store(out_ptr + row * stride_o + cols, y.to(out_ptr.dtype.element_ty), mask=cols < hidden)


def _rows(x: torch.Tensor) -> torch.Tensor:
    rows = x.reshape(-1, x.shape[-1])
    return rows if rows.stride(-1) == 1 else rows.contiguous()


def _launch(x: torch.Tensor, residual: torch.Tensor | None, weight: torch.Tensor,
            eps: float) -> tuple[torch.Tensor, torch.Tensor | None]:
    hidden = x.shape[-1]
    x2 = _rows(x)
    out = torch.empty_like(x2)
    r2 = _rows(residual) if residual is not None else x2
    r_out = torch.empty_like(x2) if residual is not None else out
    if x2.shape[0] > 0:
        _rms_norm_kernel[(x2.shape[0],)](
            x2, r2, weight, out, r_out,
            x2.stride(0), r2.stride(0), out.stride(0), r_out.stride(0),
            hidden, eps,
            HAS_RESIDUAL=residual is not None, BLOCK=triton.next_power_of_2(hidden),
            num_warps=min(16, max(1, triton.next_power_of_2(hidden) // 256)),
        )
    return out.view(x.shape), (r_out.view(x.shape) if residual is not None else None)


def rms_norm(x: torch.Tensor, weight: torch.Tensor, eps: float) -> torch.Tensor:
    """``weight * x / sqrt(mean(x**2) + eps)`` over the last dimension, accumulated in float32."""
    out, _ = _launch(x, None, weight, eps)
    return out


def fused_add_rms_norm(x: torch.Tensor, residual: torch.Tensor, weight: torch.Tensor,
                       eps: float) -> tuple[torch.Tensor, torch.Tensor]:
    """``residual = x + residual``; returns ``(rms_norm(residual), residual)`` in one pass."""
    out, new_residual = _launch(x, residual, weight, eps)
    assert new_residual is not None
    return out, new_residual
