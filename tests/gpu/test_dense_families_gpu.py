"""Gemma 3 and Phi-3 on a GPU (Triton attention with per-layer sliding windows) against HF transformers."""

from __future__ import annotations

from typing import Any

import pytest
import torch
from gpu_marks import requires_gpu

pytestmark = requires_gpu

PROMPTS = ["hello world", "the cache block is a", " ".join(["the model of the token"] * 10),
           "json tool call weather city paris london tokyo temperature", "def add(a, b):"]
#: Gemma 3's tiny config slides over 8 tokens in two of three layers; this Phi-3 slides over 12 in
#: every layer (so the engine frees blocks that left the window) with LongRoPE over half of each head.
CASES: dict[str, tuple[str, dict[str, Any]]] = {
    "gemma3": ("Gemma3ForCausalLM", {}),
    "phi3-longrope-sliding": ("Phi3ForCausalLM", {
        "rope_parameters": {"rope_type": "longrope", "rope_theta": 10000.0, "partial_rotary_factor": 0.5,
                            "short_factor": [1.0, 1.3, 2.1, 3.4], "long_factor": [1.5, 2.5, 4.0, 7.0],
                            "original_max_position_embeddings": 256},
        "max_position_embeddings": 2048, "original_max_position_embeddings": 256, "sliding_window": 12}),
}


@pytest.mark.parametrize("case", list(CASES))
def test_fp32_greedy_matches_hf_with_chunked_prefill_and_prefix_hits(tmp_path, case: str) -> None:
    from transformers import AutoModelForCausalLM

    from infercore import LLM, SamplingParams
    from infercore.tiny_models import build_model_folder

    architecture, overrides = CASES[case]
    folder = build_model_folder(tmp_path / case, architecture, **overrides)
    llm = LLM(model=str(folder), dtype="float32", max_model_len=256, gpu_memory_utilization=0.3,
              max_num_batched_tokens=16)
    params = SamplingParams(temperature=0, max_tokens=32, ignore_eos=True)
    first = llm.generate(PROMPTS, params, use_tqdm=False)
    again = llm.generate(PROMPTS, params, use_tqdm=False)
    assert sum(o.num_cached_tokens for o in again) >= 32, "the second run should hit the prefix cache"
    hf = AutoModelForCausalLM.from_pretrained(str(folder), dtype=torch.float32).cuda()
    for out, cached in zip(first, again, strict=True):
        ids = torch.tensor([out.prompt_token_ids], device="cuda")
        ref = hf.generate(ids, attention_mask=torch.ones_like(ids), max_new_tokens=32, min_new_tokens=32,
                          do_sample=False)[0, ids.shape[1]:].tolist()
        assert out.outputs[0].token_ids == ref, out.prompt
        assert cached.outputs[0].token_ids == ref, out.prompt
    del llm
