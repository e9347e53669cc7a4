"""The fused q/k-norm + rotary + KV-cache write on the GPU at the W-GPU shape (Qwen3-0.6B: 16 query heads,
8 KV heads of 128, bf16) against the unfused kernels it replaces (qk_norm_rotary, then write_kv)."""

from __future__ import annotations

import pytest
import torch
from gpu_marks import requires_gpu
from triton_cases import rel_err

from infercore.kv_cache.fp8 import FP8_KV_DTYPE
from infercore_triton.kv_cache_write import write_kv
from infercore_triton.qk_norm_rotary import qk_norm_rotary
from infercore_triton.qk_norm_rotary_kv_write import qk_norm_rotary_write_kv

pytestmark = requires_gpu
HEADS, KV_HEADS, HEAD = 16, 8, 128
BLOCK_SIZE, NUM_BLOCKS = 16, 1024
#: Both paths compute in float32 and round at the same points; only the compiler's fused multiply-adds
#: may place an element one rounding step apart.
BOUND = {torch.bfloat16: 1e-2, FP8_KV_DTYPE: 3e-2}


def _rope_cache(max_position: int) -> torch.Tensor:
    inv_freq = 1.0 / (1e6 ** (torch.arange(0, HEAD, 2, device="cuda").float() / HEAD))
    angles = torch.arange(max_position, device="cuda").float()[:, None] * inv_freq[None, :]
    return torch.cat((angles.cos(), angles.sin()), dim=-1).to(torch.bfloat16)


def _split(qkv: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    q, k, v = qkv.split([HEADS * HEAD, KV_HEADS * HEAD, KV_HEADS * HEAD], dim=-1)
    return q, k, v


@pytest.mark.parametrize("cache_dtype", [torch.bfloat16, FP8_KV_DTYPE], ids=["bf16", "fp8"])
@pytest.mark.parametrize("is_neox", [True, False])
@pytest.mark.parametrize("num_tokens", [1, 256, 2048])  # one decode, a W-GPU decode batch, a prefill chunk
def test_fused_matches_unfused(cache_dtype: torch.dtype, is_neox: bool, num_tokens: int) -> None:
    gen = torch.Generator(device="cuda").manual_seed(num_tokens)
    positions = torch.randint(0, 4096, (num_tokens,), device="cuda", generator=gen)
    slots = torch.randperm(NUM_BLOCKS * BLOCK_SIZE, device="cuda", generator=gen)[:num_tokens]
    if num_tokens > 1:
        slots[num_tokens // 2] = -1  # a padding token
    qkv = (2 * torch.randn(num_tokens, (HEADS + 2 * KV_HEADS) * HEAD, device="cuda", generator=gen)).bfloat16()
    q_w, k_w = torch.randn(2, HEAD, device="cuda", generator=gen).bfloat16()
    cos_sin = _rope_cache(4096)
    k_scale, v_scale = (0.05, 0.02) if cache_dtype == FP8_KV_DTYPE else (1.0, 1.0)
    empty = torch.zeros(2, NUM_BLOCKS, BLOCK_SIZE, KV_HEADS, HEAD, device="cuda").to(cache_dtype)

    ref_qkv, ref_cache = qkv.clone(), empty.clone()
    q, k, v = _split(ref_qkv)
    qk_norm_rotary(positions, q, k, q_w, k_w, 1e-6, cos_sin, HEAD, is_neox)
    write_kv(k.view(num_tokens, KV_HEADS, HEAD), v.view(num_tokens, KV_HEADS, HEAD), ref_cache, slots,
             k_scale, v_scale)

    cache = empty.clone()
    q, k, v = _split(qkv)
    qk_norm_rotary_write_kv(positions, q, k, v, q_w, k_w, 1e-6, cos_sin, cache, slots, k_scale, v_scale, is_neox)
    torch.cuda.synchronize()

    assert rel_err(q, _split(ref_qkv)[0]) < BOUND[torch.bfloat16]
    assert rel_err(cache.float(), ref_cache.float()) < BOUND[cache_dtype]
    written = (cache.view(torch.uint8) != 0).flatten(3).any(-1).any(0).flatten()
    assert torch.equal(torch.nonzero(written).flatten(), slots[slots >= 0].sort().values)
