"""The fused q/k-norm + rotary + KV-cache write (through the interpreter) against the unfused Triton path
it replaces (the same bytes) and core's torch references (close), over bf16/fp32 and fp8 caches."""

from __future__ import annotations

import pytest
import torch
from fused_cases import FusedCase, make_case, unfused

from infercore.attention.reference import write_kv as reference_write_kv
from infercore.kv_cache.fp8 import FP8_KV_DTYPE, FP8_KV_MAX, dequantize_kv, is_fp8_kv
from infercore.ops import reference
from infercore_triton.qk_norm_rotary_kv_write import qk_norm_rotary_write_kv

#: Norm-relative error against torch's reference, fp8 caches included (both round to e4m3 the same way,
#: see conftest). The interpreter rounds float32 to bfloat16 by truncation (three roundings: norm,
#: weight, rotation), so a bfloat16 entry may land an e4m3 step away from the reference's.
BOUND = {torch.float32: 1e-6, torch.bfloat16: 3e-2}
SHAPES = [(4, 2, 64), (20, 4, 128)]  # the second needs two head tiles per token for q


def _rel_err(a: torch.Tensor, b: torch.Tensor) -> float:
    return float((a.float() - b.float()).norm() / b.float().norm().clamp_min(1e-12))


def _fused(case: FusedCase, is_neox: bool, k_scale: float, v_scale: float) -> tuple[torch.Tensor, torch.Tensor]:
    qkv, cache = case.qkv.clone(), case.kv_cache.clone()
    q, k, v = case.split(qkv)
    out = qk_norm_rotary_write_kv(case.positions, q, k, v, case.q_weight, case.k_weight, 1e-6, case.cos_sin_cache,
                                  cache, case.slot_mapping, k_scale, v_scale, is_neox)
    assert out.data_ptr() == q.data_ptr()
    # k and v are left as they came (with q's columns of the fused output): only the cache holds rotated keys.
    assert torch.equal(qkv[:, q.shape[1]:], case.qkv[:, q.shape[1]:])
    return q, cache


def _reference_cache(case: FusedCase, is_neox: bool, k_scale: float, v_scale: float) -> torch.Tensor:
    q, k, v = (x.clone() for x in case.split(case.qkv))
    _, k = reference.qk_norm_rotary(case.positions, q, k, case.q_weight, case.k_weight, 1e-6, case.cos_sin_cache,
                                    case.head_size, is_neox)
    cache = case.kv_cache.clone()
    n = k.shape[0]
    reference_write_kv(k.view(n, case.kv_heads, -1), v.view(n, case.kv_heads, -1), cache, case.slot_mapping,
                       k_scale, v_scale)
    return cache


def _as_values(cache: torch.Tensor, k_scale: float, v_scale: float) -> torch.Tensor:
    if not is_fp8_kv(cache.dtype):
        return cache.float()
    return torch.stack([dequantize_kv(cache[0], k_scale), dequantize_kv(cache[1], v_scale)])


def _written_slots(cache: torch.Tensor) -> set[int]:
    rows = cache.view(torch.uint8) if is_fp8_kv(cache.dtype) else cache
    flat = rows.reshape(2, -1, rows.shape[-2] * rows.shape[-1])
    return set(torch.nonzero((flat != 0).any(dim=-1).any(dim=0)).flatten().tolist())


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
@pytest.mark.parametrize("fp8", [False, True])
@pytest.mark.parametrize("is_neox", [True, False])
@pytest.mark.parametrize(("heads", "kv_heads", "head_size"), SHAPES)
def test_fused_matches_unfused_bytes_and_the_reference(dtype: torch.dtype, fp8: bool, is_neox: bool, heads: int,
                                                       kv_heads: int, head_size: int) -> None:
    case = make_case(6, heads, kv_heads, head_size, dtype, FP8_KV_DTYPE if fp8 else dtype, padding=2,
                     seed=heads + is_neox + fp8)
    k_scale, v_scale = (0.5, 2.0) if fp8 else (1.0, 1.0)
    q, cache = _fused(case, is_neox, k_scale, v_scale)
    ref_q, ref_cache = unfused(case, is_neox, k_scale, v_scale)
    assert torch.equal(q, ref_q)
    assert torch.equal(cache.view(torch.uint8), ref_cache.view(torch.uint8))
    assert _written_slots(cache) == {s for s in case.slot_mapping.tolist() if s >= 0}
    torch_q, torch_k = reference.qk_norm_rotary(case.positions, *[x.clone() for x in case.split(case.qkv)[:2]],
                                                case.q_weight, case.k_weight, 1e-6, case.cos_sin_cache, head_size,
                                                is_neox)
    assert _rel_err(q, torch_q) < BOUND[dtype]
    torch_cache = _reference_cache(case, is_neox, k_scale, v_scale)
    assert _rel_err(_as_values(cache, k_scale, v_scale), _as_values(torch_cache, k_scale, v_scale)) < BOUND[dtype]


def test_fp8_write_saturates_like_the_cache_write() -> None:
    case = make_case(5, 4, 2, 64, torch.bfloat16, FP8_KV_DTYPE, padding=1, seed=7)
    # k / 0.001 and v / 0.01 go far past 448: both must saturate, not overflow to NaN.
    _, cache = _fused(case, True, 0.001, 0.01)
    _, ref_cache = unfused(case, True, 0.001, 0.01)
    assert torch.equal(cache.view(torch.uint8), ref_cache.view(torch.uint8))
    values = cache.float()
    assert float(values[0].abs().max()) == FP8_KV_MAX and float(values[1].abs().max()) == FP8_KV_MAX
    assert not values.isnan().any()


def test_graph_padded_batch_writes_only_live_tokens() -> None:
    # A padded decode batch: the slot mapping is longer than the live tokens, every padding entry -1.
    case = make_case(8, 4, 2, 64, torch.float32, torch.float32, padding=5, seed=3)
    _, cache = _fused(case, True, 1.0, 1.0)
    assert _written_slots(cache) == set(case.slot_mapping[:3].tolist())


def test_empty_step_and_bad_inputs() -> None:
    case = make_case(3, 4, 2, 64, torch.float32, torch.float32, padding=0)
    q, k, v = case.split(case.qkv)
    empty = qk_norm_rotary_write_kv(case.positions[:0], q[:0], k[:0], v[:0], case.q_weight, case.k_weight, 1e-6,
                                    case.cos_sin_cache, case.kv_cache, case.slot_mapping[:0])
    assert empty.shape[0] == 0 and not case.kv_cache.any()
    with pytest.raises(ValueError, match="match the KV cache"):
        qk_norm_rotary_write_kv(case.positions, q, q, v, case.q_weight, case.k_weight, 1e-6, case.cos_sin_cache,
                                case.kv_cache, case.slot_mapping)
    with pytest.raises(ValueError, match="contiguous last dimension"):
        qk_norm_rotary_write_kv(case.positions, q[:, ::2], k, v, case.q_weight, case.k_weight, 1e-6,
                                case.cos_sin_cache, case.kv_cache, case.slot_mapping)
    with pytest.raises(ValueError, match="full rotary"):
        qk_norm_rotary_write_kv(case.positions, q, k, v, case.q_weight, case.k_weight, 1e-6,
                                case.cos_sin_cache[:, :32], case.kv_cache, case.slot_mapping)
