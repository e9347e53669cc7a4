"""Triton custom ops against core's torch references, through the interpreter."""

from __future__ import annotations

import pytest
import torch
from triton_cases import rel_err

from infercore.ops import reference
from infercore_triton.activation import silu_and_mul
from infercore_triton.rms_norm import fused_add_rms_norm, rms_norm
from infercore_triton.rotary import rotary_embedding

DTYPES = [torch.float32, torch.bfloat16]
BOUND = {torch.float32: 1e-6, torch.bfloat16: 1e-2}


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("hidden", [64, 96])
def test_rms_norm(dtype: torch.dtype, hidden: int) -> None:
    x = torch.randn(5, hidden).to(dtype)
    weight = torch.randn(hidden).to(dtype)
    assert rel_err(rms_norm(x, weight, 1e-6), reference.rms_norm(x, weight, 1e-6)) < BOUND[dtype]


@pytest.mark.parametrize("dtype", DTYPES)
def test_fused_add_rms_norm(dtype: torch.dtype) -> None:
    x, residual = torch.randn(2, 3, 128).to(dtype), torch.randn(2, 3, 128).to(dtype)
    weight = torch.randn(128).to(dtype)
    residual_before = residual.clone()
    out, new_residual = fused_add_rms_norm(x, residual, weight, 1e-5)
    ref_out, ref_residual = reference.fused_add_rms_norm(x, residual_before, weight, 1e-5)
    # The interpreter rounds float32 to bfloat16 by truncation, so bfloat16 sums may differ by an ulp.
    assert rel_err(new_residual, ref_residual) < (1e-2 if dtype == torch.bfloat16 else 1e-12)
    assert rel_err(out, ref_out) < BOUND[dtype]
    assert torch.equal(residual, residual_before)


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("is_neox", [True, False])
@pytest.mark.parametrize(("head_size", "rot_dim"), [(64, 64), (128, 128), (64, 32)])
def test_rotary_embedding_in_place(dtype: torch.dtype, is_neox: bool, head_size: int, rot_dim: int) -> None:
    tokens, heads, kv_heads = 6, 4, 2
    positions = torch.tensor([0, 5, 17, 3, 99, 42])
    inv_freq = 1.0 / (10000 ** (torch.arange(0, rot_dim, 2).float() / rot_dim))
    angles = torch.arange(128).float()[:, None] * inv_freq[None, :]
    cache = torch.cat((angles.cos(), angles.sin()), dim=-1).to(dtype)
    # q is a column slice of a fused qkv projection, as models produce it.
    qkv = torch.randn(tokens, (heads + 2 * kv_heads) * head_size).to(dtype)
    q, k = qkv[:, :heads * head_size], qkv[:, heads * head_size:(heads + kv_heads) * head_size]
    ref_q, ref_k = reference.rotary_embedding(positions, q.clone(), k.clone(), cache, head_size, is_neox)
    out_q, out_k = rotary_embedding(positions, q, k, cache, head_size, is_neox)
    assert out_q.data_ptr() == q.data_ptr()
    assert rel_err(q, ref_q) < BOUND[dtype]
    assert rel_err(k, ref_k) < BOUND[dtype]


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("inter", [96, 1536])
def test_silu_and_mul(dtype: torch.dtype, inter: int) -> None:
    x = torch.randn(3, 2 * inter).to(dtype)
    assert rel_err(silu_and_mul(x), reference.silu_and_mul(x)) < BOUND[dtype]
