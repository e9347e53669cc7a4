"""Expert parallelism on two GPUs over NCCL (skipped without two CUDA devices): EP=2 gives the greedy
tokens of TP=2 (fp32 tiny MoE models, the Triton ``fused_moe`` kernel running each rank's experts), and
prints the largest logprob difference as a JSON line."""

from __future__ import annotations

import json

import pytest
import torch
from gpu_marks import requires_gpu

pytestmark = [*requires_gpu, pytest.mark.skipif(torch.cuda.device_count() < 2, reason="needs two CUDA GPUs")]

PROMPTS = ["hello world", "the cache block is a", "你好 😀 tokyo weather in paris", "a", "def add(a, b):"]


def _generate(folder, **engine_args) -> list[tuple[list[int], list[dict[int, float]]]]:
    from infercore import LLM, SamplingParams

    llm = LLM(model=str(folder), dtype="float32", max_model_len=256, gpu_memory_utilization=0.3,
              tensor_parallel_size=2, **engine_args)
    try:
        outs = llm.generate(PROMPTS, SamplingParams(temperature=0, max_tokens=24, ignore_eos=True, logprobs=2),
                            use_tqdm=False)
        return [(list(o.outputs[0].token_ids),
                 [{t: lp.logprob for t, lp in step.items()} for step in o.outputs[0].logprobs]) for o in outs]
    finally:
        llm.llm_engine.engine_core.shutdown()
        del llm
        torch.cuda.empty_cache()


@pytest.mark.parametrize("architecture", ["Qwen3MoeForCausalLM", "MixtralForCausalLM"])
def test_ep2_nccl_matches_tp2(tiny_model_factory, architecture: str) -> None:
    folder = tiny_model_factory(architecture)
    tp = _generate(folder)
    ep = _generate(folder, enable_expert_parallel=True)
    worst = max((abs(a[t] - b[t]) for (_, x), (_, y) in zip(ep, tp, strict=True)
                 for a, b in zip(x, y, strict=True) for t in a.keys() & b.keys()), default=0.0)
    print(json.dumps({"test": "ep2_vs_tp2_nccl", "architecture": architecture, "max_abs_logprob_diff": worst}))
    assert [tokens for tokens, _ in ep] == [tokens for tokens, _ in tp]
    assert worst <= 1e-3
