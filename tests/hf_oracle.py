"""The HF oracle for one model folder: greedy tokens and logprobs through chunked prefill, then again
through prefix-cache hits, each checked against HF transformers' ``generate`` on the same prompts."""

from __future__ import annotations

from pathlib import Path

import torch
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


def generate_chunked_then_cached(llm: LLM, prompts: list[str]) -> tuple[list[RequestOutput], list[RequestOutput]]:
    """The prompts prefilled in chunks (with prompt logprobs), then again from the prefix cache."""
    try:
        chunked = llm.generate(prompts, SamplingParams(temperature=0, max_tokens=MAX_NEW_TOKENS, ignore_eos=True,
                                                       logprobs=NUM_LOGPROBS, prompt_logprobs=NUM_LOGPROBS),
                               use_tqdm=False)
        cached = llm.generate(prompts, SamplingParams(temperature=0, max_tokens=MAX_NEW_TOKENS, ignore_eos=True,
                                                      logprobs=NUM_LOGPROBS), use_tqdm=False)
    finally:
        llm.llm_engine.engine_core.shutdown()
    assert max(len(o.prompt_token_ids) for o in chunked) > 2 * CHUNK_BUDGET, "a prompt should span several chunks"
    assert sum(o.num_cached_tokens for o in cached) >= 32, "the second run should hit the prefix cache"
    return chunked, cached


def check_runs_against_hf(folder: Path, chunked: list[RequestOutput], cached: list[RequestOutput]) -> None:
    """Both runs give HF's greedy tokens and logprobs (the first its prompt logprobs too)."""
    hf = AutoModelForCausalLM.from_pretrained(str(folder), dtype=torch.float32)
    refs = [hf_greedy(hf, out.prompt_token_ids) for out in chunked]
    check_against_hf(chunked, refs, with_prompt_logprobs=True)
    check_against_hf(cached, refs, with_prompt_logprobs=False)
