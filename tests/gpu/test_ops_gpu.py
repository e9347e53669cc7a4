"""Triton custom ops on the GPU at model shapes against core's references."""

from __future__ import annotations

import pytest
import torch
from gpu_marks import requires_gpu
from triton_cases import rel_err

from infercore.ops import reference
from infercore_triton.activation import silu_and_mul
from infercore_triton.qk_norm_rotary import qk_norm_rotary
from infercore_triton.rms_norm import fused_add_rms_norm, rms_norm
from infercore_triton.rotary import rotary_embedding

pytestmark = requires_gpu
DTYPES = [torch.float32, torch.bfloat16]
BOUND = {torch.float32: 1e-6, torch.bfloat16: 1e-2}


@pytest.mark.parametrize("dtype", DTYPES)
def test_norms(dtype: torch.dtype) -> None:
    x, residual = torch.randn(4096, 1024, device="cuda").to(dtype), torch.randn(4096, 1024, device="cuda").to(dtype)
    weight = torch.randn(1024, device="cuda").to(dtype)
    assert rel_err(rms_norm(x, weight, 1e-6), reference.rms_norm(x, weight, 1e-6)) < BOUND[dtype]
    out, new_residual = fused_add_rms_norm(x, residual, weight, 1e-6)
    ref_out, ref_residual = reference.fused_add_rms_norm(x, residual, weight, 1e-6)
    assert torch.equal(new_residual, ref_residual)
    assert rel_err(out, ref_out) < BOUND[dtype]


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("is_neox", [True, False])
def test_rotary(dtype: torch.dtype, is_neox: bool) -> None:
    positions = torch.randint(0, 8192, (2048,), device="cuda")
    angles = torch.arange(8192, device="cuda").float()[:, None] * (1e-4 ** (torch.arange(64, device="cuda") / 64))
    cache = torch.cat((angles.cos(), angles.sin()), dim=-1).to(dtype)
    q, k = torch.randn(2048, 16 * 128, device="cuda").to(dtype), torch.randn(2048, 8 * 128, device="cuda").to(dtype)
    ref_q, ref_k = reference.rotary_embedding(positions, q.clone(), k.clone(), cache, 128, is_neox)
    rotary_embedding(positions, q, k, cache, 128, is_neox)
    assert rel_err(q, ref_q) < BOUND[dtype] and rel_err(k, ref_k) < BOUND[dtype]


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("is_neox", [True, False])
def test_qk_norm_rotary(dtype: torch.dtype, is_neox: bool) -> None:
    # Qwen3-8B's attention: 32 query heads, 8 KV heads of 128, q and k sliced out of the fused qkv output.
    heads, kv_heads, head = 32, 8, 128
    positions = torch.randint(0, 8192, (2048,), device="cuda")
    angles = torch.arange(8192, device="cuda").float()[:, None] * (1e-4 ** (torch.arange(64, device="cuda") / 64))
    cache = torch.cat((angles.cos(), angles.sin()), dim=-1).to(dtype)
    qkv = torch.randn(2048, (heads + 2 * kv_heads) * head, device="cuda").to(dtype)
    q, k, v = qkv.split([heads * head, kv_heads * head, kv_heads * head], dim=-1)
    q_w, k_w = torch.randn(head, device="cuda").to(dtype), torch.randn(head, device="cuda").to(dtype)
    v_before = v.clone()
    ref_q, ref_k = reference.qk_norm_rotary(positions, q.clone(), k.clone(), q_w, k_w, 1e-6, cache, head,
                                            is_neox)
    qk_norm_rotary(positions, q, k, q_w, k_w, 1e-6, cache, head, is_neox)
    assert rel_err(q, ref_q) < BOUND[dtype] and rel_err(k, ref_k) < BOUND[dtype]
    assert torch.equal(v, v_before)


@pytest.mark.parametrize("dtype", DTYPES)
def test_silu_and_mul(dtype: torch.dtype) -> None:
    x = torch.randn(4096, 2 * 3072, device="cuda").to(dtype)
    assert rel_err(silu_and_mul(x), reference.silu_and_mul(x)) < BOUND[dtype]
