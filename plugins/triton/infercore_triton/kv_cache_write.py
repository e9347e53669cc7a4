"""Writing a step's K and V into the paged KV cache at a slot mapping (quantizing into an fp8 cache)."""

from __future__ import annotations

import torch
import triton
import triton.language as tl

from infercore.plugin_api import kv_cache_fp8


@triton.jit
def _write_kv_kernel(
    k_ptr, v_ptr, k_cache_ptr, v_cache_ptr, slot_ptr,
    k_scale, v_scale,
    stride_kt, stride_vt,
    stride_cache_block, stride_cache_slot,
    ROW: tl.constexpr, ROW_PAD: tl.constexpr, PAGE: tl.constexpr, FP8: tl.constexpr, FP8_MAX: tl.constexpr,
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
    if FP8:
        # Divide in float32 and saturate, as the reference does, so the stored bytes match it.
        k = tl.clamp(k.to(tl.float32) / k_scale, -FP8_MAX, FP8_MAX)
        v = tl.clamp(v.to(tl.float32) / v_scale, -FP8_MAX, FP8_MAX)
    tl.store(k_cache_ptr + dst, k.to(k_cache_ptr.dtype.element_ty), mask=mask)
    tl.store(v_cache_ptr + dst, v.to(v_cache_ptr.dtype.element_ty), mask=mask)


def write_kv(k: torch.Tensor, v: torch.Tensor, kv_cache: torch.Tensor, slot_mapping: torch.Tensor,
             k_scale: float = 1.0, v_scale: float = 1.0) -> None:
    """Store ``k``/``v`` [T, kv_heads, head_size] into ``kv_cache`` [2, blocks, block_size, kv_heads, head_size].

    Token ``t`` goes to slot ``slot_mapping[t]`` (``block * block_size + offset``); ``-1`` skips it. An
    fp8 cache stores ``k / k_scale`` and ``v / v_scale`` saturated to the e4m3 range.
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
        float(k_scale), float(v_scale),
        k2.stride(0), v2.stride(0),
        k_cache.stride(0), k_cache.stride(1),
        ROW=row, ROW_PAD=triton.next_power_of_2(row), PAGE=page,
        FP8=kv_cache_fp8.is_fp8_kv(kv_cache.dtype), FP8_MAX=kv_cache_fp8.FP8_KV_MAX,
    )
