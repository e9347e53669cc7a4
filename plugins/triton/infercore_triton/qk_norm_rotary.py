"""Per-head RMSNorm of the query and key heads followed by rotary embedding, in place, in one kernel.

Qwen3-style attention norms every q and k head before rotary. Unfused that is a copy and a norm
for each of q and k plus the rotary kernel; here one program per token reads each head once,
norms it and rotates it, writing back into the (possibly row-strided) q and k views of the fused
QKV projection.
"""

from __future__ import annotations

import torch
import triton
import triton.language as tl

from infercore.plugin_api import op_reference
from infercore_triton.rotary import load_cos_sin, rotation_halves

#: Largest head tile (heads × head_size elements) one loop iteration holds in registers.
MAX_TILE = 2048


@triton.jit
def norm_rotate_store(src, dst, w_ptr, cos, sin, num_heads, eps, scale,
                       HEAD: tl.constexpr, HALF: tl.constexpr, HALF_PAD: tl.constexpr,
                       BLOCK_HEADS: tl.constexpr, IS_NEOX: tl.constexpr, FP8: tl.constexpr,
                       FP8_MAX: tl.constexpr):
    """Norm then rotate the ``num_heads`` heads of one token's row at ``src``, ``BLOCK_HEADS`` at a time,
    and store them at ``dst`` (``src`` itself to work in place).

    Each head is held as its two rotation halves (``first``/``second`` feature indices), which together
    cover the whole head, so the norm's sum of squares needs no second read. Values are rounded to the
    activation dtype after the norm and after the weight, as the unfused rms_norm and rotary ops store
    them. An fp8 destination (``FP8``) then stores ``x / scale`` saturated to +-``FP8_MAX``, as the KV
    cache write does.
    """
    i = tl.arange(0, HALF_PAD)
    first, second = rotation_halves(HALF, HALF_PAD, IS_NEOX)
    half_mask = i < HALF
    w1 = tl.load(w_ptr + first, mask=half_mask, other=0.0).to(tl.float32)[None, :]
    w2 = tl.load(w_ptr + second, mask=half_mask, other=0.0).to(tl.float32)[None, :]
    for h0 in range(0, num_heads, BLOCK_HEADS):
        heads = h0 + tl.arange(0, BLOCK_HEADS)
        offsets = heads[:, None] * HEAD
        mask = (heads < num_heads)[:, None] & half_mask[None, :]
        x1 = tl.load(src + offsets + first[None, :], mask=mask, other=0.0)
        x2 = tl.load(src + offsets + second[None, :], mask=mask, other=0.0)
        x1f = x1.to(tl.float32)
        x2f = x2.to(tl.float32)
        mean_sq = (tl.sum(x1f * x1f, axis=1) + tl.sum(x2f * x2f, axis=1)) / HEAD
        rstd = tl.rsqrt(mean_sq + eps)[:, None]
        y1 = ((x1f * rstd).to(x1.dtype).to(tl.float32) * w1).to(x1.dtype).to(tl.float32)
        y2 = ((x2f * rstd).to(x1.dtype).to(tl.float32) * w2).to(x1.dtype).to(tl.float32)
        r1 = (y1 * cos - y2 * sin).to(x1.dtype)
        r2 = (y2 * cos + y1 * sin).to(x1.dtype)
        if FP8:
            r1 = tl.clamp(r1.to(tl.float32) / scale, -FP8_MAX, FP8_MAX)
            r2 = tl.clamp(r2.to(tl.float32) / scale, -FP8_MAX, FP8_MAX)
        tl.store(dst + offsets + first[None, :], r1.to(dst.dtype.element_ty), mask=mask)
        tl.store(dst + offsets + second[None, :], r2.to(dst.dtype.element_ty), mask=mask)


@triton.jit
def _qk_norm_rotary_kernel(
    positions_ptr, q_ptr, k_ptr, q_weight_ptr, k_weight_ptr, cache_ptr,
    stride_qt, stride_kt, stride_cache,
    num_q_heads, num_k_heads, eps,
    HEAD: tl.constexpr, HALF: tl.constexpr, HALF_PAD: tl.constexpr,
    Q_BLOCK_HEADS: tl.constexpr, K_BLOCK_HEADS: tl.constexpr, IS_NEOX: tl.constexpr,
):
    token = tl.program_id(0).to(tl.int64)
    cos, sin = load_cos_sin(cache_ptr, positions_ptr, token, stride_cache, HALF, HALF_PAD)
    q_row = q_ptr + token * stride_qt
    k_row = k_ptr + token * stride_kt
    norm_rotate_store(q_row, q_row, q_weight_ptr, cos, sin, num_q_heads, eps, 1.0,
                      HEAD, HALF, HALF_PAD, Q_BLOCK_HEADS, IS_NEOX, False, 448.0)
    norm_rotate_store(k_row, k_row, k_weight_ptr, cos, sin, num_k_heads, eps, 1.0,
                      HEAD, HALF, HALF_PAD, K_BLOCK_HEADS, IS_NEOX, False, 448.0)


def _token_rows(x: torch.Tensor, name: str) -> torch.Tensor:
    rows = x.view(x.shape[0], -1)
    if rows.stride(-1) != 1:
        raise ValueError(f"qk_norm_rotary works in place and needs each token's heads contiguous; "
                         f"pass {name} with a contiguous last dimension")
    return rows


def _block_heads(num_heads: int, half_pad: int) -> int:
    """Heads per loop iteration: all of them if they fit in ``MAX_TILE`` elements, else a power of two
    that does."""
    return max(1, min(triton.next_power_of_2(num_heads), MAX_TILE // (2 * half_pad)))


def qk_norm_rotary(positions: torch.Tensor, q: torch.Tensor, k: torch.Tensor, q_weight: torch.Tensor,
                   k_weight: torch.Tensor, eps: float, cos_sin_cache: torch.Tensor, head_size: int,
                   is_neox: bool = True) -> tuple[torch.Tensor, torch.Tensor]:
    """RMSNorm every head of ``q`` [T, heads*head_size] and ``k`` [T, kv_heads*head_size], then rotate them.

    Works in place (``q`` and ``k`` may be row-strided views with a contiguous last dimension) and
    returns ``(q, k)``. The norm uses ``q_weight`` / ``k_weight`` [head_size] and accumulates in
    float32; ``cos_sin_cache`` is [max_position, head_size] holding ``cat(cos, sin)`` (full rotary
    only). ``is_neox`` rotates halves rather than interleaved pairs.
    """
    op_reference.check_full_rotary(cos_sin_cache, head_size)
    num_tokens = positions.numel()
    q_rows, k_rows = _token_rows(q, "q"), _token_rows(k, "k")
    half = head_size // 2
    half_pad = triton.next_power_of_2(half)
    num_q_heads = q_rows.shape[1] // head_size
    num_k_heads = k_rows.shape[1] // head_size
    if num_tokens > 0:
        _qk_norm_rotary_kernel[(num_tokens,)](
            positions, q_rows, k_rows, q_weight.contiguous(), k_weight.contiguous(), cos_sin_cache,
            q_rows.stride(0), k_rows.stride(0), cos_sin_cache.stride(0),
            num_q_heads, num_k_heads, eps,
            HEAD=head_size, HALF=half, HALF_PAD=half_pad,
            Q_BLOCK_HEADS=_block_heads(num_q_heads, half_pad),
            K_BLOCK_HEADS=_block_heads(num_k_heads, half_pad),
            IS_NEOX=is_neox, num_warps=4,
        )
    return q, k
