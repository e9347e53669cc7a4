"""Pipeline parallelism on two GPUs over NCCL (skipped without two CUDA devices): PP=2 gives PP=1's
greedy tokens (Gemma 3's uneven three layers and hybrid KV groups, Qwen3-MoE's experts, a dense Llama),
and two steps in flight beat one (``benchmarks/pipeline_microbatches.py``, reported)."""

from __future__ import annotations

import argparse
import importlib.util
import json
from pathlib import Path

import pytest
import torch
from gpu_marks import requires_gpu

pytestmark = [*requires_gpu, pytest.mark.skipif(torch.cuda.device_count() < 2, reason="needs two CUDA GPUs")]

PROMPTS = ["hello world", "the cache block is a", "你好 😀 tokyo weather in paris", "a", "def add(a, b):"]
BENCHMARK = Path(__file__).resolve().parents[2] / "benchmarks" / "pipeline_microbatches.py"


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


@pytest.mark.parametrize("architecture", ["Gemma3ForCausalLM", "Qwen3MoeForCausalLM", "LlamaForCausalLM"])
def test_pp2_nccl_greedy_matches_pp1(tiny_model_factory, architecture: str) -> None:
    folder = tiny_model_factory(architecture)
    assert _greedy(folder, pipeline_parallel_size=2) == _greedy(folder)


def test_pp2_micro_batches_throughput() -> None:
    spec = importlib.util.spec_from_file_location("pipeline_microbatches", BENCHMARK)
    bench = importlib.util.module_from_spec(spec)
    assert spec.loader is not None
    spec.loader.exec_module(bench)
    args = argparse.Namespace(num_requests=256, pp=2, prompt_len=64, output_len=64, hidden_size=2048, layers=16,
                              dtype="bfloat16", backend="mp", repeats=1, device_threads=0,
                              max_num_batched_tokens=None)
    one, two = bench.measure(args)
    print(json.dumps({"one_in_flight": one, "two_in_flight": two}))
    assert two["most_in_pipe"] == 2
    assert two["total_tok_per_s"] > one["total_tok_per_s"]
