"""Rotary position embedding applied in place to the query and key heads."""

from __future__ import annotations

import torch
import triton
import triton.language as tl


@triton.jit
def rotation_halves(HALF: tl.constexpr, HALF_PAD: tl.constexpr, IS_NEOX: tl.constexpr):
    """Feature indices [HALF_PAD] of the two halves a head rotates: ``(first, second)``.

    NeoX style pairs feature ``i`` with ``i + HALF``; GPT-J style pairs ``2i`` with ``2i + 1``.
    """
    i = tl.arange(0, HALF_PAD)
    if IS_NEOX:
        first = i
        second = i + HALF
    else:
        first = 2 * i
        second = 2 * i + 1
    return first, second


@triton.jit
def _rotate_heads(x_ptr, stride_t, token, cos, sin, num_heads,
                  HEAD: tl.constexpr, HALF: tl.constexpr, HEADS_PAD: tl.constexpr, HALF_PAD: tl.constexpr,
                  IS_NEOX: tl.constexpr):
    heads = tl.arange(0, HEADS_PAD)
    i = tl.arange(0, HALF_PAD)
    first, second = rotation_halves(HALF, HALF_PAD, IS_NEOX)
    base = x_ptr + token * stride_t + heads[:, None] * HEAD
    mask = (heads < num_heads)[:, None] & (i < HALF)[None, :]
    x1 = tl.load(base + first[None, :], mask=mask, other=0.0)
    x2 = tl.load(base + second[None, :], mask=mask, other=0.0)
    x1f = x1.to(tl.float32)
    x2f = x2.to(tl.float32)
    tl.store(base + first[None, :], (x1f * cos - x2f * sin).to(x1.dtype), mask=mask)
    tl.store(base + second[None, :], (x2f * cos + x1f * sin).to(x1.dtype), mask=mask)


@triton.jit
def load_cos_sin(cache_ptr, positions_ptr, token, stride_cache, HALF: tl.constexpr, HALF_PAD: tl.constexpr):
    """The float32 cos and sin rows [1, HALF_PAD] of ``token``'s position (zero past ``HALF``)."""
    pos = tl.load(positions_ptr + token).to(tl.int64)
    i = tl.arange(0, HALF_PAD)
    cos = tl.load(cache_ptr + pos * stride_cache + i, mask=i < HALF, other=0.0).to(tl.float32)[None, :]
    sin = tl.load(cache_ptr + pos * stride_cache + HALF + i, mask=i < HALF, other=0.0).to(tl.float32)[None, :]
    return cos, sin


@triton.jit
def _rotary_kernel(
    positions_ptr, q_ptr, k_ptr, cache_ptr,
    stride_qt, stride_kt, stride_cache,
    num_q_heads, num_k_heads,
    HEAD: tl.constexpr, HALF: tl.constexpr, HALF_PAD: tl.constexpr,
    Q_HEADS_PAD: tl.constexpr, K_HEADS_PAD: tl.constexpr, IS_NEOX: tl.constexpr,
):
    token = tl.program_id(0).to(tl.int64)
    cos, sin = load_cos_sin(cache_ptr, positions_ptr, token, stride_cache, HALF, HALF_PAD)
    _rotate_heads(q_ptr, stride_qt, token, cos, sin, num_q_heads, HEAD, HALF, Q_HEADS_PAD, HALF_PAD, IS_NEOX)
    _rotate_heads(k_ptr, stride_kt, token, cos, sin, num_k_heads, HEAD, HALF, K_HEADS_PAD, HALF_PAD, IS_NEOX)


def _token_rows(x: torch.Tensor) -> torch.Tensor:
    rows = x.view(x.shape[0], -1)
    if rows.stride(-1) != 1:
        raise ValueError("rotary_embedding works in place and needs each token's heads contiguous; "
                         "pass q and k with a contiguous last dimension")
    return rows


def rotary_embedding(positions: torch.Tensor, q: torch.Tensor, k: torch.Tensor, cos_sin_cache: torch.Tensor,
                     head_size: int, is_neox: bool = True) -> tuple[torch.Tensor, torch.Tensor]:
    """Rotate ``q`` [T, heads*head_size] and ``k`` [T, kv_heads*head_size] in place; returns them.

    ``cos_sin_cache`` is [max_position, rot_dim] holding ``cat(cos, sin)``; only the first ``rot_dim``
    features of each head rotate. ``is_neox`` rotates halves rather than interleaved pairs.
    """
    num_tokens = positions.numel()
    q_rows, k_rows = _token_rows(q), _token_rows(k)
    half = cos_sin_cache.shape[-1] // 2
    num_q_heads = q_rows.shape[1] // head_size
    num_k_heads = k_rows.shape[1] // head_size
    if num_tokens > 0:
        _rotary_kernel[(num_tokens,)](
            positions, q_rows, k_rows, cos_sin_cache,
            q_rows.stride(0), k_rows.stride(0), cos_sin_cache.stride(0),
            num_q_heads, num_k_heads,
            HEAD=head_size, HALF=half, HALF_PAD=triton.next_power_of_2(half),
            Q_HEADS_PAD=triton.next_power_of_2(num_q_heads), K_HEADS_PAD=triton.next_power_of_2(num_k_heads),
            IS_NEOX=is_neox, num_warps=4,
        )
    return q, k
