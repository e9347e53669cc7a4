"""Two pipeline stages (``mp`` executor, gloo on the CPU) give the greedy tokens of one, for every
architecture: Gemma 3's three layers split 2 + 1 (and its sliding and global layers land on different
stages, so each stage caches only its group's layers), the MoE families' experts, and the dense
families. The prompts run with chunked prefill and a prefix-cache hit; one case adds async scheduling
and one two tensor-parallel ranks per stage."""

from __future__ import annotations

import pytest
from pp_cases import greedy_tokens

from infercore.tiny_models import TINY_ARCHITECTURES

#: By default: uneven layers with hybrid KV groups (Gemma 3), and experts (Qwen3-MoE); the rest are heavy.
DEFAULT = ("Gemma3ForCausalLM", "Qwen3MoeForCausalLM")
CASES = [pytest.param(arch, marks=() if arch in DEFAULT else pytest.mark.heavy) for arch in TINY_ARCHITECTURES]


@pytest.mark.parametrize("architecture", CASES)
def test_pp2_matches_pp1(tiny_model_factory, architecture: str) -> None:
    model = tiny_model_factory(architecture)
    expected = greedy_tokens(model)
    assert greedy_tokens(model, pipeline_parallel_size=2, distributed_executor_backend="mp") == expected


@pytest.mark.heavy
def test_pp2_async_scheduling_matches_pp1(tiny_model_factory) -> None:
    model = tiny_model_factory("Qwen3ForCausalLM")
    expected = greedy_tokens(model)
    assert greedy_tokens(model, pipeline_parallel_size=2, async_scheduling=True) == expected


@pytest.mark.heavy
def test_pp2_tp2_matches_pp1(tiny_model_factory) -> None:
    model = tiny_model_factory("Qwen3MoeForCausalLM")
    expected = greedy_tokens(model)
    assert greedy_tokens(model, pipeline_parallel_size=2, tensor_parallel_size=2) == expected


@pytest.mark.heavy
def test_pp2_tp2_expert_parallel_matches_pp1(tiny_model_factory) -> None:
    model = tiny_model_factory("MixtralForCausalLM")
    expected = greedy_tokens(model)
    assert greedy_tokens(model, pipeline_parallel_size=2, tensor_parallel_size=2,
                         enable_expert_parallel=True) == expected
