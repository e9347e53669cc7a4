"""The CPU backend over an fp8 cache: against the reference quantizing K/V the same way (tight) and
against an unquantized cache (loose)."""

from __future__ import annotations

import dataclasses

import pytest
import torch
from fp8_cases import UNQUANTIZED_BOUND, relative_error, unquantized_output

from infercore.attention.spec import AttentionLayerSpec
from infercore.kv_cache.spec import KVCacheSpec
from infercore.testing.attention_cases import FP8_CASES, build_step, layer_spec, run_case
from infercore_cpu.attention import TorchPagedAttentionBackend, TorchPagedAttentionImpl

TIGHT = {torch.float32: 1e-5, torch.bfloat16: 1e-2}


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
@pytest.mark.parametrize("case", FP8_CASES, ids=[c.name for c in FP8_CASES])
def test_cpu_fp8_matches_the_quantizing_reference(case, dtype: torch.dtype) -> None:
    result = run_case(TorchPagedAttentionBackend, case, torch.device("cpu"), dtype)
    assert result.cache_error == 0.0, "the stored fp8 bytes differ from the reference's"
    assert result.output_error < TIGHT[dtype]


@pytest.mark.parametrize("case", [c for c in FP8_CASES if c.scales[0] >= 0.5], ids=lambda c: c.name)
def test_cpu_fp8_stays_near_the_unquantized_cache(case) -> None:
    q, k, v, cache, common = build_step(case, torch.device("cpu"), torch.float32)
    backend = TorchPagedAttentionBackend
    builder = backend.get_builder_cls()(KVCacheSpec(16, 2, 32, cache.dtype), torch.device("cpu"), 64, 512)
    out = torch.zeros_like(q)
    backend.get_impl_cls()(layer_spec(case, torch.float32)).forward(q, k, v, cache, builder.build(common), out)
    n = common.num_actual_tokens
    error = relative_error(out[:n], unquantized_output(case, torch.float32))
    assert 1e-4 < error < UNQUANTIZED_BOUND, f"fp8 against unquantized: {error:.3f}"


class _ScaleBlindImpl(TorchPagedAttentionImpl):
    """Stores and reads the fp8 cache as if every scale were 1.0."""

    def __init__(self, spec: AttentionLayerSpec) -> None:
        super().__init__(dataclasses.replace(spec, k_scale=1.0, v_scale=1.0))


class _ScaleBlindBackend(TorchPagedAttentionBackend):
    name = "scale_blind"

    @staticmethod
    def get_impl_cls() -> type[TorchPagedAttentionImpl]:
        return _ScaleBlindImpl


@pytest.mark.parametrize("case", [c for c in FP8_CASES if c.scales != (1.0, 1.0)], ids=lambda c: c.name)
def test_the_kit_fails_a_backend_that_ignores_the_scales(case) -> None:
    result = run_case(_ScaleBlindBackend, case, torch.device("cpu"), torch.float32)
    assert result.cache_error > 0.1 and result.output_error > 0.1
