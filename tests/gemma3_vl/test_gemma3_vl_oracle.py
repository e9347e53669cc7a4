"""Gemma 3 with images against HF: prompts with 0, 1 and 2 images of different sizes give HF's greedy tokens and
logprobs (within 1e-4) through chunked prefill whose chunk boundaries move to an image's start rather than split
it, async scheduling and preemption; an image longer than the step budget is refused at admission."""

from __future__ import annotations

import pytest
import torch
from gemma3_vl_oracle import MAX_NEW_TOKENS, Gemma3Oracle
from multimodal.mm_images import random_image

from infercore import LLM, SamplingParams

PROMPTS = [
    ("the model of the token cache block request", 0),
    ("<start_of_image>what is in the picture", 1),
    ("the engine cache block request server stream <start_of_image> and then <start_of_image> compare them", 2),
]
SIZES = [(40, 50), (33, 21), (64, 64)]
PARAMS = SamplingParams(temperature=0, max_tokens=MAX_NEW_TOKENS, min_tokens=MAX_NEW_TOKENS, logprobs=3)


def _requests() -> list[tuple[dict, list]]:
    out = []
    k = 0
    for text, count in PROMPTS:
        images = [random_image(*SIZES[(k + j) % len(SIZES)], seed=k + j) for j in range(count)]
        k += count
        out.append(({"prompt": text, "multi_modal_data": {"image": images}} if images else {"prompt": text}, images))
    return out


@pytest.fixture(scope="module")
def oracle(gemma3_vl_folder) -> Gemma3Oracle:
    return Gemma3Oracle(gemma3_vl_folder)


def test_gemma3_matches_hf_through_chunked_prefill(gemma3_vl_folder, oracle):
    # A 20-token step budget and 16-token images: a boundary that would split an image moves to its start.
    llm = LLM(str(gemma3_vl_folder), dtype="float32", max_model_len=256, max_num_batched_tokens=20,
              enforce_eager=True, block_size=4)
    core = llm.llm_engine.engine_core
    spans = core.scheduler.encoder_budget.spans
    moved: list[tuple[int, int, int]] = []  # (start, tokens asked, tokens given) where a boundary moved
    fit = spans.fit

    def recording(request, start: int, num_new: int) -> int:
        given = fit(request, start, num_new)
        if given < num_new:
            moved.append((start, num_new, given))
            assert start + given in [f.offset for f in request.mm_features] or given == 0
        return given

    spans.fit = recording
    requests = _requests()
    outs = llm.generate([p for p, _ in requests], PARAMS, use_tqdm=False)
    for (prompt, images), out in zip(requests, outs, strict=True):
        oracle.check(out, images, f"chunked {prompt['prompt']!r}")
    # Boundaries moved back to an image's start (a split image would also fail the runner's check).
    assert any(given > 0 for _, _, given in moved), moved
    mm = core.executor.worker.runner.mm
    assert mm.num_encoded == 3 and not mm.requests
    # HF's bidirectional image mask matters here: without it (causal only) HF's logprobs differ.
    prompt, images = requests[1]
    ids = torch.tensor([outs[1].prompt_token_ids])
    pixels = torch.from_numpy(oracle.image_processor(images=images, return_tensors="np")["pixel_values"])
    with torch.no_grad():
        causal = oracle.model(input_ids=ids, pixel_values=pixels).logits[0, -1].log_softmax(-1)
        full = oracle.model(input_ids=ids, pixel_values=pixels,
                            token_type_ids=(ids == oracle.image_token_id).long()).logits[0, -1].log_softmax(-1)
    assert float((causal - full).abs().max()) > 1e-3


def test_gemma3_async_scheduling_and_preemption_match_hf(gemma3_vl_folder, oracle):
    requests = _requests() * 2
    llm = LLM(str(gemma3_vl_folder), dtype="float32", max_model_len=96, max_num_batched_tokens=32,
              block_size=4, num_gpu_blocks_override=40, async_scheduling=True, enable_prefix_caching=False)
    outs = llm.generate([p for p, _ in requests], PARAMS, use_tqdm=False)
    core = llm.llm_engine.engine_core
    assert core.async_mode and core.scheduler.num_preemptions > 0
    for (prompt, images), out in zip(requests, outs, strict=True):
        oracle.check(out, images, f"preempted {prompt['prompt']!r}")


def _hf_composes_windows_with_images() -> bool:
    """Whether this transformers builds Gemma 3's sliding mask as AND(window, OR(causal, same image))."""
    from transformers.models.gemma3 import modeling_gemma3

    return hasattr(modeling_gemma3, "create_masks_for_vision_model")


@pytest.mark.skipif(not _hf_composes_windows_with_images(),
                    reason="this transformers composes Gemma 3's sliding mask with images otherwise")
def test_gemma3_window_shorter_than_an_image_matches_hf(tmp_path):
    """Sliding layers of window 8 under 16-token images: an image token sees its image only within the window
    (HF's AND(window, OR(causal, same image)), which transformers names create_masks_for_vision_model)."""
    from infercore.tiny_vision_models import build_gemma3_vl_folder

    folder = build_gemma3_vl_folder(tmp_path, seed=1, sliding_window=8)
    llm = LLM(str(folder), dtype="float32", max_model_len=256, max_num_batched_tokens=20, enforce_eager=True,
              block_size=4)
    requests = _requests()
    outs = llm.generate([p for p, _ in requests], PARAMS, use_tqdm=False)
    window = Gemma3Oracle(folder)
    for (prompt, images), out in zip(requests, outs, strict=True):
        window.check(out, images, f"window 8 {prompt['prompt']!r}")


def test_gemma3_refuses_an_image_longer_than_the_step_budget(gemma3_vl_folder):
    llm = LLM(str(gemma3_vl_folder), dtype="float32", max_model_len=128, max_num_batched_tokens=12,
              enforce_eager=True)
    with pytest.raises(ValueError, match="max-num-batched-tokens to at least 16"):
        llm.generate({"prompt": "<start_of_image>hi", "multi_modal_data": {"image": random_image(20, 20, seed=0)}},
                     PARAMS, use_tqdm=False)
    # Text-only prompts still run.
    assert llm.generate("the model", PARAMS, use_tqdm=False)[0].outputs[0].token_ids
