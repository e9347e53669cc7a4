"""The Triton fused-MoE kernel at Qwen3-30B-A3B's shape against the torch reference, on the GPU."""

from __future__ import annotations

import pytest
import torch
from gpu_marks import requires_gpu

from infercore.layers.fused_moe import select_experts
from infercore.ops.moe_reference import fused_moe as reference_fused_moe
from infercore_triton.fused_moe import fused_moe

pytestmark = requires_gpu
HIDDEN, INTER, EXPERTS, TOP_K = 2048, 768, 128, 8
#: Relative error (Frobenius norm) of bf16 outputs; float32 runs with IEEE dots.
BOUND = {torch.bfloat16: 1e-2, torch.float32: 1e-5}


def case(tokens: int, dtype: torch.dtype, inter: int = INTER):
    gen = torch.Generator(device="cuda").manual_seed(tokens)
    x = torch.randn(tokens, HIDDEN, device="cuda", generator=gen).to(dtype)
    w13 = (torch.randn(EXPERTS, 2 * inter, HIDDEN, device="cuda", generator=gen) / HIDDEN**0.5).to(dtype)
    w2 = (torch.randn(EXPERTS, HIDDEN, inter, device="cuda", generator=gen) / inter**0.5).to(dtype)
    weights, ids = select_experts(torch.randn(tokens, EXPERTS, device="cuda", generator=gen), TOP_K, True)
    return x, w13, w2, weights, ids


def rel_err(a: torch.Tensor, b: torch.Tensor) -> float:
    return float((a.float() - b.float()).norm() / b.float().norm())


@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float32])
@pytest.mark.parametrize("tokens", [1, 7, 256, 4096])
def test_fused_moe_matches_reference_at_qwen3_30b_a3b_shape(tokens: int, dtype: torch.dtype) -> None:
    x, w13, w2, weights, ids = case(tokens, dtype)
    ours = fused_moe(x, w13, w2, weights, ids)
    assert ours.shape == x.shape and ours.dtype == dtype
    assert rel_err(ours, reference_fused_moe(x, w13, w2, weights, ids)) < BOUND[dtype]


def test_tensor_parallel_share_of_the_intermediate_size() -> None:
    # TP=2 gives each rank 384 intermediate features per expert; TP=4 gives 192 (not a power of two).
    for inter in (384, 192):
        x, w13, w2, weights, ids = case(64, torch.bfloat16, inter)
        assert rel_err(fused_moe(x, w13, w2, weights, ids), reference_fused_moe(x, w13, w2, weights, ids)) < 1e-2


def test_fused_moe_replays_in_a_cuda_graph() -> None:
    x, w13, w2, weights, ids = case(32, torch.bfloat16)
    expected = fused_moe(x, w13, w2, weights, ids)
    stream = torch.cuda.Stream()
    stream.wait_stream(torch.cuda.current_stream())  # the inputs were made on the default stream
    with torch.cuda.stream(stream):
        fused_moe(x, w13, w2, weights, ids)  # warm-up outside capture builds the kernels
    torch.cuda.current_stream().wait_stream(stream)
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        out = fused_moe(x, w13, w2, weights, ids)
    new_ids = torch.roll(ids, 1, dims=0)
    ids.copy_(new_ids)
    graph.replay()
    torch.cuda.synchronize()
    assert rel_err(out, reference_fused_moe(x, w13, w2, weights, ids)) < 1e-2
    assert rel_err(out, expected) > 1e-3, "the replay should follow the new routing"


@pytest.mark.parametrize("architecture", ["Qwen3MoeForCausalLM", "MixtralForCausalLM"])
def test_fp32_moe_engine_greedy_matches_hf(tiny_model_factory, architecture: str) -> None:
    """The whole engine on the GPU (Triton fused MoE, decode graphs) gives HF's greedy tokens."""
    from transformers import AutoModelForCausalLM, AutoTokenizer

    from infercore import LLM, SamplingParams

    prompts = ["hello world", "the cache block is a", "你好 😀 tokyo weather in paris", "a",
               "json tool call weather city paris london tokyo temperature", "def add(a, b):"]
    folder = tiny_model_factory(architecture)
    llm = LLM(model=str(folder), dtype="float32", max_model_len=256, gpu_memory_utilization=0.3)
    outs = llm.generate(prompts, SamplingParams(temperature=0, max_tokens=32, ignore_eos=True), use_tqdm=False)
    tok = AutoTokenizer.from_pretrained(str(folder))
    hf = AutoModelForCausalLM.from_pretrained(str(folder), dtype=torch.float32).cuda()
    for prompt, out in zip(prompts, outs, strict=True):
        ids = tok(prompt, return_tensors="pt").input_ids.cuda()
        ref = hf.generate(ids, max_new_tokens=32, min_new_tokens=32, do_sample=False)[0, ids.shape[1]:].tolist()
        assert out.outputs[0].token_ids == ref, prompt
    del llm
