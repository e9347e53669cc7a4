"""Greedy tokens and logprobs of the MoE models match HF transformers, through chunked prefill and prefix hits."""

from __future__ import annotations

import pytest
from hf_oracle import CHUNK_BUDGET, PROMPTS, check_runs_against_hf, generate_chunked_then_cached
from moe_cases import ENGINE_ARGS, MOE_CASES

from infercore import LLM

#: One more prompt for the routers: words the others do not use.
MOE_PROMPTS = [*PROMPTS, "Tokyo temperature in celsius? search the query and call the function with arguments"]


@pytest.mark.parametrize("case", list(MOE_CASES))
def test_moe_greedy_matches_hf_with_chunked_prefill_and_prefix_hits(tiny_model_factory, case: str) -> None:
    architecture, overrides = MOE_CASES[case]
    folder = tiny_model_factory(architecture, **overrides)
    llm = LLM(model=str(folder), **{**ENGINE_ARGS, "max_num_batched_tokens": CHUNK_BUDGET})
    chunked, cached = generate_chunked_then_cached(llm, MOE_PROMPTS)
    check_runs_against_hf(folder, chunked, cached)
