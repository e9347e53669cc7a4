"""Images beside the engine's other features: n-gram speculative decoding through chunked prefill, and
tensor parallelism over two CPU ranks (the tower's parallel linears shard, each rank encodes every image),
give the plain engine's greedy tokens."""

from __future__ import annotations

import pytest
from mm_images import random_image

from infercore import LLM, SamplingParams

PARAMS = SamplingParams(max_tokens=16, temperature=0)


def _prompts() -> list[dict]:
    text = "the model <image> of the token the model of the token"
    return [{"prompt": text, "multi_modal_data": {"image": random_image(40, 50, seed=s)}} for s in range(3)]


def _tokens(folder, **engine_args) -> list[list[int]]:
    llm = LLM(str(folder), dtype="float32", max_model_len=128, enforce_eager=True, **engine_args)
    try:
        return [o.outputs[0].token_ids for o in llm.generate(_prompts(), PARAMS, use_tqdm=False)]
    finally:
        llm.shutdown()


def test_ngram_speculation_with_images(llava_clip_folder):
    spec = {"method": "ngram", "num_speculative_tokens": 3, "prompt_lookup_max": 3, "prompt_lookup_min": 1}
    assert _tokens(llava_clip_folder, max_num_batched_tokens=16, speculative_config=spec) == _tokens(llava_clip_folder)


@pytest.mark.heavy
def test_tensor_parallel_with_images(llava_siglip_folder):
    assert _tokens(llava_siglip_folder, tensor_parallel_size=2) == _tokens(llava_siglip_folder)
