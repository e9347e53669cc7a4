"""Greedy tokens and logprobs of Gemma 3 and Phi-3 match HF transformers, through chunked prefill and
prefix hits, with sliding windows shorter than the sequences."""

from __future__ import annotations

import pytest
from dense_cases import CASES, ENGINE_ARGS, FREEING_WINDOW
from hf_oracle import CHUNK_BUDGET, PROMPTS, check_runs_against_hf, generate_chunked_then_cached

from infercore import LLM


@pytest.mark.parametrize("case", list(CASES))
def test_greedy_matches_hf_with_chunked_prefill_and_prefix_hits(case_folder, case: str) -> None:
    folder = case_folder(case)
    llm = LLM(model=str(folder), **{**ENGINE_ARGS, "max_num_batched_tokens": CHUNK_BUDGET})
    assert llm.llm_engine.engine_core.scheduler.kv_cache_manager.sliding_window == FREEING_WINDOW[case]
    chunked, cached = generate_chunked_then_cached(llm, PROMPTS)
    check_runs_against_hf(folder, chunked, cached)
