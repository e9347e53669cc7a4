"""The CPU platform's custom ops on the C kernels (:mod:`infercore_cpu.native`), with core's torch references
as the fallback.

Each op takes the C kernel when the library is built and its inputs are what the kernel handles
(float32, last dimension contiguous, rows at a uniform stride); anything else runs the reference, so
results never depend on whether a compiler was found beyond float32 rounding.
"""

from __future__ import annotations

import torch

from infercore.plugin_api import op_reference as reference
from infercore_cpu import native


def _rows(x: torch.Tensor) -> tuple[int, int, int] | None:
    """(rows, width, row stride) of ``x`` seen as a matrix over its last dimension, or None if it is not one."""
    if x.dim() == 0 or x.stride(-1) != 1:
        return None
    width = x.shape[-1]
    if x.dim() == 1:
        return 1, width, width
    if x.dim() == 2:
        return x.shape[0], width, x.stride(0)
    if x.is_contiguous():
        return x.numel() // max(width, 1), width, width
    return None


def _f32(*tensors: torch.Tensor) -> bool:
    return all(t.dtype == torch.float32 and t.device.type == "cpu" for t in tensors)


def rms_norm(x: torch.Tensor, weight: torch.Tensor, eps: float) -> torch.Tensor:
    """:func:`infercore.ops.reference.rms_norm` on the C kernel for float32."""
    lib = native.library()
    shape = _rows(x)
    if lib is None or shape is None or not _f32(x, weight) or not weight.is_contiguous() or x.numel() == 0:
        return reference.rms_norm(x, weight, eps)
    rows, width, stride = shape
    out = torch.empty(x.shape, dtype=x.dtype)
    lib.infercore_rms_norm_f32(x.data_ptr(), stride, None, 0, None, out.data_ptr(), weight.data_ptr(), rows, width,
                               eps)
    return out


def fused_add_rms_norm(x: torch.Tensor, residual: torch.Tensor, weight: torch.Tensor,
                       eps: float) -> tuple[torch.Tensor, torch.Tensor]:
    """:func:`infercore.ops.reference.fused_add_rms_norm` (one pass over the rows) on the C kernel for float32."""
    lib = native.library()
    shape, res_shape = _rows(x), _rows(residual)
    if (lib is None or shape is None or res_shape is None or x.shape != residual.shape
            or not _f32(x, residual, weight) or not weight.is_contiguous() or x.numel() == 0):
        return reference.fused_add_rms_norm(x, residual, weight, eps)
    rows, width, stride = shape
    out = torch.empty(x.shape, dtype=x.dtype)
    new_residual = torch.empty(x.shape, dtype=x.dtype)
    lib.infercore_rms_norm_f32(x.data_ptr(), stride, residual.data_ptr(), res_shape[2], new_residual.data_ptr(),
                               out.data_ptr(), weight.data_ptr(), rows, width, eps)
    return out, new_residual


def silu_and_mul(x: torch.Tensor) -> torch.Tensor:
    """:func:`infercore.ops.reference.silu_and_mul` on the C kernel for float32."""
    lib = native.library()
    shape = _rows(x)
    if lib is None or shape is None or not _f32(x) or x.numel() == 0 or x.shape[-1] % 2:
        return reference.silu_and_mul(x)
    rows, width, stride = shape
    out = torch.empty(*x.shape[:-1], width // 2, dtype=x.dtype)
    lib.infercore_silu_and_mul_f32(x.data_ptr(), stride, out.data_ptr(), rows, width // 2)
    return out


def qk_norm_rotary(positions: torch.Tensor, q: torch.Tensor, k: torch.Tensor, q_weight: torch.Tensor,
                   k_weight: torch.Tensor, eps: float, cos_sin_cache: torch.Tensor, head_size: int,
                   is_neox: bool = True) -> tuple[torch.Tensor, torch.Tensor]:
    """:func:`infercore.ops.reference.qk_norm_rotary` (in place) on the C kernel for float32."""
    lib = native.library()
    if (lib is None or q.dim() != 2 or k.dim() != 2 or q.stride(-1) != 1 or k.stride(-1) != 1
            or not _f32(q, k, q_weight, k_weight, cos_sin_cache) or cos_sin_cache.shape[-1] != head_size
            or head_size % 2 or not (q_weight.is_contiguous() and k_weight.is_contiguous()
                                     and cos_sin_cache.is_contiguous())
            or q.shape[1] % head_size or k.shape[1] % head_size or q.shape[0] != k.shape[0]):
        return reference.qk_norm_rotary(positions, q, k, q_weight, k_weight, eps, cos_sin_cache, head_size, is_neox)
    rows = q.shape[0]
    if rows == 0:
        return q, k
    pos = positions[:rows].to(torch.int64).contiguous()
    lib.infercore_qk_norm_rotary_f32(q.data_ptr(), q.stride(0), q.shape[1] // head_size, k.data_ptr(), k.stride(0),
                                     k.shape[1] // head_size, pos.data_ptr(), rows, q_weight.data_ptr(),
                                     k_weight.data_ptr(), eps, cos_sin_cache.data_ptr(), head_size, int(is_neox))
    return q, k
