"""The engine on a GPU against HF transformers (skipped without CUDA)."""

from __future__ import annotations

import json

import pytest
import torch

pytestmark = [
    pytest.mark.gpu,
    pytest.mark.skipif(not torch.cuda.is_available(), reason="needs an NVIDIA GPU (CUDA not available)"),
]

PROMPTS = ["hello world", "the cache block is a", "你好 😀 tokyo weather in paris", "a",
           "json tool call weather city paris london tokyo temperature", "def add(a, b):", "one two", "x y z w"]


@pytest.mark.parametrize("architecture", ["LlamaForCausalLM", "MistralForCausalLM", "Qwen2ForCausalLM",
                                          "Qwen3ForCausalLM"])
def test_fp32_greedy_matches_hf_generate(tiny_model_factory, architecture):
    from transformers import AutoModelForCausalLM, AutoTokenizer

    from infercore import LLM, SamplingParams

    folder = tiny_model_factory(architecture)
    llm = LLM(model=str(folder), dtype="float32", max_model_len=256, gpu_memory_utilization=0.3)
    outs = llm.generate(PROMPTS, SamplingParams(temperature=0, max_tokens=32, ignore_eos=True), use_tqdm=False)
    tok = AutoTokenizer.from_pretrained(str(folder))
    hf = AutoModelForCausalLM.from_pretrained(str(folder), dtype=torch.float32).cuda()
    for prompt, out in zip(PROMPTS, outs, strict=True):
        ids = tok(prompt, return_tensors="pt").input_ids.cuda()
        ref = hf.generate(ids, max_new_tokens=32, min_new_tokens=32, do_sample=False)[0, ids.shape[1]:].tolist()
        assert out.outputs[0].token_ids == ref, prompt
    del llm


def test_bf16_qwen3_06b_teacher_forced_logprobs_close_to_hf(tmp_path):
    """Qwen3-0.6B shape in bf16: prompt logprobs of a 512-token sequence against HF bf16."""
    from transformers import AutoConfig, AutoModelForCausalLM

    from infercore import LLM, SamplingParams
    from infercore.benchmarks.workloads import WORKLOADS

    shape = dict(WORKLOADS["w-gpu"].model_config)
    folder = tmp_path / "qwen3-0.6b-shape"
    folder.mkdir()
    (folder / "config.json").write_text(json.dumps(shape))
    torch.manual_seed(0)
    hf = AutoModelForCausalLM.from_config(AutoConfig.from_pretrained(str(folder)), dtype=torch.bfloat16)
    hf.save_pretrained(str(folder))
    hf = hf.cuda().eval()
    g = torch.Generator().manual_seed(1)
    ids = torch.randint(0, 10000, (512,), generator=g).tolist()
    with torch.no_grad():
        ref = torch.log_softmax(hf(torch.tensor([ids], device="cuda")).logits[0].float(), dim=-1)
    ref_lp = ref[:-1].gather(1, torch.tensor(ids[1:], device="cuda").unsqueeze(1)).squeeze(1).cpu()
    ref_top = ref[:-1].argmax(-1).cpu()
    del hf
    torch.cuda.empty_cache()
    llm = LLM(model=str(folder), dtype="bfloat16", max_model_len=1024, skip_tokenizer_init=True,
              gpu_memory_utilization=0.5)
    out = llm.generate([{"prompt_token_ids": ids}], SamplingParams(max_tokens=1, prompt_logprobs=1, detokenize=False),
                       use_tqdm=False)[0]
    ours = torch.tensor([next(lp[t].logprob for t in lp if t == ids[i + 1])
                         for i, lp in enumerate(out.prompt_logprobs[1:])])
    top = torch.tensor([min(lp, key=lambda t: lp[t].rank) for lp in out.prompt_logprobs[1:]])
    diff = (ours - ref_lp).abs()
    agree = (top == ref_top).float().mean().item()
    print(json.dumps({"test": "bf16_teacher_forced", "tokens": len(diff), "max_abs_logprob_diff": diff.max().item(),
                      "mean_abs_logprob_diff": diff.mean().item(), "top1_agreement": agree}))
    assert diff.mean().item() < 0.05 and agree > 0.9
