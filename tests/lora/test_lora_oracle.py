"""The CI oracle of multi-LoRA serving: one generate call over a batch that mixes base rows with rows of
three adapters (ranks 2, 4 and 8; some rows share one) gives, row for row, HF + PEFT's greedy tokens and
logprobs for that row's adapter (merged into HF's weights) — through chunked prefill, prefix-cache hits,
preemption and async scheduling."""

from __future__ import annotations

import pytest
from hf_oracle import CHUNK_BUDGET, MAX_NEW_TOKENS, NUM_LOGPROBS, PROMPTS, check_against_hf
from lora_cases import ENGINE_ARGS, hf_references, write_adapters

from infercore import LLM, SamplingParams

#: (prompt index, adapter name or None) of each row: base rows, rows sharing an adapter, one prompt
#: under two adapters and the base model.
ROWS = [(0, None), (1, "a"), (2, "b"), (3, "c"), (4, "a"), (1, None), (4, "b"), (0, "c")]

ARCHITECTURES = ["LlamaForCausalLM", "Qwen3ForCausalLM", "MistralForCausalLM", "Qwen2ForCausalLM",
                 "Gemma3ForCausalLM", "Phi3ForCausalLM"]


@pytest.fixture(scope="module", params=ARCHITECTURES)
def case(request, tiny_model_factory, tmp_path_factory):
    """(base folder, adapters, HF references of ROWS) of one architecture."""
    architecture = request.param
    base = tiny_model_factory(architecture)
    adapters = write_adapters(base, tmp_path_factory.mktemp(f"lora-{architecture}"),
                              phi3=architecture == "Phi3ForCausalLM")
    llm = LLM(model=str(base), **ENGINE_ARGS)
    tokenizer = llm.get_tokenizer()
    llm.llm_engine.engine_core.shutdown()
    rows = [(tokenizer.encode(PROMPTS[p]), None if name is None else adapters[name]) for p, name in ROWS]
    return base, adapters, rows, hf_references(base, rows)


def _generate(llm: LLM, rows: list, prompt_logprobs: bool = False) -> list:
    params = SamplingParams(temperature=0, max_tokens=MAX_NEW_TOKENS, ignore_eos=True, logprobs=NUM_LOGPROBS,
                            prompt_logprobs=NUM_LOGPROBS if prompt_logprobs else None)
    return llm.generate([{"prompt_token_ids": ids} for ids, _ in rows], params, use_tqdm=False,
                        lora_request=[lora for _, lora in rows])


def test_mixed_batch_matches_hf_peft_through_chunked_prefill_and_prefix_hits(case):
    base, _, rows, refs = case
    llm = LLM(model=str(base), max_num_batched_tokens=CHUNK_BUDGET, max_loras=3, **ENGINE_ARGS)
    try:
        chunked = _generate(llm, rows, prompt_logprobs=True)
        cached = _generate(llm, rows)
    finally:
        llm.llm_engine.engine_core.shutdown()
    check_against_hf(chunked, refs, with_prompt_logprobs=True)
    check_against_hf(cached, refs, with_prompt_logprobs=False)
    assert sum(o.num_cached_tokens for o in cached) >= 32, "the second run should hit the prefix cache"
    # The adapters change the model: a prompt's rows under different adapters differ from the base row.
    assert chunked[1].outputs[0].token_ids != chunked[5].outputs[0].token_ids


@pytest.mark.parametrize("mode", ["preemption", "async"])
def test_mixed_batch_matches_hf_peft_under_preemption_and_async_scheduling(case, mode):
    base, _, rows, refs = case
    extra = ({"num_gpu_blocks_override": 14, "async_scheduling": False} if mode == "preemption"
             else {"async_scheduling": True, "num_gpu_blocks_override": 40})
    args = {**ENGINE_ARGS, "max_model_len": 128, **extra}
    llm = LLM(model=str(base), max_num_batched_tokens=64, max_loras=3, block_size=16, **args)
    try:
        outputs = _generate(llm, rows)
        core = llm.llm_engine.engine_core
    finally:
        llm.llm_engine.engine_core.shutdown()
    check_against_hf(outputs, refs, with_prompt_logprobs=False)
    if mode == "preemption":
        assert core.scheduler.num_preemptions > 0
    else:
        assert core.async_mode
