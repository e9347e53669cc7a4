"""Gemma 3 with images: prefix caching (the same image hits, a different image with the same text misses, a hit
that ends inside an image computes the rest of it and still matches HF), and ``LLM.chat`` with an image part."""

from __future__ import annotations

from gemma3_vl_oracle import MAX_NEW_TOKENS, Gemma3Oracle
from multimodal.mm_images import data_uri, random_image

from infercore import LLM, SamplingParams

PARAMS = SamplingParams(temperature=0, max_tokens=MAX_NEW_TOKENS, min_tokens=MAX_NEW_TOKENS, logprobs=1)
TEXT = "the model <start_of_image>describe the picture in detail please and then the cache"
OTHER_TAIL = "the model <start_of_image>compare the cache"


def test_prefix_cache_with_images(gemma3_vl_folder):
    # Blocks of 16: the second prompt diverges 3 tokens after its image, so its hit ends inside the image.
    llm = LLM(str(gemma3_vl_folder), dtype="float32", max_model_len=128, block_size=16, enforce_eager=True)
    mm = llm.llm_engine.engine_core.executor.worker.runner.mm
    image_token = llm.llm_engine.input_processor.mm.processor.image_token_id
    first, other = random_image(40, 50, seed=1), random_image(40, 50, seed=2)
    a = llm.generate({"prompt": TEXT, "multi_modal_data": {"image": first}}, PARAMS, use_tqdm=False)[0]
    encoded = mm.num_encoded
    b = llm.generate({"prompt": TEXT, "multi_modal_data": {"image": first.copy()}}, PARAMS, use_tqdm=False)[0]
    c = llm.generate({"prompt": TEXT, "multi_modal_data": {"image": other}}, PARAMS, use_tqdm=False)[0]
    ids = a.prompt_token_ids
    offset, end = ids.index(image_token), len(ids) - ids[::-1].index(image_token)
    assert b.num_cached_tokens >= end, "the same image missed the prefix cache"
    assert mm.num_encoded == encoded + 1, "a prefix hit over the whole image still ran the tower"
    assert b.outputs[0].token_ids == a.outputs[0].token_ids
    assert c.num_cached_tokens <= offset, "a different image hit blocks of the first one"
    oracle = Gemma3Oracle(gemma3_vl_folder)
    oracle.check(c, [other], "different image, same text")
    d = llm.generate({"prompt": OTHER_TAIL, "multi_modal_data": {"image": first}}, PARAMS, use_tqdm=False)[0]
    assert offset < d.num_cached_tokens < end, "the hit should end inside the image"
    oracle.check(d, [first], "hit ending inside the image")


def test_chat_with_an_image_part(gemma3_vl_folder):
    llm = LLM(str(gemma3_vl_folder), dtype="float32", max_model_len=128, enforce_eager=True)
    image = random_image(30, 20, seed=5)
    messages = [{"role": "user", "content": [{"type": "image_url", "image_url": {"url": data_uri(image)}},
                                             {"type": "text", "text": "what is this"}]}]
    chat = llm.chat(messages, PARAMS, use_tqdm=False)[0]
    assert chat.prompt.count("<start_of_image>") == 1 and "<start_of_image>what is this" in chat.prompt
    ids = chat.prompt_token_ids
    start = ids.index(llm.llm_engine.input_processor.mm.processor.image_token_id)
    assert ids[start:].count(ids[start]) == 16
    Gemma3Oracle(gemma3_vl_folder).check(chat, [image], "chat")
