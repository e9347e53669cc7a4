"""The Triton cache write, decode and prefill kernels over an fp8 cache (through the interpreter): the
write stores the reference's bytes, attention matches the reference that quantizes K/V the same way
(tight) and stays near an unquantized cache (loose)."""

from __future__ import annotations

import pytest
import torch
from fp8_cases import UNQUANTIZED_BOUND, relative_error, unquantized_output

from infercore.attention.backend import AttentionRequest
from infercore.attention.reference import paged_attention
from infercore.attention.reference import write_kv as reference_write_kv
from infercore.kv_cache.fp8 import FP8_KV_DTYPE
from infercore.testing.attention_cases import FP8_CASES, AttentionCase, build_step, run_case
from infercore_triton.backend import TritonAttentionBackend
from infercore_triton.decode_attention import DecodeConfig, decode_attention
from infercore_triton.kv_cache_write import write_kv
from infercore_triton.prefill_attention import prefill_attention

TIGHT = 1e-5
SCALE = 32**-0.5
DECODES = AttentionCase("decodes", ((1, 1), (17, 1), (70, 1), (33, 1)), fp8_scales=(0.5, 2.0))
PREFILLS = AttentionCase("prefills", ((30, 30), (40, 8), (48, 16)), fp8_scales=(0.25, 0.5))
MIXED = AttentionCase("mixed", ((30, 30), (17, 1), (40, 8), (70, 1), (48, 16)), fp8_scales=(0.5, 2.0))


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
def test_write_stores_the_reference_bytes_saturating(dtype: torch.dtype) -> None:
    gen = torch.Generator().manual_seed(1)
    k = (torch.randn(24, 2, 32, generator=gen) * 4).to(dtype)
    v = torch.randn(24, 2, 32, generator=gen).to(dtype)
    slots = torch.randperm(64, generator=gen)[:24] + 16
    slots[5] = -1
    cache = torch.zeros(2, 6, 16, 2, 32, dtype=FP8_KV_DTYPE)
    expected = cache.clone()
    # K / 0.01 goes far past 448 for most entries: both must saturate, not overflow to NaN.
    write_kv(k, v, cache, slots, 0.01, 0.7)
    reference_write_kv(k, v, expected, slots, 0.01, 0.7)
    assert torch.equal(cache.view(torch.uint8), expected.view(torch.uint8))
    assert float(cache[0].float().abs().max()) == 448.0 and not cache.float().isnan().any()


def _reference(case: AttentionCase, q, cache, common) -> torch.Tensor:
    return paged_attention(q, cache, common.query_start_loc_cpu, common.seq_lens_cpu, common.block_table, SCALE,
                           torch.zeros_like(q), None, None, common.num_reqs, *case.scales)


@pytest.mark.parametrize(("splits", "block_n"), [(1, 64), (3, 64), (3, 32)])
def test_decode_reads_the_fp8_cache_with_its_scales(splits: int, block_n: int) -> None:
    q, k, v, cache, common = build_step(DECODES, torch.device("cpu"), torch.float32)
    write_kv(k, v, cache, common.slot_mapping, *DECODES.scales)
    out = torch.full_like(q, float("nan"))
    decode_attention(q, cache, common.seq_lens, common.block_table, SCALE, out, num_splits=splits,
                     k_scale=DECODES.scales[0], v_scale=DECODES.scales[1],
                     config=DecodeConfig(block_n=block_n))
    assert relative_error(out, _reference(DECODES, q, cache, common)) < TIGHT
    error = relative_error(out, unquantized_output(DECODES, torch.float32))
    assert 1e-4 < error < UNQUANTIZED_BOUND


def test_prefill_reads_the_fp8_cache_with_its_scales() -> None:
    q, k, v, cache, common = build_step(PREFILLS, torch.device("cpu"), torch.float32)
    write_kv(k, v, cache, common.slot_mapping, *PREFILLS.scales)
    out = torch.full_like(q, float("nan"))
    prefill_attention(q, cache, common.query_start_loc, common.seq_lens, common.block_table, SCALE, out,
                      common.max_query_len, k_scale=PREFILLS.scales[0], v_scale=PREFILLS.scales[1])
    assert relative_error(out, _reference(PREFILLS, q, cache, common)) < TIGHT
    error = relative_error(out, unquantized_output(PREFILLS, torch.float32))
    assert 1e-4 < error < UNQUANTIZED_BOUND


def test_uniform_launches_read_the_fp8_cache_with_its_scales() -> None:
    """A mixed step as a whole-step graph runs it: decodes found through the query starts, prefill programs
    over flat token ranges."""
    q, k, v, cache, common = build_step(MIXED, torch.device("cpu"), torch.float32)
    write_kv(k, v, cache, common.slot_mapping, *MIXED.scales)
    out = torch.full_like(q, float("nan"))
    decode_attention(q, cache, common.seq_lens, common.block_table, SCALE, out, k_scale=MIXED.scales[0],
                     v_scale=MIXED.scales[1], query_start_loc=common.query_start_loc)
    prefill_attention(q, cache, common.query_start_loc, common.seq_lens, common.block_table, SCALE, out, 0,
                      k_scale=MIXED.scales[0], v_scale=MIXED.scales[1], uniform_grid=True)
    assert relative_error(out, _reference(MIXED, q, cache, common)) < TIGHT


@pytest.mark.parametrize("case", FP8_CASES, ids=[c.name for c in FP8_CASES])
def test_backend_matches_the_reference_on_fp8_cases(case: AttentionCase) -> None:
    result = run_case(TritonAttentionBackend, case, torch.device("cpu"), torch.float32)
    assert result.cache_error == 0.0 and result.output_error < TIGHT


def test_backend_accepts_an_fp8_cache_and_names_what_it_refuses() -> None:
    request = AttentionRequest(num_heads=4, num_kv_heads=2, head_size=32, dtype=torch.bfloat16,
                               kv_cache_dtype=FP8_KV_DTYPE, block_size=16, device_type="cpu")
    assert TritonAttentionBackend.validate(request) == []
    odd = AttentionRequest(num_heads=4, num_kv_heads=2, head_size=32, dtype=torch.bfloat16,
                           kv_cache_dtype=torch.float8_e5m2, block_size=16, device_type="cpu")
    assert any("float8_e4m3fn" in reason for reason in TritonAttentionBackend.validate(odd))
    on_xpu = AttentionRequest(num_heads=4, num_kv_heads=2, head_size=32, dtype=torch.bfloat16,
                              kv_cache_dtype=FP8_KV_DTYPE, block_size=16, device_type="xpu")
    assert any("compute capability 8.9" in reason for reason in TritonAttentionBackend.validate(on_xpu))
