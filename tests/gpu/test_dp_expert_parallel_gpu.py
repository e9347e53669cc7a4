"""Expert parallelism across two data-parallel engines on two GPUs (NCCL expert-parallel group spanning
the engines; skipped without two CUDA devices): greedy tokens equal one engine's without expert
parallelism, with one engine idle for a while (dummy steps) and then both busy. Prints JSON lines
(case, architecture, seconds per wave)."""

from __future__ import annotations

import asyncio
import json
import time

import pytest
import torch
from gpu_marks import requires_gpu

pytestmark = [*requires_gpu, pytest.mark.skipif(torch.cuda.device_count() < 2, reason="needs two CUDA GPUs")]

PROMPTS = ["hello world", "the cache block is a", "你好 😀 tokyo weather in paris", "a", "def add(a, b):"]
ENGINE_ARGS = {"dtype": "float32", "max_model_len": 256, "gpu_memory_utilization": 0.3}


def _params():
    from infercore import SamplingParams

    return SamplingParams(temperature=0, max_tokens=24, ignore_eos=True)


def _reference(folder) -> list[list[int]]:
    from infercore import LLM

    llm = LLM(model=str(folder), **ENGINE_ARGS)
    try:
        return [list(o.outputs[0].token_ids) for o in llm.generate(PROMPTS, _params(), use_tqdm=False)]
    finally:
        llm.llm_engine.engine_core.shutdown()
        del llm
        torch.cuda.empty_cache()


async def _serve(folder) -> tuple[list[int], list[list[int]], float, float]:
    from infercore.config import InfercoreConfig
    from infercore.frontend.async_llm import AsyncLLM

    config = InfercoreConfig.from_kwargs(model=str(folder), data_parallel_size=2, enable_expert_parallel=True,
                                         **ENGINE_ARGS)
    llm = await AsyncLLM.start(config)

    async def tokens(i: int, tag: str) -> list[int]:
        out: list[int] = []
        async for step in llm.generate(PROMPTS[i], _params(), f"{tag}-{i}"):
            out += step.outputs[0].token_ids
        return out

    try:
        start = time.perf_counter()
        alone = await asyncio.wait_for(tokens(1, "alone"), 120)
        alone_s = time.perf_counter() - start
        start = time.perf_counter()
        together = await asyncio.wait_for(asyncio.gather(*(tokens(i, "both") for i in range(len(PROMPTS)))), 120)
        together_s = time.perf_counter() - start
    finally:
        await llm.shutdown()
    return alone, list(together), alone_s, together_s


@pytest.mark.parametrize("architecture", ["Qwen3MoeForCausalLM", "MixtralForCausalLM"])
def test_dp2_ep_nccl_matches_one_engine(tiny_model_factory, architecture: str) -> None:
    folder = tiny_model_factory(architecture)
    expected = _reference(folder)
    alone, together, alone_s, together_s = asyncio.run(_serve(folder))
    print(json.dumps({"test": "dp2_ep_nccl", "architecture": architecture, "alone_wave_s": round(alone_s, 3),
                      "both_engines_wave_s": round(together_s, 3), "tokens_equal": together == expected}))
    assert alone == expected[1]
    assert together == expected
