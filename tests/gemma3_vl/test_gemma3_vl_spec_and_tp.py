"""Gemma 3 with images under n-gram speculation (drafts verified through chunked prefill) and tensor parallelism
over two CPU ranks: the tokens of a plain run."""

from __future__ import annotations

import pytest
import torch
from multimodal.mm_images import random_image

from infercore import LLM, SamplingParams

PARAMS = SamplingParams(temperature=0, max_tokens=12, ignore_eos=True)


def _tokens(folder, **engine_args) -> list[list[int]]:
    requests = [{"prompt": "<start_of_image>what is in the picture", "multi_modal_data": {"image": random_image(40, 50, 1)}},
                {"prompt": "the engine <start_of_image> and <start_of_image> compare", "multi_modal_data":
                 {"image": [random_image(33, 21, 2), random_image(64, 64, 3)]}}]
    llm = LLM(str(folder), dtype="float32", max_model_len=128, enforce_eager=True, **engine_args)
    try:
        return [o.outputs[0].token_ids for o in llm.generate(requests, PARAMS, use_tqdm=False)]
    finally:
        llm.shutdown()


def test_ngram_speculation_with_images(gemma3_vl_folder):
    spec = {"method": "ngram", "num_speculative_tokens": 3, "prompt_lookup_max": 3, "prompt_lookup_min": 1}
    assert _tokens(gemma3_vl_folder, max_num_batched_tokens=24, speculative_config=spec) == _tokens(gemma3_vl_folder)


@pytest.mark.heavy
@pytest.mark.skipif(torch.cuda.is_available() and torch.cuda.device_count() < 2, reason="needs two GPUs or the CPU")
def test_tensor_parallel_with_images(gemma3_vl_folder):
    assert _tokens(gemma3_vl_folder, tensor_parallel_size=2) == _tokens(gemma3_vl_folder)
