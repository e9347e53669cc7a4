"""Qwen2.5-VL split over two ranks (``mp`` executor, gloo on CPU): the tower's heads and MLP columns and the
decoder shard, and the greedy tokens are those of one rank."""

from __future__ import annotations

from pathlib import Path

import pytest
from qwen_vl_reference import make_image

from infercore import LLM, SamplingParams

PIL_IMAGE = pytest.importorskip("PIL.Image")


def greedy(folder: Path, **engine: object) -> list[list[int]]:
    llm = LLM(model=str(folder), dtype="float32", max_model_len=256, num_gpu_blocks_override=64, max_num_seqs=4,
              cpu_threads=1, **engine)
    tokenizer = llm.get_tokenizer()
    prompts = []
    for sizes in ([(56, 84)], [(150, 100), (84, 56)]):
        messages = [{"role": "user", "content": [*({"type": "image"} for _ in sizes), {"type": "text", "text": "hi"}]}]
        text = tokenizer.apply_chat_template(messages, tokenize=False, add_generation_prompt=True)
        images = [PIL_IMAGE.fromarray(make_image(h, w, seed=h + w)) for h, w in sizes]
        prompts.append({"prompt": text, "multi_modal_data": {"image": images}})
    try:
        outs = llm.generate(prompts, SamplingParams(temperature=0, max_tokens=8, ignore_eos=True), use_tqdm=False)
        return [o.outputs[0].token_ids for o in outs]
    finally:
        llm.shutdown()


def test_tp2_matches_tp1(qwen_vl_folder: Path) -> None:
    expected = greedy(qwen_vl_folder)
    assert greedy(qwen_vl_folder, tensor_parallel_size=2, distributed_executor_backend="mp") == expected
