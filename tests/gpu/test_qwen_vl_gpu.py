"""Qwen2.5-VL on a GPU (Triton attention and rotary, CUDA graphs with M-RoPE positions, the tower through the
platform's encoder attention) against HF transformers: float32 greedy tokens through chunked prefill, prefix
hits and preemption."""

from __future__ import annotations

import inspect

import numpy as np
import pytest
import torch
from gpu_marks import requires_gpu

pytestmark = requires_gpu

SIZES = [[], [(56, 84)], [(150, 100), (112, 168)], [(224, 224)]]


def image(height: int, width: int, seed: int) -> np.ndarray:
    rng = np.random.default_rng(seed)
    yy, xx = np.mgrid[0:height, 0:width]
    base = np.stack([xx * 3, yy * 2, (xx + yy)], axis=-1) % 256
    return np.clip(base + rng.integers(0, 64, size=(height, width, 3)), 0, 255).astype(np.uint8)


def test_fp32_greedy_matches_hf(tmp_path) -> None:
    pil = pytest.importorskip("PIL.Image")
    from transformers import Qwen2_5_VLForConditionalGeneration

    from infercore import LLM, SamplingParams
    from infercore.models.qwen2_5_vl_folder import build_qwen2_5_vl_folder
    from infercore.models.qwen2_5_vl_image import Qwen2_5_VLImageProcessor

    folder = build_qwen2_5_vl_folder(tmp_path / "qwen2_5_vl")
    llm = LLM(model=str(folder), dtype="float32", max_model_len=512, gpu_memory_utilization=0.3,
              max_num_batched_tokens=32)
    tokenizer = llm.get_tokenizer()
    prompts, pictures = [], []
    for i, sizes in enumerate(SIZES):
        parts = [{"type": "image"} for _ in sizes]
        messages = [{"role": "user", "content": [*parts, {"type": "text", "text": f"question {i}"}]}]
        text = tokenizer.apply_chat_template(messages, tokenize=False, add_generation_prompt=True)
        arrays = [image(h, w, 10 * i + j) for j, (h, w) in enumerate(sizes)]
        pictures.append(arrays)
        prompts.append({"prompt": text, "multi_modal_data": {"image": [pil.fromarray(a) for a in arrays]}}
                       if arrays else {"prompt": text})
    params = SamplingParams(temperature=0, max_tokens=24, ignore_eos=True)
    first = llm.generate(prompts, params, use_tqdm=False)
    again = llm.generate(prompts, params, use_tqdm=False)
    assert sum(o.num_cached_tokens for o in again) > 0, "the second run should hit the prefix cache"
    hf = Qwen2_5_VLForConditionalGeneration.from_pretrained(str(folder), dtype=torch.float32).cuda().eval()
    processor = Qwen2_5_VLImageProcessor.from_model_folder(folder)
    pad = hf.config.image_token_id
    takes_token_types = "mm_token_type_ids" in inspect.signature(hf.forward).parameters
    for out, cached, arrays in zip(first, again, pictures, strict=True):
        ids = torch.tensor([out.prompt_token_ids], device="cuda")
        inputs = {"input_ids": ids, "attention_mask": torch.ones_like(ids)}
        if arrays:
            processed = processor(arrays)
            inputs.update(pixel_values=processed["pixel_values"].cuda(), image_grid_thw=processed["image_grid_thw"].cuda())
            if takes_token_types:  # newer transformers place images by token type, older by <|vision_start|>
                inputs["mm_token_type_ids"] = (ids == pad).int()
        with torch.no_grad():
            ref = hf.generate(**inputs, max_new_tokens=24, min_new_tokens=24, do_sample=False,
                              pad_token_id=0)[0, ids.shape[1]:].tolist()
        assert out.outputs[0].token_ids == ref, out.prompt
        assert cached.outputs[0].token_ids == ref, out.prompt
    del llm
