"""End to end: the model-based proposers (a draft model, an EAGLE-3 head with random weights, the target
as its own draft) give exactly the greedy tokens decoding gives without speculation, for every
architecture, through chunked prefill, prefix-cache hits, preemption, async scheduling and a JSON-schema
grammar; the self-draft accepts every draft."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
from engine_cases import ENGINE_DEFAULTS
from test_engine_ngram import ALL_PROMPTS, ARCHITECTURES, NGRAM, assert_same_outputs

from infercore import LLM, SamplingParams
from infercore.outputs import RequestOutput
from infercore.spec_decode.tiny_heads import build_eagle3_head_folder

GREEDY = SamplingParams(temperature=0, max_tokens=24, ignore_eos=True, logprobs=2)
K = 3


@pytest.fixture(scope="module")
def draft_folder(tiny_model_factory) -> Path:
    """Another architecture with other weights and the same tokenizer: a draft for every target."""
    return tiny_model_factory("LlamaForCausalLM", seed=1)


def _configs(folder: Path, draft: Path, head: Path) -> dict[str, dict[str, Any]]:
    return {
        "ngram": NGRAM,
        "draft_model": {"method": "draft_model", "model": str(draft), "num_speculative_tokens": K},
        "eagle3": {"method": "eagle3", "model": str(head), "num_speculative_tokens": K},
        "self": {"method": "draft_model", "model": str(folder), "num_speculative_tokens": K},
    }


def _llm(folder: Path, spec: dict[str, Any] | None, **engine_args: Any) -> LLM:
    args = {**ENGINE_DEFAULTS, "model": str(folder), **engine_args}
    if spec is not None:
        args["speculative_config"] = spec
    return LLM(**args)


def _generate(llm: LLM, params: Any = GREEDY, prompts: list[str] = ALL_PROMPTS) -> list[RequestOutput]:
    return llm.generate(prompts, params, use_tqdm=False)


def _stats(llm: LLM) -> Any:
    return llm.llm_engine.engine_core.scheduler.get_stats()


def _head(tmp_path_factory: pytest.TempPathFactory, folder: Path) -> Path:
    return build_eagle3_head_folder(tmp_path_factory.mktemp("eagle3"), folder, draft_vocab_size=96)


#: Qwen3 (one KV group) and Gemma 3 (sliding and global groups) in CI's quick set, the rest heavy.
QUICK = ("Qwen3ForCausalLM", "Gemma3ForCausalLM")


@pytest.mark.parametrize("architecture", [a if a in QUICK else pytest.param(a, marks=pytest.mark.heavy)
                                          for a in ARCHITECTURES])
def test_model_drafts_equal_plain_decoding(tiny_model_factory, tmp_path_factory, draft_folder,
                                           architecture: str) -> None:
    """A 16-token budget (chunked prefill), then the same prompts again from the prefix cache."""
    folder = tiny_model_factory(architecture)
    ref = _generate(_llm(folder, None, max_num_batched_tokens=16))
    configs = _configs(folder, draft_folder, _head(tmp_path_factory, folder))
    for name in ("draft_model", "eagle3", "self"):
        llm = _llm(folder, configs[name], max_num_batched_tokens=16)
        assert_same_outputs(_generate(llm), ref)
        cached = _generate(llm)
        assert_same_outputs(cached, ref)
        assert sum(out.num_cached_tokens for out in cached) >= 64, name
        stats = _stats(llm)
        assert stats.spec_num_draft_tokens > 0, name
        if name == "self":
            assert stats.spec_num_accepted_tokens == stats.spec_num_draft_tokens, stats
        kv = llm.llm_engine.engine_core.scheduler.kv_cache_manager
        assert kv.num_free_blocks == kv.num_usable_blocks


@pytest.mark.parametrize("architecture", ["Qwen3ForCausalLM", "Gemma3ForCausalLM"])
def test_model_drafts_through_preemption(tiny_model_factory, tmp_path_factory, draft_folder,
                                         architecture: str) -> None:
    """11 blocks of 16 tokens for requests of up to 8 blocks: requests are preempted and recomputed,
    the draft's cache with them; the self-draft still accepts everything."""
    folder = tiny_model_factory(architecture)
    ref = _generate(_llm(folder, None, max_model_len=128))
    configs = _configs(folder, draft_folder, _head(tmp_path_factory, folder))
    for name in ("draft_model", "eagle3", "self"):
        llm = _llm(folder, configs[name], num_gpu_blocks_override=11, max_model_len=128)
        assert_same_outputs(_generate(llm), ref)
        assert llm.llm_engine.engine_core.scheduler.num_preemptions > 0, name
        stats = _stats(llm)
        if name == "self":
            assert stats.spec_num_accepted_tokens == stats.spec_num_draft_tokens > 0, stats


