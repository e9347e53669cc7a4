"""Tensor parallelism over the ``mp`` executor (gloo on CPU) gives the greedy tokens of one device."""

from __future__ import annotations

import pytest
from distributed_cases import greedy_tokens

# (architecture, config overrides): Mistral runs with one KV head, fewer than the two ranks, so its
# KV head is replicated on both.
CASES = [
    ("LlamaForCausalLM", {}),
    ("MistralForCausalLM", {"num_key_value_heads": 1}),
    ("Qwen2ForCausalLM", {}),
    ("Qwen3ForCausalLM", {}),
]


@pytest.mark.parametrize(("architecture", "overrides"), CASES, ids=[c[0] for c in CASES])
def test_tp2_matches_tp1(tiny_model_factory, architecture: str, overrides: dict) -> None:
    model = tiny_model_factory(architecture, **overrides)
    expected = greedy_tokens(model)
    got = greedy_tokens(model, tensor_parallel_size=2, distributed_executor_backend="mp")
    assert got == expected
    assert all(len(tokens) == 12 for tokens in got)


def test_tp2_overlapped_steps_match_tp1(tiny_model_factory) -> None:
    """Async scheduling (the default on GPUs): EngineCore launches step N+1 through the executor's
    future before it folds in step N, on every rank."""
    model = tiny_model_factory("Qwen3ForCausalLM")
    expected = greedy_tokens(model)
    assert greedy_tokens(model, tensor_parallel_size=2, async_scheduling=True) == expected
