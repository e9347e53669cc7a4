"""Qwen2.5-VL through the engine against HF transformers: greedy tokens identical and logprobs within 1e-4
for prompts with 0, 1 and 2 images of different sizes, through chunked prefill (an image straddling a chunk
boundary, its tower run once), prefix-cache hits and misses, preemption and async scheduling."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
from qwen_vl_reference import HFQwenVL, make_image

from infercore import LLM, SamplingParams
from infercore.outputs import RequestOutput

PIL_IMAGE = pytest.importorskip("PIL.Image")
MAX_TOKENS = 12
TOLERANCE = 1e-4
ENGINE = {"dtype": "float32", "max_model_len": 512, "num_gpu_blocks_override": 160, "max_num_seqs": 8,
          "cpu_threads": 1}
#: (question, image sizes): 0, 1 and 2 images of different sizes and token counts (6, 20 and 24).
CASES = [("say something about cats", []), ("what is in the picture", [(56, 84)]),
         ("compare these two", [(150, 100), (112, 168)])]


def conversation(question: str, num_images: int) -> list[dict[str, Any]]:
    parts: list[dict[str, Any]] = [{"type": "image"} for _ in range(num_images)]
    return [{"role": "user", "content": [*parts, {"type": "text", "text": question}]}]


class Cases:
    """The prompts, their images and HF's answers (computed once per module)."""

    def __init__(self, folder: Path) -> None:
        self.hf = HFQwenVL(folder)
        self.items: list[tuple[str, list[Any]]] = []
        for i, (question, sizes) in enumerate(CASES):
            text = self.hf.tokenizer.apply_chat_template(conversation(question, len(sizes)), tokenize=False,
                                                         add_generation_prompt=True)
            self.items.append((text, [make_image(h, w, seed=10 * i + j) for j, (h, w) in enumerate(sizes)]))
        self.refs = [self.hf.greedy(text, images, MAX_TOKENS) for text, images in self.items]

    def prompts(self) -> list[dict[str, Any]]:
        return [{"prompt": text, "multi_modal_data": {"image": [PIL_IMAGE.fromarray(i) for i in images]}}
                if images else {"prompt": text} for text, images in self.items]


@pytest.fixture(scope="module")
def cases(qwen_vl_folder: Path) -> Cases:
    return Cases(qwen_vl_folder)


GREEDY = SamplingParams(temperature=0, max_tokens=MAX_TOKENS, ignore_eos=True, logprobs=5)


def check(outputs: list[RequestOutput], refs: list[tuple[list[int], Any]]) -> None:
    for i, (out, (tokens, logprobs)) in enumerate(zip(outputs, refs, strict=True)):
        completion = out.outputs[0]
        assert completion.token_ids == tokens, f"case {i}"
        assert completion.logprobs is not None
        for step, position in enumerate(completion.logprobs):
            for token_id, lp in position.items():
                assert abs(lp.logprob - float(logprobs[step, token_id])) < TOLERANCE, f"case {i} step {step}"


def run(folder: Path, prompts: list[dict[str, Any]], **engine: Any) -> tuple[list[RequestOutput], LLM]:
    llm = LLM(model=str(folder), **{**ENGINE, **engine})
    return llm.generate(prompts, GREEDY, use_tqdm=False), llm


def test_matches_hf_in_one_batch(qwen_vl_folder: Path, cases: Cases) -> None:
    outputs, llm = run(qwen_vl_folder, cases.prompts())
    check(outputs, cases.refs)
    image_tokens = [sum(1 for t in o.prompt_token_ids if t == cases.hf.config.image_token_id) for o in outputs]
    assert image_tokens == [0, 6, 44]
    llm.shutdown()


def test_chunked_prefill_runs_each_tower_once(qwen_vl_folder: Path, cases: Cases) -> None:
    # One request at a time in 16-token chunks: chunk boundaries at multiples of 16.
    outputs, llm = run(qwen_vl_folder, cases.prompts(), max_num_batched_tokens=16, max_num_seqs=1)
    check(outputs, cases.refs)
    pad = cases.hf.config.image_token_id
    ids = outputs[2].prompt_token_ids
    first = ids.index(pad)
    assert first // 16 != (first + 19) // 16, "the first image does not straddle a chunk boundary"
    assert llm.llm_engine.engine_core.executor.runner.mm.num_encoded == 3
    llm.shutdown()


def test_prefix_cache_same_image_hits_other_image_misses(qwen_vl_folder: Path, cases: Cases) -> None:
    text, images = cases.items[1]
    other = make_image(56, 84, seed=99)
    llm = LLM(model=str(qwen_vl_folder), **ENGINE)
    first = llm.generate([{"prompt": text, "multi_modal_data": {"image": PIL_IMAGE.fromarray(images[0])}}],
                         GREEDY, use_tqdm=False)[0]
    again = llm.generate([{"prompt": text, "multi_modal_data": {"image": PIL_IMAGE.fromarray(images[0])}}],
                         GREEDY, use_tqdm=False)[0]
    changed = llm.generate([{"prompt": text, "multi_modal_data": {"image": PIL_IMAGE.fromarray(other)}}],
                           GREEDY, use_tqdm=False)[0]
    offset = first.prompt_token_ids.index(cases.hf.config.image_token_id)
    assert first.num_cached_tokens == 0
    assert again.num_cached_tokens > offset + 6, "the same image did not hit the blocks it fills"
    assert changed.num_cached_tokens <= offset, "a different image reused the first image's blocks"
    check([again], [cases.refs[1]])
    check([changed], [cases.hf.greedy(text, [other], MAX_TOKENS)])
    llm.shutdown()


def test_preemption_and_async_scheduling(qwen_vl_folder: Path, cases: Cases) -> None:
    prompts = cases.prompts() * 3
    outputs, llm = run(qwen_vl_folder, prompts, num_gpu_blocks_override=14, max_model_len=160, async_scheduling=True,
                       max_num_batched_tokens=64)
    core = llm.llm_engine.engine_core
    assert core.async_mode and core.scheduler.num_preemptions > 0
    check(outputs, cases.refs * 3)
    llm.shutdown()


def test_chat_with_an_image_url_part(qwen_vl_folder: Path, cases: Cases) -> None:
    import base64
    import io

    image = make_image(84, 112, seed=7)
    buffer = io.BytesIO()
    PIL_IMAGE.fromarray(image).save(buffer, format="PNG")
    url = "data:image/png;base64," + base64.b64encode(buffer.getvalue()).decode()
    messages = [{"role": "user", "content": [{"type": "image_url", "image_url": {"url": url}},
                                             {"type": "text", "text": "what is this"}]}]
    llm = LLM(model=str(qwen_vl_folder), **ENGINE)
    out = llm.chat(messages, GREEDY, use_tqdm=False)[0]
    # LLM.chat hands the template the parts (each image as {"type": "image"}), as Qwen's processor does.
    parts = [{"role": "user", "content": [{"type": "image"}, {"type": "text", "text": "what is this"}]}]
    text = cases.hf.tokenizer.apply_chat_template(parts, tokenize=False, add_generation_prompt=True)
    assert "<|vision_start|><|image_pad|><|vision_end|>what is this" in text
    check([out], [cases.hf.greedy(text, [image], MAX_TOKENS)])
    llm.shutdown()
