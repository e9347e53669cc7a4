"""Tensor and data parallelism on two GPUs over NCCL (skipped without two CUDA devices).

fp32 tiny models: TP=2 (with decode graphs capturing the all-reduces) gives TP=1's greedy tokens.
bf16 Qwen3-0.6B shape: teacher-forced logprobs of TP=2 against TP=1, reported and bounded.
"""

from __future__ import annotations

import asyncio
import json

import pytest
import torch
from gpu_marks import requires_gpu

pytestmark = [*requires_gpu, pytest.mark.skipif(torch.cuda.device_count() < 2, reason="needs two CUDA GPUs")]

PROMPTS = ["hello world", "the cache block is a", "你好 😀 tokyo weather in paris", "a", "def add(a, b):"]


def _greedy(folder, **engine_args) -> list[list[int]]:
    from infercore import LLM, SamplingParams

    llm = LLM(model=str(folder), dtype="float32", max_model_len=256, gpu_memory_utilization=0.3, **engine_args)
    try:
        outs = llm.generate(PROMPTS, SamplingParams(temperature=0, max_tokens=32, ignore_eos=True), use_tqdm=False)
        return [o.outputs[0].token_ids for o in outs]
    finally:
        llm.llm_engine.engine_core.shutdown()
        del llm
        torch.cuda.empty_cache()


@pytest.mark.parametrize(("architecture", "overrides"), [
    ("LlamaForCausalLM", {}), ("MistralForCausalLM", {"num_key_value_heads": 1}),
    ("Qwen2ForCausalLM", {}), ("Qwen3ForCausalLM", {}),
])
def test_tp2_nccl_greedy_matches_tp1(tiny_model_factory, architecture, overrides):
    folder = tiny_model_factory(architecture, **overrides)
    assert _greedy(folder, tensor_parallel_size=2) == _greedy(folder)


def _teacher_forced(folder, ids: list[int], **engine_args) -> torch.Tensor:
    from infercore import LLM, SamplingParams

    llm = LLM(model=str(folder), dtype="bfloat16", max_model_len=1024, skip_tokenizer_init=True,
              gpu_memory_utilization=0.4, **engine_args)
    try:
        out = llm.generate([{"prompt_token_ids": ids}], SamplingParams(max_tokens=1, prompt_logprobs=1,
                                                                       detokenize=False), use_tqdm=False)[0]
        return torch.tensor([lp[ids[i + 1]].logprob for i, lp in enumerate(out.prompt_logprobs[1:])])
    finally:
        llm.llm_engine.engine_core.shutdown()
        del llm
        torch.cuda.empty_cache()


def test_bf16_tp2_teacher_forced_logprobs_close_to_tp1(tmp_path):
    from transformers import AutoConfig, AutoModelForCausalLM

    from infercore.benchmarks.workloads import WORKLOADS

    folder = tmp_path / "qwen3-0.6b-shape"
    folder.mkdir()
    (folder / "config.json").write_text(json.dumps(dict(WORKLOADS["w-gpu"].model_config)))
    torch.manual_seed(0)
    AutoModelForCausalLM.from_config(AutoConfig.from_pretrained(str(folder)), dtype=torch.bfloat16).save_pretrained(
        str(folder))
    ids = torch.randint(0, 10000, (512,), generator=torch.Generator().manual_seed(1)).tolist()
    tp1 = _teacher_forced(folder, ids)
    tp2 = _teacher_forced(folder, ids, tensor_parallel_size=2)
    diff = (tp2 - tp1).abs()
    print(json.dumps({"test": "bf16_tp2_vs_tp1_teacher_forced", "tokens": len(diff),
                      "max_abs_logprob_diff": diff.max().item(), "mean_abs_logprob_diff": diff.mean().item()}))
    assert diff.mean().item() < 0.05


def test_dp2_on_two_gpus_matches_dp1(tiny_model_factory):
    from infercore import SamplingParams
    from infercore.config import InfercoreConfig
    from infercore.frontend.async_llm import AsyncLLM

    folder = tiny_model_factory("Qwen3ForCausalLM")
    expected = _greedy(folder)
    config = InfercoreConfig.from_kwargs(model=str(folder), dtype="float32", max_model_len=256,
                                         gpu_memory_utilization=0.3, data_parallel_size=2)
    params = SamplingParams(temperature=0, max_tokens=32, ignore_eos=True)

    async def run() -> list[list[int]]:
        llm = await AsyncLLM.start(config)
        try:
            async def one(i: int) -> list[int]:
                tokens: list[int] = []
                async for out in llm.generate(PROMPTS[i], params, f"r{i}"):
                    tokens += out.outputs[0].token_ids
                return tokens

            got = await asyncio.gather(*(one(i) for i in range(len(PROMPTS))))
            assert min(llm.client.routed) > 0
            return list(got)
        finally:
            await llm.shutdown()

    assert asyncio.run(run()) == expected
