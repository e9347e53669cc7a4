"""Multi-LoRA on a GPU: the lora_apply kernels (per-row and grouped) against the torch reference at real projection sizes, and the
engine (CUDA graphs, Triton kernels) against HF + PEFT on a mixed batch."""

from __future__ import annotations

import dataclasses
import sys
from pathlib import Path

import numpy as np
import pytest
import torch
from gpu_marks import requires_gpu

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "lora"))

pytestmark = requires_gpu

#: (input, output slices) of W-GPU's (Qwen3-0.6B) and Qwen3-8B's projections.
SHAPES = {
    "w-gpu-qkv": (1024, (2048, 1024, 1024)), "w-gpu-o": (2048, (1024,)), "w-gpu-gate_up": (1024, (3072, 3072)),
    "w-gpu-down": (3072, (1024,)), "8b-qkv": (4096, (4096, 1024, 1024)), "8b-o": (4096, (4096,)),
    "8b-gate_up": (4096, (12288, 12288)), "8b-down": (12288, (4096,)),
}


@pytest.mark.parametrize("tokens", [1, 7, 16, 64, 300, 2048])
@pytest.mark.parametrize("shape", sorted(SHAPES))
def test_kernels_match_the_reference_at_real_shapes(shape, tokens):
    from infercore.lora.step_state import LoRAStepState
    from infercore.ops import lora_reference
    from infercore_triton.lora import lora_apply

    in_size, sizes = SHAPES[shape]
    slots, rank, device = 8, 16, torch.device("cuda")
    state = LoRAStepState(tokens, slots, device, pin=True)
    state.set_step(np.random.default_rng(tokens).integers(-1, slots, tokens).astype(np.int32), tokens)
    step = state.step_for(tokens)
    assert step is not None
    torch.manual_seed(0)
    x = torch.randn(tokens, in_size, device=device, dtype=torch.bfloat16)
    a = (torch.randn(slots, len(sizes) * rank, in_size, device=device) * 0.02).to(torch.bfloat16)
    b = (torch.randn(slots, sum(sizes), rank, device=device) * 0.02).to(torch.bfloat16)
    offsets = tuple(int(v) for v in np.cumsum((0, *sizes)))
    base = torch.randn(tokens, sum(sizes), device=device, dtype=torch.bfloat16)
    out, ref = base.clone(), base.clone()
    lora_apply(out, x, a, b, *step, offsets)
    lora_reference.lora_apply(ref, x, a, b, *step, offsets)
    torch.testing.assert_close(out, ref, atol=2e-2, rtol=2e-2)


@pytest.mark.parametrize("slots", [[2, -1, 0], [-1, -1, -1]])
@pytest.mark.parametrize("pdl", [False, True])
@pytest.mark.parametrize("shape", ["w-gpu-qkv", "w-gpu-down", "8b-o"])
def test_fused_kernel_behind_the_base_gemm_in_a_graph(shape, pdl, slots):
    """The one-launch decode path right after the base GEMM, replayed from a CUDA graph, and a kernel reading
    its output after it: launched as a programmatic dependent of the GEMM (``pdl``) it must still see the
    GEMM's whole output, and (every token without an adapter) must not finish before the GEMM does."""
    from infercore.ops import lora_reference
    from infercore_triton.lora import bgmv_fused
    from infercore_triton.lora_fused import default_settings
    from infercore_triton.skinny_gemm import linear

    in_size, sizes = SHAPES[shape]
    count, rank, device = 4, 16, torch.device("cuda")
    token_slots = torch.tensor(slots, dtype=torch.int32, device=device)
    torch.manual_seed(0)
    x = torch.randn(len(slots), in_size, device=device, dtype=torch.bfloat16)
    a = (torch.randn(count, len(sizes) * rank, in_size, device=device) * 0.02).to(torch.bfloat16)
    b = (torch.randn(count, sum(sizes), rank, device=device) * 0.02).to(torch.bfloat16)
    w = (torch.randn(sum(sizes), in_size, device=device) * 0.02).to(torch.bfloat16)
    offsets = tuple(int(v) for v in np.cumsum((0, *sizes)))
    settings = dataclasses.replace(default_settings(in_size, rank, sum(sizes)), pdl=pdl)

    def layer() -> torch.Tensor:
        return bgmv_fused(linear(x, w), x, a, b, token_slots, offsets, settings) * 2

    layer()
    torch.cuda.synchronize()
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        out = layer()
    for _ in range(3):
        graph.replay()
    torch.cuda.synchronize()
    sorted_tokens, tiles = torch.zeros(0, dtype=torch.int32, device=device), torch.zeros(0, 3, device=device)
    ref = lora_reference.lora_apply(linear(x, w), x, a, b, token_slots, sorted_tokens, tiles, 16, offsets) * 2
    torch.testing.assert_close(out, ref, atol=4e-2, rtol=2e-2)


def test_engine_with_graphs_matches_hf_peft(tiny_model_factory, tmp_path):
    pytest.importorskip("peft")
    from hf_oracle import PROMPTS
    from lora_cases import hf_merged, write_adapters

    from infercore import LLM, SamplingParams

    base = tiny_model_factory("LlamaForCausalLM")
    adapters = write_adapters(base, tmp_path)
    llm = LLM(model=str(base), dtype="float32", max_model_len=256, gpu_memory_utilization=0.3, enable_lora=True,
              max_loras=3, max_lora_rank=8)
    tokenizer = llm.get_tokenizer()
    rows = [(tokenizer.encode(p), lora) for p, lora in zip(PROMPTS, [None, adapters["a"], adapters["b"],
                                                                     adapters["c"], adapters["a"]], strict=True)]
    outs = llm.generate([{"prompt_token_ids": ids} for ids, _ in rows],
                        SamplingParams(temperature=0, max_tokens=32, ignore_eos=True), use_tqdm=False,
                        lora_request=[lora for _, lora in rows])
    for (ids, lora), out in zip(rows, outs, strict=True):
        hf = hf_merged(base, lora).cuda()
        prompt = torch.tensor([ids], device="cuda")
        ref = hf.generate(prompt, max_new_tokens=32, min_new_tokens=32, do_sample=False)[0, len(ids):].tolist()
        assert out.outputs[0].token_ids == ref, lora
