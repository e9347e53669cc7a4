"""Per-head q/k RMSNorm and rotary with the step's K/V written into the paged cache, in one kernel.

Unfused, Qwen3-style attention norms and rotates q and k in place (:mod:`infercore_triton.qk_norm_rotary`)
and the backend then reads k and v again to store them at the slot mapping
(:mod:`infercore_triton.kv_cache_write`). Here one program per token does both: q is normed, rotated
and written back in place; k is normed, rotated and stored straight into the cache together with v.
k itself is left as it came, since the Triton attention kernels read keys only from the cache.
"""

from __future__ import annotations

import math

import torch
import triton
import triton.language as tl

from infercore.plugin_api import kv_cache_fp8, op_reference
from infercore_triton.qk_norm_rotary import MAX_TILE, norm_rotate_store
from infercore_triton.rotary import load_cos_sin


@triton.jit
def _qk_norm_rotary_kv_write_kernel(
    positions_ptr, slot_ptr, q_ptr, k_ptr, v_ptr, q_weight_ptr, k_weight_ptr, cos_sin_ptr,
    k_cache_ptr, v_cache_ptr,
    stride_qt, stride_kt, stride_vt, stride_cos_sin, stride_cache_block, stride_cache_slot,
    num_q_heads, num_kv_heads, eps, k_scale, v_scale,
    HEAD: tl.constexpr, HALF: tl.constexpr, HALF_PAD: tl.constexpr,
    Q_BLOCK_HEADS: tl.constexpr, K_BLOCK_HEADS: tl.constexpr, IS_NEOX: tl.constexpr,
    ROW: tl.constexpr, ROW_PAD: tl.constexpr, PAGE: tl.constexpr, FP8: tl.constexpr, FP8_MAX: tl.constexpr,
):
    token = tl.program_id(0).to(tl.int64)
    cos, sin = load_cos_sin(cos_sin_ptr, positions_ptr, token, stride_cos_sin, HALF, HALF_PAD)
    q_row = q_ptr + token * stride_qt
    norm_rotate_store(q_row, q_row, q_weight_ptr, cos, sin, num_q_heads, eps, 1.0,
                       HEAD, HALF, HALF_PAD, Q_BLOCK_HEADS, IS_NEOX, False, FP8_MAX)
    slot = tl.load(slot_ptr + token).to(tl.int64)
    # A padding token (slot -1) stores no head and no feature; its address is clamped only to stay in
    # bounds.
    write = slot >= 0
    live = tl.maximum(slot, 0)
    dst = (live // PAGE) * stride_cache_block + (live % PAGE) * stride_cache_slot
    norm_rotate_store(k_ptr + token * stride_kt, k_cache_ptr + dst, k_weight_ptr, cos, sin,
                       tl.where(write, num_kv_heads, 0), eps, k_scale, HEAD, HALF, HALF_PAD, K_BLOCK_HEADS, IS_NEOX, FP8, FP8_MAX)
    cols = tl.arange(0, ROW_PAD)
    v_mask = cols < tl.where(write, ROW, 0)
    v = tl.load(v_ptr + token * stride_vt + cols, mask=v_mask)
    if FP8:
        v = tl.clamp(v.to(tl.float32) / v_scale, -FP8_MAX, FP8_MAX)
    tl.store(v_cache_ptr + dst + cols, v.to(v_cache_ptr.dtype.element_ty), mask=v_mask)


def _rows(x: torch.Tensor, name: str) -> torch.Tensor:
    """``x`` as [T, heads*head_size], a view of it (so in-place writes land in ``x``)."""
    try:
        rows = x.view(x.shape[0], math.prod(x.shape[1:]))
    except RuntimeError as err:
        raise ValueError(f"qk_norm_rotary_write_kv needs each token's {name} heads adjacent in memory; pass {name} "
                         "as [T, heads*head_size] or [T, heads, head_size] with dense heads") from err
    if rows.stride(-1) != 1:
        raise ValueError(f"qk_norm_rotary_write_kv needs {name} with a contiguous last dimension")
    return rows


def _block_heads(num_heads: int, half_pad: int) -> int:
    """Heads per loop iteration: all of them if they fit in ``MAX_TILE`` elements, else a power of two
    that does."""
    return max(1, min(triton.next_power_of_2(num_heads), MAX_TILE // (2 * half_pad)))


def qk_norm_rotary_write_kv(positions: torch.Tensor, q: torch.Tensor, k: torch.Tensor, v: torch.Tensor,
                            q_weight: torch.Tensor, k_weight: torch.Tensor, eps: float,
                            cos_sin_cache: torch.Tensor, kv_cache: torch.Tensor, slot_mapping: torch.Tensor,
                            k_scale: float = 1.0, v_scale: float = 1.0, is_neox: bool = True) -> torch.Tensor:
    """RMSNorm and rotate every head of ``q`` and ``k``; write ``q`` back in place and store the rotated
    ``k`` and ``v`` into ``kv_cache`` at ``slot_mapping``. Returns ``q``.

    Computes what ``qk_norm_rotary`` followed by ``write_kv`` computes (the same roundings, so the same
    bytes): ``q`` [T, heads*head_size] or [T, heads, head_size], ``k``/``v`` likewise with the KV heads,
    each possibly a row-strided view of the fused QKV output; ``kv_cache`` [2, blocks, block_size,
    kv_heads, head_size]; token ``t`` goes to slot ``slot_mapping[t]`` and ``-1`` skips it (its q is
    still normed and rotated). An fp8 cache stores ``k / k_scale`` and ``v / v_scale`` saturated to the
    e4m3 range. ``k`` is not modified: the cache holds its rotated values.
    """
    _, _, page, kv_heads, head_size = kv_cache.shape
    op_reference.check_full_rotary(cos_sin_cache, head_size)
    num_tokens = positions.numel()
    q_rows, k_rows, v_rows = _rows(q, "q"), _rows(k, "k"), _rows(v, "v")
    if k_rows.shape[1] != kv_heads * head_size or v_rows.shape[1] != kv_heads * head_size:
        raise ValueError(f"k and v must hold {kv_heads} heads of {head_size} per token to match the KV cache; "
                         f"got rows of {k_rows.shape[1]} and {v_rows.shape[1]}")
    if num_tokens == 0:
        return q
    half = head_size // 2
    half_pad = triton.next_power_of_2(half)
    num_q_heads = q_rows.shape[1] // head_size
    row = kv_heads * head_size
    k_cache, v_cache = kv_cache[0], kv_cache[1]
    _qk_norm_rotary_kv_write_kernel[(num_tokens,)](
        positions, slot_mapping, q_rows, k_rows, v_rows, q_weight.contiguous(), k_weight.contiguous(),
        cos_sin_cache, k_cache, v_cache,
        q_rows.stride(0), k_rows.stride(0), v_rows.stride(0), cos_sin_cache.stride(0),
        k_cache.stride(0), k_cache.stride(1),
        num_q_heads, kv_heads, eps, float(k_scale), float(v_scale),
        HEAD=head_size, HALF=half, HALF_PAD=half_pad,
        Q_BLOCK_HEADS=_block_heads(num_q_heads, half_pad), K_BLOCK_HEADS=_block_heads(kv_heads, half_pad),
        IS_NEOX=is_neox, ROW=row, ROW_PAD=triton.next_power_of_2(row), PAGE=page,
        FP8=kv_cache_fp8.is_fp8_kv(kv_cache.dtype), FP8_MAX=kv_cache_fp8.FP8_KV_MAX, num_warps=4,
    )
    return q
