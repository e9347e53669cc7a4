"""LLaVA (CLIP + Llama, SigLIP + Qwen2) against HF: prompts with 0, 1 and 2 images of different sizes give
HF's greedy tokens and logprobs, through chunked prefill with images across chunk boundaries, async
scheduling and preemption; the tower runs once per image even when a chunk boundary cuts it."""

from __future__ import annotations

import pytest
from mm_images import random_image
from vlm_oracle import MAX_NEW_TOKENS, LlavaOracle

from infercore import LLM, SamplingParams

PROMPTS = [
    ("the model of the token cache block request", 0),
    ("<image>\nwhat is in the picture", 1),
    ("the engine cache block request server stream <image> and then <image> compare them", 2),
    ("<image><image>", 2),
]
SIZES = [(40, 50), (33, 21), (64, 64), (17, 90)]


def _requests() -> list[tuple[dict, list]]:
    out = []
    k = 0
    for text, count in PROMPTS:
        images = [random_image(*SIZES[(k + j) % len(SIZES)], seed=k + j) for j in range(count)]
        k += count
        prompt = {"prompt": text, "multi_modal_data": {"image": images}} if images else {"prompt": text}
        out.append((prompt, images))
    return out


PARAMS = SamplingParams(temperature=0, max_tokens=MAX_NEW_TOKENS, min_tokens=MAX_NEW_TOKENS, logprobs=3)


@pytest.mark.parametrize("tower", ["clip", "siglip"])
def test_llava_matches_hf_through_chunked_prefill(tower, llava_clip_folder, llava_siglip_folder):
    folder = llava_clip_folder if tower == "clip" else llava_siglip_folder
    # A 10-token step budget: every 16-token image straddles at least one chunk boundary.
    llm = LLM(str(folder), dtype="float32", max_model_len=256, max_num_batched_tokens=10, enforce_eager=True,
              block_size=4)
    requests = _requests()
    outs = llm.generate([p for p, _ in requests], PARAMS, use_tqdm=False)
    oracle = LlavaOracle(folder)
    for (prompt, images), out in zip(requests, outs, strict=True):
        oracle.check(out, images, f"{tower} {prompt['prompt']!r}")
    mm = llm.llm_engine.engine_core.executor.worker.runner.mm
    assert mm.num_encoded == sum(len(images) for _, images in requests), "an image was encoded more than once"
    # A request's images (and outputs) go once its last placeholder is computed.
    assert not mm.requests, "encoder state outlived the images"


def test_llava_async_scheduling_and_preemption_match_hf(llava_clip_folder):
    requests = _requests() * 2
    llm = LLM(str(llava_clip_folder), dtype="float32", max_model_len=80, max_num_batched_tokens=24,
              block_size=4, num_gpu_blocks_override=24, async_scheduling=True, enable_prefix_caching=False)
    outs = llm.generate([p for p, _ in requests], PARAMS, use_tqdm=False)
    core = llm.llm_engine.engine_core
    assert core.async_mode and core.scheduler.num_preemptions > 0
    oracle = LlavaOracle(llava_clip_folder)
    for (prompt, images), out in zip(requests, outs, strict=True):
        oracle.check(out, images, f"preempted {prompt['prompt']!r}")
