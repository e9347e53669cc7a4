"""Prefix caching with images (the same image hits, a different image with the same text misses from its
first block on), ``LLM.chat`` with image parts, and the processed-input cache."""

from __future__ import annotations

from mm_images import data_uri, random_image
from vlm_oracle import MAX_NEW_TOKENS, LlavaOracle

from infercore import LLM, SamplingParams

PARAMS = SamplingParams(temperature=0, max_tokens=MAX_NEW_TOKENS, min_tokens=MAX_NEW_TOKENS, logprobs=1)
TEXT = "the model of the token cache <image> describe the picture in detail please"


def test_prefix_cache_hits_the_same_image_and_misses_another(llava_clip_folder):
    llm = LLM(str(llava_clip_folder), dtype="float32", max_model_len=128, block_size=4, enforce_eager=True)
    mm = llm.llm_engine.engine_core.executor.worker.runner.mm
    mm.profile(40)  # memory profiling's pass over a step's worth of blank images counts as no encoding
    assert mm.num_encoded == 0
    first, other = random_image(40, 50, seed=1), random_image(40, 50, seed=2)
    a = llm.generate({"prompt": TEXT, "multi_modal_data": {"image": first}}, PARAMS, use_tqdm=False)[0]
    encoded = mm.num_encoded
    b = llm.generate({"prompt": TEXT, "multi_modal_data": {"image": first.copy()}}, PARAMS, use_tqdm=False)[0]
    c = llm.generate({"prompt": TEXT, "multi_modal_data": {"image": other}}, PARAMS, use_tqdm=False)[0]
    ids = a.prompt_token_ids
    image_token = llm.llm_engine.input_processor.mm.processor.placeholder_token_id
    offset, end = ids.index(image_token), len(ids) - ids[::-1].index(image_token)
    assert b.num_cached_tokens >= end, "the same image missed the prefix cache"
    assert mm.num_encoded == encoded + 1, "a prefix hit over the whole image still ran the tower"
    assert b.outputs[0].token_ids == a.outputs[0].token_ids
    assert c.num_cached_tokens <= offset, "a different image hit blocks of the first one"
    LlavaOracle(llava_clip_folder).check(c, [other], "different image, same text")
    # Two requests of one step holding the same image: the tower runs once for both.
    third = random_image(20, 20, seed=3)
    encoded = mm.num_encoded
    twins = llm.generate([{"prompt": TEXT, "multi_modal_data": {"image": third}}] * 2, PARAMS, use_tqdm=False)
    assert mm.num_encoded == encoded + 1
    assert twins[0].outputs[0].token_ids == twins[1].outputs[0].token_ids


def test_chat_with_image_parts_matches_generate(llava_siglip_folder):
    llm = LLM(str(llava_siglip_folder), dtype="float32", max_model_len=128, enforce_eager=True)
    image = random_image(30, 20, seed=5)
    messages = [{"role": "user", "content": [{"type": "image_url", "image_url": {"url": data_uri(image)}},
                                             {"type": "text", "text": "what is this"}]}]
    chat = llm.chat(messages, PARAMS, use_tqdm=False)[0]
    pil = llm.chat([{"role": "user", "content": [{"type": "image_pil", "image_pil": image},
                                                 {"type": "text", "text": "what is this"}]}], PARAMS, use_tqdm=False)[0]
    assert chat.outputs[0].token_ids == pil.outputs[0].token_ids
    assert chat.prompt.count("<image>") == 1 and "what is this" in chat.prompt
    LlavaOracle(llava_siglip_folder).check(chat, [image], "chat")
    # A template that reads string contents only gets the image parts as placeholder text.
    plain = llm.chat(messages, PARAMS, use_tqdm=False, chat_template="{% for m in messages %}{{ m.content }}{% endfor %}")
    assert plain[0].prompt == "<image>\nwhat is this"
    cache = llm.llm_engine.input_processor.mm.cache
    assert cache.hits >= 1 and len(cache) == 1, "the same image was processed twice"
