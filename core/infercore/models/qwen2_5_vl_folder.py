"""Qwen2.5-VL model folders as the Qwen repositories ship them, for tests and benchmarks: ``config.json``,
``preprocessor_config.json``, a tokenizer with the vision special tokens and a chat template that renders
image parts as ``<|vision_start|><|image_pad|><|vision_end|>`` (what the real template does), and (unless
the weights will be dummy) random safetensors weights written by transformers.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from infercore.models.qwen2_5_vl_image import QwenVLImageSettings
from infercore.tiny_models import build_tokenizer, set_generation_eos

VISION_SPECIAL_TOKENS = ["<|endoftext|>", "<|im_start|>", "<|im_end|>", "<|vision_start|>", "<|vision_end|>",
                         "<|image_pad|>", "<|video_pad|>"]
IMAGE_PLACEHOLDER = "<|vision_start|><|image_pad|><|vision_end|>"

#: Qwen2.5-VL's chat layout: ChatML turns, image parts as the vision placeholder, a default system turn.
CHAT_TEMPLATE = (
    "{% for message in messages %}"
    "{% if loop.first and message.role != 'system' %}<|im_start|>system\nYou are a helpful assistant.<|im_end|>\n"
    "{% endif %}<|im_start|>{{ message.role }}\n"
    "{% if message.content is string %}{{ message.content }}{% else %}{% for part in message.content %}"
    "{% if part.type == 'image' or part.type == 'image_url' or 'image' in part %}"
    "<|vision_start|><|image_pad|><|vision_end|>"
    "{% elif part.type == 'text' %}{{ part.text }}{% endif %}{% endfor %}{% endif %}<|im_end|>\n"
    "{% endfor %}{% if add_generation_prompt %}<|im_start|>assistant\n{% endif %}"
)

#: Small enough for CPU tests: 2 decoder layers, a 3-block tower with one full-attention block (its MLP width, 44,
#: is not a multiple of 8 per rank, so the tower pads it as it does 7B's 3420).
TINY_TEXT = {"hidden_size": 64, "intermediate_size": 96, "num_hidden_layers": 2, "num_attention_heads": 4,
             "num_key_value_heads": 2, "max_position_embeddings": 2048, "rms_norm_eps": 1e-6,
             "rope_parameters": {"rope_type": "default", "rope_theta": 10000.0, "mrope_section": [2, 3, 3]}}
TINY_VISION = {"depth": 3, "hidden_size": 32, "intermediate_size": 44, "num_heads": 4, "out_hidden_size": 64,
               "fullatt_block_indexes": [1], "window_size": 56, "patch_size": 14, "spatial_merge_size": 2,
               "temporal_patch_size": 2}
#: Images of at most 16x16 patches (64 LLM tokens) in tests.
TINY_IMAGE = QwenVLImageSettings(min_pixels=28 * 28, max_pixels=224 * 224)

#: Qwen2.5-VL-7B-Instruct's shapes.
SHAPES_7B_TEXT = {"hidden_size": 3584, "intermediate_size": 18944, "num_hidden_layers": 28, "num_attention_heads": 28,
                  "num_key_value_heads": 4, "max_position_embeddings": 128000, "rms_norm_eps": 1e-6,
                  "vocab_size": 152064,
                  "rope_parameters": {"rope_type": "default", "rope_theta": 1000000.0, "mrope_section": [16, 24, 24]}}
SHAPES_7B_VISION = {"depth": 32, "hidden_size": 1280, "intermediate_size": 3420, "num_heads": 16,
                    "out_hidden_size": 3584, "fullatt_block_indexes": [7, 15, 23, 31], "window_size": 112,
                    "patch_size": 14, "spatial_merge_size": 2, "temporal_patch_size": 2, "tokens_per_second": 2}


def build_qwen2_5_vl_folder(path: str | Path, seed: int = 0, text: dict[str, Any] | None = None,
                            vision: dict[str, Any] | None = None, image: QwenVLImageSettings = TINY_IMAGE,
                            weights: bool = True, dtype: str = "float32") -> Path:
    """Write a Qwen2.5-VL folder (tiny by default); ``weights=False`` leaves the weights out (for
    ``load_format="dummy"``)."""
    import torch
    from transformers import AutoTokenizer, Qwen2_5_VLConfig, Qwen2_5_VLForConditionalGeneration

    path = Path(path)
    build_tokenizer(path, seed=seed, special_tokens=VISION_SPECIAL_TOKENS, added_tokens=[],
                    chat_template=CHAT_TEMPLATE)
    tokenizer = AutoTokenizer.from_pretrained(str(path))
    ids = {t: tokenizer.convert_tokens_to_ids(t) for t in VISION_SPECIAL_TOKENS}
    text_config = dict(TINY_TEXT if text is None else text)
    text_config.setdefault("vocab_size", len(tokenizer))
    text_config.update(bos_token_id=None, eos_token_id=ids["<|im_end|>"], pad_token_id=ids["<|endoftext|>"])
    config = Qwen2_5_VLConfig(text_config=text_config, vision_config=dict(TINY_VISION if vision is None else vision),
                              image_token_id=ids["<|image_pad|>"], video_token_id=ids["<|video_pad|>"],
                              vision_start_token_id=ids["<|vision_start|>"], vision_end_token_id=ids["<|vision_end|>"],
                              tie_word_embeddings=False, architectures=["Qwen2_5_VLForConditionalGeneration"],
                              eos_token_id=ids["<|im_end|>"], pad_token_id=ids["<|endoftext|>"], dtype=dtype)
    (path / "preprocessor_config.json").write_text(json.dumps(image.to_dict(), indent=2))
    if not weights:
        config.save_pretrained(str(path))
        return path
    torch.manual_seed(seed)
    model = Qwen2_5_VLForConditionalGeneration(config).to(getattr(torch, dtype))
    with torch.no_grad():
        # Wider than HF's init so greedy tokens vary and images change them.
        for p in model.parameters():
            if p.dim() >= 2:
                p.normal_(0.0, 0.1)
    model.save_pretrained(str(path), safe_serialization=True)
    set_generation_eos(path, ids["<|im_end|>"])
    return path
