"""Greedy tokens and logprobs of the MoE models match HF transformers, through chunked prefill and prefix hits."""

from __future__ import annotations

import pytest
import torch
from moe_cases import ENGINE_ARGS, MOE_CASES
from transformers import AutoModelForCausalLM

from infercore import LLM, SamplingParams
from infercore.outputs import Logprob, RequestOutput

MAX_NEW_TOKENS = 32
NUM_LOGPROBS = 5
TOLERANCE = 1e-4
#: A step budget smaller than most prompts, so they prefill over several steps.
CHUNK_BUDGET = 16
#: Prompts of 1 to ~60 tokens; the long ones span several 16-token blocks for the prefix cache.
PROMPTS = [
    "hello",
    "The engine cache block request server stream json tool call weather city paris london",
    "你好，世界！这是一个测试。",
    "def add(a, b):\n    return a + b",
    " ".join(["the model of the token"] * 10),
    "Tokyo temperature in celsius? search the query and call the function with arguments",
]


def assert_logprobs_close(ours: dict[int, Logprob], ref: torch.Tensor, where: str) -> None:
    """Each returned token's logprob equals HF's, and the top ``NUM_LOGPROBS`` are HF's top tokens."""
    for token_id, lp in ours.items():
        assert abs(lp.logprob - float(ref[token_id])) < TOLERANCE, f"{where}: token {token_id}"
    top = {i for i, lp in ours.items() if lp.rank is not None and lp.rank <= NUM_LOGPROBS}
    assert top >= set(ref.topk(NUM_LOGPROBS).indices.tolist()), f"{where}: top tokens differ from HF's"


def hf_greedy(hf: torch.nn.Module, prompt_ids: list[int]) -> tuple[list[int], torch.Tensor, torch.Tensor]:
    """HF's greedy tokens, their log-softmaxed logits per step, and the prompt's log-softmaxed logits."""
    ids = torch.tensor([prompt_ids])
    with torch.no_grad():
        gen = hf.generate(ids, attention_mask=torch.ones_like(ids), do_sample=False, max_new_tokens=MAX_NEW_TOKENS,
                          min_new_tokens=MAX_NEW_TOKENS, output_logits=True, return_dict_in_generate=True)
        prompt = hf(ids).logits[0].float().log_softmax(-1)
    return gen.sequences[0, ids.shape[1]:].tolist(), torch.stack(gen.logits)[:, 0].float().log_softmax(-1), prompt


def check_against_hf(outputs: list[RequestOutput], refs: list, with_prompt_logprobs: bool) -> None:
    for out, (tokens, sample_ref, prompt_ref) in zip(outputs, refs):
        completion = out.outputs[0]
        assert completion.token_ids == tokens, f"prompt {out.prompt!r}"
        assert completion.logprobs is not None and len(completion.logprobs) == MAX_NEW_TOKENS
        for step, position in enumerate(completion.logprobs):
            assert_logprobs_close(position, sample_ref[step], f"{out.prompt!r} output {step}")
        if with_prompt_logprobs and len(out.prompt_token_ids) > 1:
            assert out.prompt_logprobs is not None
            for pos, position in enumerate(out.prompt_logprobs[1:]):
                assert_logprobs_close(position, prompt_ref[pos], f"{out.prompt!r} prompt {pos + 1}")


@pytest.mark.parametrize("case", list(MOE_CASES))
def test_moe_greedy_matches_hf_with_chunked_prefill_and_prefix_hits(tiny_model_factory, case: str) -> None:
    architecture, overrides = MOE_CASES[case]
    folder = tiny_model_factory(architecture, **overrides)
    llm = LLM(model=str(folder), **{**ENGINE_ARGS, "max_num_batched_tokens": CHUNK_BUDGET})
    try:
        chunked = llm.generate(PROMPTS, SamplingParams(temperature=0, max_tokens=MAX_NEW_TOKENS, ignore_eos=True,
                                                       logprobs=NUM_LOGPROBS, prompt_logprobs=NUM_LOGPROBS),
                               use_tqdm=False)
        # The same prompts again: their full blocks now come from the prefix cache.
        cached = llm.generate(PROMPTS, SamplingParams(temperature=0, max_tokens=MAX_NEW_TOKENS, ignore_eos=True,
                                                      logprobs=NUM_LOGPROBS), use_tqdm=False)
    finally:
        llm.llm_engine.engine_core.shutdown()
    assert max(len(o.prompt_token_ids) for o in chunked) > 2 * CHUNK_BUDGET, "a prompt should span several chunks"
    assert sum(o.num_cached_tokens for o in cached) >= 32, "the second run should hit the prefix cache"
    hf = AutoModelForCausalLM.from_pretrained(str(folder), dtype=torch.float32)
    refs = [hf_greedy(hf, out.prompt_token_ids) for out in chunked]
    check_against_hf(chunked, refs, with_prompt_logprobs=True)
    check_against_hf(cached, refs, with_prompt_logprobs=False)
