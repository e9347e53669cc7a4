"""Greedy tokens do not depend on how the engine schedules: prefix caching, chunking, preemption, batching."""

from __future__ import annotations

import pytest
from engine_cases import ENGINE_DEFAULTS, PROMPTS, generate_tokens

from infercore import LLM, SamplingParams

#: Prompts that share a 40-token prefix, so prefix caching has whole blocks to share within a batch.
SHARED = " ".join(["the engine cache block request"] * 8)
CACHE_PROMPTS = PROMPTS + [SHARED + " paris", SHARED + " tokyo weather"]


@pytest.fixture(scope="module")
def reference(qwen3_folder) -> list[list[int]]:
    """Tokens of every prompt run alone, with prefix caching off."""
    llm = LLM(**{**ENGINE_DEFAULTS, "model": str(qwen3_folder), "enable_prefix_caching": False})
    return [generate_tokens(llm, [p])[0] for p in CACHE_PROMPTS]


def test_batch_equals_one_at_a_time(make_llm, reference) -> None:
    assert generate_tokens(make_llm(enable_prefix_caching=False), CACHE_PROMPTS) == reference


def test_prefix_cache_hits_keep_tokens(make_llm, reference) -> None:
    llm = make_llm(enable_prefix_caching=True)
    assert generate_tokens(llm, CACHE_PROMPTS) == reference
    first_hits = llm.llm_engine.last_stats.prefix_cache_hits
    assert first_hits > 0, "the prompts sharing a prefix should have shared blocks in the first pass"
    assert generate_tokens(llm, CACHE_PROMPTS) == reference
    second_hits = llm.llm_engine.last_stats.prefix_cache_hits - first_hits
    # Every full block of every prompt (but the last token) is now cached.
    lengths = [len(llm.get_tokenizer().encode(p)) for p in CACHE_PROMPTS]
    assert second_hits == sum((n - 1) // 16 * 16 for n in lengths)


def test_chunked_prefill_keeps_tokens(make_llm, reference) -> None:
    llm = make_llm(max_num_batched_tokens=8)
    assert llm.llm_engine.engine_core.scheduler.max_num_batched_tokens == 8
    lengths = [len(llm.get_tokenizer().encode(p)) for p in CACHE_PROMPTS]
    assert sum(n > 8 for n in lengths) >= 7, "most prompts should need several chunks"
    assert generate_tokens(llm, CACHE_PROMPTS) == reference


def test_preemption_keeps_tokens(make_llm, reference) -> None:
    # 10 usable blocks of 16 tokens; each request needs up to 8 of them, so they take turns.
    llm = make_llm(num_gpu_blocks_override=11, max_model_len=128)
    assert generate_tokens(llm, CACHE_PROMPTS) == reference
    scheduler = llm.llm_engine.engine_core.scheduler
    assert scheduler.num_preemptions > 0
    assert scheduler.kv_cache_manager.num_free_blocks == scheduler.kv_cache_manager.num_usable_blocks


def assert_logprobs_equal(ours, ref, where: str) -> None:
    assert (ours is None) == (ref is None), where
    for pos, (a, b) in enumerate(zip(ours or [], ref or [], strict=True)):
        if b is None:
            assert a is None, where
            continue
        assert a.keys() == b.keys(), f"{where} position {pos}"
        for token_id, lp in a.items():
            assert abs(lp.logprob - b[token_id].logprob) < 1e-4 and lp.rank == b[token_id].rank, f"{where} {pos}"


def test_chunking_and_preemption_keep_logprobs(make_llm) -> None:
    """Prompt logprobs arrive one chunk at a time and are recomputed after a preemption."""
    params = SamplingParams(temperature=0, max_tokens=24, ignore_eos=True, logprobs=3, prompt_logprobs=3)
    ref = make_llm().generate(PROMPTS, params, use_tqdm=False)
    llm = make_llm(num_gpu_blocks_override=11, max_model_len=128, max_num_batched_tokens=8)
    got = llm.generate(PROMPTS, params, use_tqdm=False)
    assert llm.llm_engine.engine_core.scheduler.num_preemptions > 0
    for ours, theirs in zip(got, ref, strict=True):
        assert ours.outputs[0].token_ids == theirs.outputs[0].token_ids
        assert_logprobs_equal(ours.outputs[0].logprobs, theirs.outputs[0].logprobs, f"{ours.prompt!r} outputs")
        assert_logprobs_equal(ours.prompt_logprobs, theirs.prompt_logprobs, f"{ours.prompt!r} prompt")
