"""The Triton backend's layout of an fp8 KV cache: V transposed inside each block.

The standard layout stores both halves of a layer's cache as [blocks, block_size, kv_heads, head_size].
Decode attention multiplies the scores by V, a product that needs V with its tokens contiguous; an
fp8 tile in the standard layout only gets there through shared memory one byte at a time (Hopper's
8-bit ``ldmatrix`` does not transpose). So an fp8 cache keeps each block's V as
[kv_heads, head_size, block_size] in the same memory: the tensor's shape is unchanged and K keeps
the standard layout. These functions convert between the two (tests and the conformance kit).
"""

from __future__ import annotations

import torch


def _raw(half: torch.Tensor) -> torch.Tensor:
    return half.view(torch.uint8) if half.element_size() == 1 else half


def v_transposed(kv_cache: torch.Tensor) -> torch.Tensor:
    """A copy of a standard-layout ``kv_cache`` [2, blocks, block_size, kv_heads, head_size] with each
    block's V stored as [kv_heads, head_size, block_size]."""
    out = kv_cache.clone()
    raw = _raw(out[1])
    raw.view(-1).copy_(_raw(kv_cache[1]).permute(0, 2, 3, 1).contiguous().view(-1))
    return out


def v_standard(kv_cache: torch.Tensor) -> torch.Tensor:
    """The inverse of :func:`v_transposed`: a copy in the standard layout."""
    blocks, block_size, kv_heads, head_size = kv_cache.shape[1:]
    out = kv_cache.clone()
    stored = _raw(kv_cache[1]).reshape(blocks, kv_heads, head_size, block_size)
    _raw(out[1]).copy_(stored.permute(0, 3, 1, 2))
    return out
