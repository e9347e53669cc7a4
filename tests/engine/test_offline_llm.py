"""The offline LLM API around the engine: failed batches leave nothing behind."""

from __future__ import annotations

import pytest
from engine_cases import GREEDY_32, PROMPTS, generate_tokens

from infercore import SamplingParams
from infercore.frontend.input_processor import InputError


def test_rejected_prompt_leaves_no_requests_behind(make_llm) -> None:
    llm = make_llm(max_model_len=64)
    engine = llm.llm_engine
    kv = engine.engine_core.scheduler.kv_cache_manager
    expected = generate_tokens(llm, PROMPTS[:2])
    free_at_start = kv.num_free_blocks
    # The third prompt plus max_tokens does not fit max_model_len: the whole call fails.
    with pytest.raises(InputError, match="max_model_len"):
        llm.generate([PROMPTS[0], PROMPTS[1], PROMPTS[7]], GREEDY_32, use_tqdm=False)
    assert not engine.has_unfinished_requests()
    assert kv.num_free_blocks == free_at_start
    assert generate_tokens(llm, PROMPTS[:2]) == expected
    with pytest.raises(InputError, match="vocabulary"):
        llm.generate(["hello", [0, 10**6]], SamplingParams(max_tokens=4), use_tqdm=False)
    assert not engine.has_unfinished_requests()


def test_stats_before_and_after_steps(make_llm) -> None:
    llm = make_llm(num_gpu_blocks_override=50)
    stats = llm.llm_engine.last_stats
    assert stats.num_total_blocks == 49 and stats.num_free_blocks == 49 and stats.num_running == 0
    llm.llm_engine.add_request("s", PROMPTS[7], GREEDY_32)
    llm.llm_engine.step()
    stats = llm.llm_engine.last_stats
    assert stats.num_running == 1 and stats.num_free_blocks < 49 and stats.prefix_cache_queries > 0


def test_reset_prefix_cache_makes_the_next_run_compute_its_prompts(make_llm) -> None:
    llm = make_llm(enable_prefix_caching=True)
    prompt = {"prompt_token_ids": list(range(5, 45))}
    params = SamplingParams(max_tokens=4, temperature=0.0)
    first = llm.generate([prompt], params, use_tqdm=False)[0]
    again = llm.generate([prompt], params, use_tqdm=False)[0]
    assert first.num_cached_tokens == 0 and again.num_cached_tokens > 0
    assert llm.reset_prefix_cache()
    fresh = llm.generate([prompt], params, use_tqdm=False)[0]
    assert fresh.num_cached_tokens == 0
    assert fresh.outputs[0].token_ids == first.outputs[0].token_ids
