"""Adapters and the scheduler: at most ``max_loras`` distinct adapters run at once (the rest wait their turn),
two adapters never share KV blocks, and the worker keeps at most ``max_cpu_loras`` adapters on the host."""

from __future__ import annotations

import pytest
from hf_oracle import MAX_NEW_TOKENS, NUM_LOGPROBS, PROMPTS, check_against_hf
from lora_cases import ADAPTERS, ENGINE_ARGS, AdapterCase, hf_references, write_adapter

from infercore import LLM, LoRARequest, SamplingParams

FIVE = (*ADAPTERS, AdapterCase("d", 6, 6.0, ("k_proj", "down_proj")), AdapterCase("e", 1, 1.0, ("up_proj",)))


@pytest.fixture(scope="module")
def base(tiny_model_factory):
    return tiny_model_factory("LlamaForCausalLM")


@pytest.fixture(scope="module")
def five_adapters(base, tmp_path_factory) -> list[LoRARequest]:
    root = tmp_path_factory.mktemp("five-loras")
    return [LoRARequest(c.name, i + 1, str(write_adapter(base, root / c.name, c, seed=10 + i)))
            for i, c in enumerate(FIVE)]


def _params() -> SamplingParams:
    return SamplingParams(temperature=0, max_tokens=MAX_NEW_TOKENS, ignore_eos=True, logprobs=NUM_LOGPROBS)


def test_max_loras_two_with_five_adapters_in_flight(base, five_adapters):
    llm = LLM(model=str(base), max_loras=2, max_cpu_loras=3, **ENGINE_ARGS)
    core = llm.llm_engine.engine_core
    tokenizer = llm.get_tokenizer()
    rows = [(tokenizer.encode(PROMPTS[i % len(PROMPTS)]), None if i % 6 == 5 else five_adapters[i % 5])
            for i in range(12)]
    per_step: list[set[int]] = []
    schedule = core.scheduler.schedule

    def recording_schedule():
        so = schedule()
        per_step.append({core.scheduler.requests[r].lora_id for r in so.req_ids} - {0})
        return so

    core.scheduler.schedule = recording_schedule
    try:
        outputs = llm.generate([{"prompt_token_ids": ids} for ids, _ in rows], _params(), use_tqdm=False,
                               lora_request=[lora for _, lora in rows])
        manager = core.executor.runner.lora
        host_cached = len(manager._host)
    finally:
        core.shutdown()
    assert max(len(s) for s in per_step) == 2, "two adapters should share steps, never three"
    assert set().union(*per_step) == {1, 2, 3, 4, 5}
    assert host_cached <= 3
    check_against_hf(outputs, hf_references(base, rows), with_prompt_logprobs=False)


def test_one_prompt_under_two_adapters_shares_no_kv_blocks(base, five_adapters):
    a, b = five_adapters[:2]
    prompt = {"prompt": PROMPTS[4]}
    llm = LLM(model=str(base), max_loras=2, **ENGINE_ARGS)
    try:
        first_a = llm.generate(prompt, _params(), use_tqdm=False, lora_request=a)[0]
        first_b = llm.generate(prompt, _params(), use_tqdm=False, lora_request=b)[0]
        base_row = llm.generate(prompt, _params(), use_tqdm=False)[0]
        again_a = llm.generate(prompt, _params(), use_tqdm=False, lora_request=a)[0]
    finally:
        llm.llm_engine.engine_core.shutdown()
    assert first_a.num_cached_tokens == 0
    assert first_b.num_cached_tokens == 0, "adapter b hit KV computed through adapter a"
    assert base_row.num_cached_tokens == 0, "the base model hit KV computed through an adapter"
    assert again_a.num_cached_tokens >= 32, "the same adapter should hit its own prefix"
    assert again_a.outputs[0].token_ids == first_a.outputs[0].token_ids
    assert first_a.outputs[0].token_ids != first_b.outputs[0].token_ids