def test_async_scheduling_and_grammar_rows_keep_the_tokens(qwen3_folder, tmp_path_factory, draft_folder) -> None:
    """Async scheduling asked for, JSON-schema requests beside free ones: the free requests give the plain
    greedy tokens, the constrained ones valid JSON equal to the plain run's. Then free requests only, with
    ``disable_by_batch_size=3``: steps of 3 or more requests overlap (no drafts), smaller ones speculate."""
    import jsonschema

    from infercore.sampling_params import StructuredOutputsParams

    schema = {"type": "object", "properties": {"city": {"type": "string", "enum": ["Paris", "Tokyo"]},
                                               "days": {"type": "integer", "minimum": 0, "maximum": 99}},
              "required": ["city", "days"], "additionalProperties": False}
    constrained = SamplingParams(temperature=0, max_tokens=120, structured_outputs=StructuredOutputsParams(json=schema))
    prompts = [ALL_PROMPTS[0], ALL_PROMPTS[7], ALL_PROMPTS[1], ALL_PROMPTS[9]]
    params = [constrained, GREEDY, constrained, GREEDY]
    ref = _llm(qwen3_folder, None, async_scheduling=True).generate(prompts, params, use_tqdm=False)
    configs = _configs(qwen3_folder, draft_folder, _head(tmp_path_factory, qwen3_folder))
    for name in ("ngram", "draft_model", "eagle3", "self"):
        llm = _llm(qwen3_folder, configs[name], async_scheduling=True)
        got = llm.generate(prompts, params, use_tqdm=False)
        assert [o.outputs[0].token_ids for o in got] == [o.outputs[0].token_ids for o in ref], name
        for out in (got[0], got[2]):
            jsonschema.validate(json.loads(out.outputs[0].text), schema)
        assert _stats(llm).spec_num_draft_tokens > 0, name
    free = [SamplingParams(temperature=0, max_tokens=8 * (i + 1), ignore_eos=True) for i in range(4)]
    plain = _llm(qwen3_folder, None, async_scheduling=True).generate(ALL_PROMPTS[:4], free, use_tqdm=False)
    for name in ("ngram", "draft_model", "eagle3", "self"):
        llm = _llm(qwen3_folder, {**configs[name], "disable_by_batch_size": 3}, async_scheduling=True)
        assert llm.llm_engine.engine_core.async_mode
        got = llm.generate(ALL_PROMPTS[:4], free, use_tqdm=False)
        assert [o.outputs[0].token_ids for o in got] == [o.outputs[0].token_ids for o in plain], name
        stats = _stats(llm)
        assert stats.spec_num_draft_tokens > 0, name
        if name == "self":
            assert stats.spec_num_accepted_tokens == stats.spec_num_draft_tokens, stats


def test_eagle1_head_equals_plain_decoding(qwen3_folder, tmp_path) -> None:
    """An EAGLE-1 head (``fc`` over the token's embedding and the target's last state, ``layers.0``)."""
    head = build_eagle3_head_folder(tmp_path / "eagle1", qwen3_folder, eagle3=False)
    ref = _generate(_llm(qwen3_folder, None, max_num_batched_tokens=16))
    llm = _llm(qwen3_folder, {"method": "eagle", "model": str(head), "num_speculative_tokens": K},
               max_num_batched_tokens=16)
    assert_same_outputs(_generate(llm), ref)
    assert _stats(llm).spec_num_draft_tokens > 0


def test_short_rotary_tables_of_drafts_are_raised_to_max_model_len(qwen3_folder, tiny_model_factory, tmp_path) -> None:
    """A draft (or head) whose config says 32 positions still drafts at every position of the target."""
    import json

    draft = tiny_model_factory("LlamaForCausalLM", seed=1, max_position_embeddings=32)
    head = build_eagle3_head_folder(tmp_path / "head", qwen3_folder)
    config = json.loads((head / "config.json").read_text())
    (head / "config.json").write_text(json.dumps({**config, "max_position_embeddings": 32}))
    ref = _generate(_llm(qwen3_folder, None))
    for spec in ({"method": "draft_model", "model": str(draft), "num_speculative_tokens": K},
                 {"method": "eagle3", "model": str(head), "num_speculative_tokens": K}):
        llm = _llm(qwen3_folder, spec)
        assert_same_outputs(_generate(llm), ref)
        assert _stats(llm).spec_num_draft_tokens > 0
