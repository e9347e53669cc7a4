"""Greedy tokens and logprobs of the offline LLM match Hugging Face transformers, per architecture."""

from __future__ import annotations

import pytest
import torch
from engine_cases import PROMPTS
from transformers import AutoModelForCausalLM

from infercore import SamplingParams
from infercore.outputs import Logprob

MAX_NEW_TOKENS = 32
NUM_LOGPROBS = 5
TOLERANCE = 1e-4
ARCHITECTURES = ["LlamaForCausalLM", "MistralForCausalLM", "Qwen2ForCausalLM", "Qwen3ForCausalLM"]


def assert_logprobs_close(ours: dict[int, Logprob], ref: torch.Tensor, where: str) -> None:
    """Each returned token's logprob equals HF's, and the top ``NUM_LOGPROBS`` are HF's top tokens."""
    for token_id, lp in ours.items():
        assert abs(lp.logprob - float(ref[token_id])) < TOLERANCE, f"{where}: token {token_id}"
    top = {i for i, lp in ours.items() if lp.rank is not None and lp.rank <= NUM_LOGPROBS}
    hf_top = set(ref.topk(NUM_LOGPROBS).indices.tolist())
    assert top >= hf_top, f"{where}: top tokens {sorted(top)} but HF's are {sorted(hf_top)}"


@pytest.mark.parametrize("architecture", ARCHITECTURES)
def test_greedy_tokens_and_logprobs_match_hf(tiny_model_factory, make_llm, architecture: str) -> None:
    folder = tiny_model_factory(architecture)
    llm = make_llm(model=str(folder))
    params = SamplingParams(temperature=0, max_tokens=MAX_NEW_TOKENS, ignore_eos=True,
                            logprobs=NUM_LOGPROBS, prompt_logprobs=NUM_LOGPROBS)
    outputs = llm.generate(PROMPTS, params, use_tqdm=False)
    hf = AutoModelForCausalLM.from_pretrained(str(folder), dtype=torch.float32)
    assert len({len(o.prompt_token_ids) for o in outputs}) >= 8, "prompt lengths should differ"
    for out in outputs:
        ids = torch.tensor([out.prompt_token_ids])
        with torch.no_grad():
            gen = hf.generate(ids, attention_mask=torch.ones_like(ids), do_sample=False,
                              max_new_tokens=MAX_NEW_TOKENS, min_new_tokens=MAX_NEW_TOKENS,
                              output_logits=True, return_dict_in_generate=True)
            prompt_ref = hf(ids).logits[0].float().log_softmax(-1)
        completion = out.outputs[0]
        assert completion.token_ids == gen.sequences[0, ids.shape[1]:].tolist(), f"prompt {out.prompt!r}"
        sample_ref = torch.stack(gen.logits)[:, 0].float().log_softmax(-1)
        assert completion.logprobs is not None and len(completion.logprobs) == MAX_NEW_TOKENS
        for step, (token_id, position) in enumerate(zip(completion.token_ids, completion.logprobs)):
            assert token_id in position
            assert_logprobs_close(position, sample_ref[step], f"{out.prompt!r} output {step}")
        if len(out.prompt_token_ids) > 1:
            assert out.prompt_logprobs is not None and out.prompt_logprobs[0] is None
            assert len(out.prompt_logprobs) == len(out.prompt_token_ids)
            for pos, position in enumerate(out.prompt_logprobs[1:]):
                assert out.prompt_token_ids[pos + 1] in position
                assert_logprobs_close(position, prompt_ref[pos], f"{out.prompt!r} prompt {pos + 1}")
