"""The Triton kernels over an fp8 KV cache on the GPU at real shapes (contexts to 8k): the cache write
stores the reference's bytes, decode and prefill match the reference that quantizes K/V the same way
and stay near the unquantized cache; the backend passes the conformance kit's fp8 cases."""

from __future__ import annotations

import pytest
import torch
from gpu_marks import requires_gpu
from triton_cases import TOLERANCE, make_case, reference_attention, rel_err

from infercore.attention.reference import paged_attention
from infercore.attention.reference import write_kv as reference_write_kv
from infercore.kv_cache.fp8 import FP8_KV_DTYPE, quantize_kv
from infercore.testing.attention_cases import FP8_CASES, run_case
from infercore_triton.backend import TritonAttentionBackend, choose_num_splits
from infercore_triton.decode_attention import DecodeConfig, decode_attention
from infercore_triton.kv_cache_write import write_kv
from infercore_triton.prefill_attention import prefill_attention

pytestmark = requires_gpu
K_SCALE, V_SCALE = 0.02, 0.05
#: fp8 against the unquantized cache (norm-relative): e4m3 keeps 3 mantissa bits.
UNQUANTIZED_BOUND = 0.06


def _fp8_pair(case):  # noqa: ANN001, ANN202
    """The case's cache quantized (its cached prefixes) twice: one for the kernels, one for the reference,
    each with the step's K/V written by its own writer."""
    cache = torch.stack([quantize_kv(case.kv_cache[0], K_SCALE), quantize_kv(case.kv_cache[1], V_SCALE)])
    ref_cache = cache.clone()
    write_kv(case.k, case.v, cache, case.slot_mapping, K_SCALE, V_SCALE)
    reference_write_kv(case.k.float(), case.v.float(), ref_cache, case.slot_mapping, K_SCALE, V_SCALE)
    return cache, ref_cache


def _quantized_reference(case, ref_cache: torch.Tensor, scale: float) -> torch.Tensor:  # noqa: ANN001
    out = torch.zeros(case.q.shape, dtype=torch.float32, device="cuda")
    return paged_attention(case.q.float(), ref_cache, case.query_start_loc, case.seq_lens, case.block_table, scale,
                           out, None, None, None, K_SCALE, V_SCALE)


@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float16])
def test_fp8_write_stores_the_reference_bytes(dtype: torch.dtype) -> None:
    case = make_case([300, 4100], [300, 1], 8, 8, 128, 16, dtype, "cuda", seed=3)
    case.k.mul_(20)  # many |k| / K_SCALE beyond 448: saturation on both sides
    cache, ref_cache = _fp8_pair(case)
    assert cache.dtype == FP8_KV_DTYPE
    assert torch.equal(cache.view(torch.uint8), ref_cache.view(torch.uint8))


@pytest.mark.parametrize("k_words", [False, True])
@pytest.mark.parametrize("head_size", [64, 128])
@pytest.mark.parametrize("group", [1, 4, 8])
def test_fp8_decode_long_contexts(head_size: int, group: int, k_words: bool) -> None:
    # K read as bytes (the default) or as 32-bit words of four e4m3 values; V as bytes.
    config = DecodeConfig(fp8_k_words=k_words)
    seq_lens = [1, 77, 1024, 3001, 8192, 513]
    case = make_case(seq_lens, [1] * len(seq_lens), 4 * group, 4, head_size, 16, torch.bfloat16, "cuda",
                     seed=group + head_size)
    cache, ref_cache = _fp8_pair(case)
    scale = head_size**-0.5
    expected = _quantized_reference(case, ref_cache, scale)
    unquantized = reference_attention(case, scale, dtype=torch.float32, device="cuda")
    for splits in (1, choose_num_splits(len(seq_lens), 4, 8192, 132)):
        out = torch.full_like(case.q, float("nan"))
        decode_attention(case.q, cache, case.seq_lens, case.block_table, scale, out, num_splits=splits,
                         k_scale=K_SCALE, v_scale=V_SCALE, config=config)
        assert rel_err(out, expected) < TOLERANCE[torch.bfloat16], f"{splits} splits"
        assert rel_err(out, unquantized) < UNQUANTIZED_BOUND, f"{splits} splits"


@pytest.mark.parametrize("group", [1, 2, 8])
def test_fp8_prefill_with_cached_prefixes(group: int) -> None:
    seq_lens, query_lens = [2048, 1500, 4096, 9], [2048, 1000, 512, 1]
    case = make_case(seq_lens, query_lens, 2 * group, 2, 128, 16, torch.bfloat16, "cuda", seed=group)
    cache, ref_cache = _fp8_pair(case)
    scale = 128**-0.5
    out = torch.full_like(case.q, float("nan"))
    prefill_attention(case.q, cache, case.query_start_loc, case.seq_lens, case.block_table, scale, out,
                      case.max_query_len, k_scale=K_SCALE, v_scale=V_SCALE)
    assert rel_err(out, _quantized_reference(case, ref_cache, scale)) < TOLERANCE[torch.bfloat16]
    unquantized = reference_attention(case, scale, dtype=torch.float32, device="cuda")
    assert rel_err(out, unquantized) < UNQUANTIZED_BOUND


@pytest.mark.parametrize("case", FP8_CASES, ids=[c.name for c in FP8_CASES])
def test_fp8_conformance_cases(case) -> None:  # noqa: ANN001
    result = run_case(TritonAttentionBackend, case, torch.device("cuda"), torch.bfloat16)
    assert result.cache_error == 0.0 and result.output_error < 3e-2
