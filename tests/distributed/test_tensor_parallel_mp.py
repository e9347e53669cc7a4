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
