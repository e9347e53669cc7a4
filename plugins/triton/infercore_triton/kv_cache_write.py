"""Writing a step's K and V into the paged KV cache at a slot mapping."""

from __future__ import annotations

import torch
import triton
import triton.language as tl


@triton.jit
def _write_kv_kernel(
    k_ptr, v_ptr, k_cache_ptr, v_cache_ptr, slot_ptr,
    stride_kt, stride_vt,
    stride_cache_block, stride_cache_slot,
    ROW: tl.constexpr, ROW_PAD: tl.constexpr, PAGE: tl.constexpr,
):
    token = tl.program_id(0)
    slot = tl.load(slot_ptr + token).to(tl.int64)
    if slot < 0:
        return
    cols = tl.arange(0, ROW_PAD)
    mask = cols < ROW
    dst = (slot // PAGE) * stride_cache_block + (slot % PAGE) * stride_cache_slot + cols
    k = tl.load(k_ptr + token * stride_kt + cols, mask=mask)
    v = tl.load(v_ptr + token * stride_vt + cols, mask=mask)
    tl.store(k_cache_ptr + dst, k.to(k_cache_ptr.dtype.element_ty), mask=mask)
    tl.store(v_cache_ptr + dst, v.to(v_cache_ptr.dtype.element_ty), mask=mask)


def write_kv(k: torch.Tensor, v: torch.Tensor, kv_cache: torch.Tensor, slot_mapping: torch.Tensor) -> None:
    """Store ``k``/``v`` [T, kv_heads, head_size] into ``kv_cache`` [2, blocks, block_size, kv_heads, head_size].

    Token ``t`` goes to slot ``slot_mapping[t]`` (``block * block_size + offset``); ``-1`` skips it.
    """
    num_tokens = k.shape[0]
    if num_tokens == 0:
        return
    _, _, page, kv_heads, head_size = kv_cache.shape
    row = kv_heads * head_size
    k2 = k.reshape(num_tokens, row)
    v2 = v.reshape(num_tokens, row)
    if k2.stride(1) != 1 or v2.stride(1) != 1:
        k2, v2 = k2.contiguous(), v2.contiguous()
    k_cache, v_cache = kv_cache[0], kv_cache[1]
    _write_kv_kernel[(num_tokens,)](
        k2, v2, k_cache, v_cache, slot_mapping[:num_tokens],
        k2.stride(0), v2.stride(0),
        k_cache.stride(0), k_cache.stride(1),
        ROW=row, ROW_PAD=triton.next_power_of_2(row), PAGE=page,
    )
