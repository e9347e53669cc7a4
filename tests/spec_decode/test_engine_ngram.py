"""End to end: n-gram speculative decoding gives exactly the greedy tokens (and logprobs) decoding gives
without it, for every architecture the tiny models cover, through chunked prefill, prefix-cache hits and
preemption; drafts are accepted, counted, and never outlive a stop."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
from engine_cases import ENGINE_DEFAULTS, PROMPTS

from infercore import LLM, SamplingParams
from infercore.outputs import RequestOutput

NGRAM = {"method": "ngram", "num_speculative_tokens": 3}
#: Every architecture of ``infercore.tiny_models`` (the HF oracle's families).
ARCHITECTURES = ["LlamaForCausalLM", "MistralForCausalLM", "Qwen2ForCausalLM", "Qwen3ForCausalLM",
                 "Gemma3ForCausalLM", "Phi3ForCausalLM", "Qwen3MoeForCausalLM", "MixtralForCausalLM"]
#: Prompts sharing a 40-token prefix (prefix hits inside the batch) and repeated spans (n-gram matches).
SHARED = " ".join(["the engine cache block request"] * 8)
ALL_PROMPTS = PROMPTS + [SHARED + " paris", SHARED + " tokyo weather"]
GREEDY = SamplingParams(temperature=0, max_tokens=40, ignore_eos=True, logprobs=3)


def _llm(folder: Path, speculative: bool, **engine_args: Any) -> LLM:
    args = {**ENGINE_DEFAULTS, "model": str(folder), **engine_args}
    if speculative:
        args["speculative_config"] = NGRAM
    return LLM(**args)


def _generate(llm: LLM, params: SamplingParams = GREEDY, prompts: list[str] = ALL_PROMPTS) -> list[RequestOutput]:
    return llm.generate(prompts, params, use_tqdm=False)


def assert_same_outputs(ours: list[RequestOutput], ref: list[RequestOutput]) -> None:
    """Same tokens; same logprobs (within float tolerance) and ranks at every position."""
    for a, b in zip(ours, ref, strict=True):
        assert a.outputs[0].token_ids == b.outputs[0].token_ids, f"prompt {a.prompt!r}"
        for pos, (la, lb) in enumerate(zip(a.outputs[0].logprobs or [], b.outputs[0].logprobs or [], strict=True)):
            assert la.keys() == lb.keys(), f"{a.prompt!r} position {pos}"
            for token_id, lp in la.items():
                assert abs(lp.logprob - lb[token_id].logprob) < 1e-4, f"{a.prompt!r} position {pos}"
                assert lp.rank == lb[token_id].rank, f"{a.prompt!r} position {pos}"


def _spec_stats(llm: LLM) -> Any:
    return llm.llm_engine.engine_core.scheduler.get_stats()


@pytest.mark.parametrize("architecture", ARCHITECTURES)
def test_greedy_ngram_equals_plain_decoding(tiny_model_factory, architecture: str) -> None:
    """Chunked prefill (a 16-token budget), then the same prompts again from the prefix cache."""
    folder = tiny_model_factory(architecture)
    plain = _llm(folder, False, max_num_batched_tokens=16)
    ref = _generate(plain)
    spec = _llm(folder, True, max_num_batched_tokens=16)
    assert_same_outputs(_generate(spec), ref)
    cached = _generate(spec)
    assert_same_outputs(cached, ref)
    assert sum(out.num_cached_tokens for out in cached) >= 64, "the second run should hit the prefix cache"
    stats = _spec_stats(spec)
    assert stats.spec_num_draft_tokens > 0 and stats.spec_num_accepted_tokens > 0, stats
    assert stats.spec_num_accepted_tokens <= stats.spec_num_draft_tokens
    per_pos = stats.spec_num_accepted_tokens_per_pos
    assert sum(per_pos) == stats.spec_num_accepted_tokens and per_pos == sorted(per_pos, reverse=True)
    kv = spec.llm_engine.engine_core.scheduler.kv_cache_manager
    assert kv.num_free_blocks == kv.num_usable_blocks


@pytest.mark.parametrize("architecture", ["Qwen3ForCausalLM", "Gemma3ForCausalLM"])
def test_preemption_keeps_tokens(tiny_model_factory, architecture: str) -> None:
    """10 usable blocks of 16 tokens for requests of up to 8 blocks: they take turns, drafts included."""
    folder = tiny_model_factory(architecture)
    ref = _generate(_llm(folder, False, max_model_len=128))
    spec = _llm(folder, True, num_gpu_blocks_override=11, max_model_len=128)
    assert_same_outputs(_generate(spec), ref)
    scheduler = spec.llm_engine.engine_core.scheduler
    assert scheduler.num_preemptions > 0
    assert _spec_stats(spec).spec_num_accepted_tokens > 0
    assert scheduler.kv_cache_manager.num_free_blocks == scheduler.kv_cache_manager.num_usable_blocks


def test_penalties_and_min_tokens_count_the_drafts(qwen3_folder) -> None:
    """Each verified position is penalised for the drafts before it, and min_tokens holds per position."""
    params = SamplingParams(temperature=0, max_tokens=40, repetition_penalty=1.3, frequency_penalty=0.4,
                            presence_penalty=0.2, min_tokens=12, logprobs=2)
    ref = _generate(_llm(qwen3_folder, False), params)
    spec = _llm(qwen3_folder, True)
    assert_same_outputs(_generate(spec, params), ref)
    assert _spec_stats(spec).spec_num_draft_tokens > 0


def test_a_stop_token_inside_the_accepted_run_ends_the_output(qwen3_folder) -> None:
    """Stop tokens chosen from the middle of the plain outputs: the speculative run stops at the same place."""
    plain = _llm(qwen3_folder, False)
    full = _generate(plain, SamplingParams(temperature=0, max_tokens=40, ignore_eos=True))
    stops = sorted({out.outputs[0].token_ids[20] for out in full})
    params = SamplingParams(temperature=0, max_tokens=40, ignore_eos=True, stop_token_ids=stops)
    ref = _generate(plain, params)
    spec = _llm(qwen3_folder, True)
    got = _generate(spec, params)
    assert [o.outputs[0].token_ids for o in got] == [o.outputs[0].token_ids for o in ref]
    assert all(o.outputs[0].finish_reason == "stop" for o in got)


@pytest.mark.parametrize("max_tokens", [1, 2, 5])
def test_max_tokens_and_max_model_len_cap_the_drafts(qwen3_folder, max_tokens: int) -> None:
    params = SamplingParams(temperature=0, max_tokens=max_tokens, ignore_eos=True)
    ref = _generate(_llm(qwen3_folder, False), params)
    got = _generate(_llm(qwen3_folder, True), params)
    assert [o.outputs[0].token_ids for o in got] == [o.outputs[0].token_ids for o in ref]
    assert all(len(o.outputs[0].token_ids) == max_tokens for o in got)


def test_max_model_len_caps_the_drafts(qwen3_folder) -> None:
    """Every request decodes until the sequence fills max_model_len."""
    long_params = SamplingParams(temperature=0, max_tokens=None, ignore_eos=True)
    short_ref = _generate(_llm(qwen3_folder, False, max_model_len=96), long_params)
    short = _generate(_llm(qwen3_folder, True, max_model_len=96), long_params)
    assert [o.outputs[0].token_ids for o in short] == [o.outputs[0].token_ids for o in short_ref]
    assert all(len(o.prompt_token_ids) + len(o.outputs[0].token_ids) == 96 for o in short)


def test_disable_by_batch_size_turns_drafts_off(qwen3_folder) -> None:
    llm = LLM(**{**ENGINE_DEFAULTS, "model": str(qwen3_folder),
                 "speculative_config": {**NGRAM, "disable_by_batch_size": 1}})
    _generate(llm)
    assert _spec_stats(llm).spec_num_drafts == 0


def test_seeded_requests_do_not_depend_on_their_neighbours(qwen3_folder) -> None:
    """A seeded sampled request verifies with per-position seeds: alone or in a batch, the same tokens."""
    llm = _llm(qwen3_folder, True)
    params = SamplingParams(temperature=0.8, top_p=0.9, max_tokens=40, seed=7, ignore_eos=True)
    alone = _generate(llm, params, [ALL_PROMPTS[7]])[0].outputs[0].token_ids
    in_batch = _generate(llm, params)[7].outputs[0].token_ids
    assert alone == in_batch
    assert _spec_stats(llm).spec_num_draft_tokens > 0


def test_grammar_rows_decode_without_drafts_beside_speculating_rows(qwen3_folder) -> None:
    """A JSON-schema request gets no drafts (its bitmask covers one position per step) and stays valid; the
    free requests in the same steps speculate and give the plain greedy tokens."""
    import json

    import jsonschema

    from infercore.sampling_params import StructuredOutputsParams

    schema = {"type": "object", "properties": {"city": {"type": "string", "enum": ["Paris", "Tokyo"]},
                                               "days": {"type": "integer", "minimum": 0, "maximum": 99}},
              "required": ["city", "days"], "additionalProperties": False}
    constrained = SamplingParams(temperature=0, max_tokens=120,
                                 structured_outputs=StructuredOutputsParams(json=schema))
    free = SamplingParams(temperature=0, max_tokens=40, ignore_eos=True)
    prompts = [ALL_PROMPTS[0], ALL_PROMPTS[7], ALL_PROMPTS[1], ALL_PROMPTS[9]]
    params = [constrained, free, constrained, free]
    ref = _generate(_llm(qwen3_folder, False), free, [prompts[1], prompts[3]])
    spec = _llm(qwen3_folder, True)
    got = spec.generate(prompts, params, use_tqdm=False)
    assert [got[1].outputs[0].token_ids, got[3].outputs[0].token_ids] == [o.outputs[0].token_ids for o in ref]
    for out in (got[0], got[2]):
        assert out.outputs[0].finish_reason == "stop", out.outputs[0].text
        jsonschema.validate(json.loads(out.outputs[0].text), schema)
    assert _spec_stats(spec).spec_num_draft_tokens > 0
