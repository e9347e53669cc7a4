"""Tiny LLaVA model folders (CLIP or SigLIP tower, Llama or Qwen2 decoder) with random weights, a trained
tokenizer holding an ``<image>`` token, a chat template that renders image parts, and the tower's real HF
image processor config (``preprocessor_config.json``): a folder loads exactly like one from the hub.

Also :func:`llava_config_folder`: a config-only folder of a real model's shape for dummy-weight benchmarks.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from infercore.tiny_models import CHAT_TEMPLATE, DEFAULT_ADDED_TOKENS, build_tokenizer, tiny_config

IMAGE_TOKEN = "<image>"

#: The tiny models' ChatML template, with image parts rendered as the image token (text parts as text).
VISION_CHAT_TEMPLATE = CHAT_TEMPLATE.replace(
    "{{ message.content if message.content is string else '' }}",
    "{% if message.content is string %}{{ message.content }}{% else %}{% for part in message.content %}"
    "{% if part.type == 'image' %}" + IMAGE_TOKEN + "{% elif part.type == 'text' %}{{ part.text }}{% endif %}"
    "{% endfor %}{% endif %}")


def tiny_vision_config(tower: str, image_size: int, patch_size: int) -> Any:
    """A 3-layer CLIP or SigLIP vision config of width 32."""
    from transformers import CLIPVisionConfig, SiglipVisionConfig

    common = dict(hidden_size=32, intermediate_size=64, num_hidden_layers=3, num_attention_heads=4,
                  image_size=image_size, patch_size=patch_size, layer_norm_eps=1e-5)
    if tower == "clip":
        return CLIPVisionConfig(hidden_act="quick_gelu", **common)
    if tower == "siglip":
        return SiglipVisionConfig(hidden_act="gelu_pytorch_tanh", **common)
    raise ValueError(f"tower must be 'clip' or 'siglip', got {tower!r}")


def _image_processor(tower: str, image_size: int) -> Any:
    if tower == "clip":
        from transformers import CLIPImageProcessor

        return CLIPImageProcessor(size={"shortest_edge": image_size},
                                  crop_size={"height": image_size, "width": image_size})
    from transformers import SiglipImageProcessor

    return SiglipImageProcessor(size={"height": image_size, "width": image_size})


def build_llava_folder(path: str | Path, tower: str = "clip", text_architecture: str = "LlamaForCausalLM",
                       seed: int = 0, image_size: int = 28, patch_size: int = 7,
                       feature_strategy: str | None = None, feature_layer: int | list[int] = -2) -> Path:
    """Write a random-weight ``LlavaForConditionalGeneration`` folder; returns it. ``feature_strategy``
    defaults to LLaVA's ``default`` (CLS dropped) for CLIP and ``full`` for SigLIP."""
    import torch
    from transformers import AutoTokenizer, LlavaConfig, LlavaForConditionalGeneration

    path = Path(path)
    build_tokenizer(path, seed=seed, added_tokens=[*DEFAULT_ADDED_TOKENS, IMAGE_TOKEN],
                    chat_template=VISION_CHAT_TEMPLATE)
    tokenizer = AutoTokenizer.from_pretrained(str(path))
    text_config = tiny_config(text_architecture, vocab_size=len(tokenizer))
    text_config.eos_token_id = tokenizer.eos_token_id
    text_config.bos_token_id = None
    text_config.pad_token_id = tokenizer.pad_token_id
    strategy = feature_strategy or ("default" if tower == "clip" else "full")
    config = LlavaConfig(vision_config=tiny_vision_config(tower, image_size, patch_size), text_config=text_config,
                         image_token_index=tokenizer.convert_tokens_to_ids(IMAGE_TOKEN),
                         vision_feature_select_strategy=strategy, vision_feature_layer=feature_layer,
                         projector_hidden_act="gelu")
    config.architectures = ["LlavaForConditionalGeneration"]
    torch.manual_seed(seed)
    model = LlavaForConditionalGeneration(config)
    with torch.no_grad():
        for p in model.parameters():
            if p.dim() >= 2:
                p.normal_(0.0, 0.1)
    model.save_pretrained(str(path), safe_serialization=True)
    _image_processor(tower, image_size).save_pretrained(str(path))
    gen = path / "generation_config.json"
    if gen.exists():
        cfg = json.loads(gen.read_text())
        cfg["eos_token_id"] = tokenizer.eos_token_id
        gen.write_text(json.dumps(cfg, indent=2))
    return path


def llava_config_folder(path: str | Path, tokenizer_from: str | Path | None = None) -> Path:
    """A config-only LLaVA-1.5-7B-shaped folder (CLIP ViT-L/14 at 336 px, Llama-2-7B decoder, 576 image
    tokens) with a CLIP image processor and a tiny tokenizer, for ``load_format="dummy"`` runs."""
    from transformers import CLIPVisionConfig, LlamaConfig, LlavaConfig

    path = Path(path)
    build_tokenizer(path, added_tokens=[*DEFAULT_ADDED_TOKENS, IMAGE_TOKEN], chat_template=VISION_CHAT_TEMPLATE)
    from transformers import AutoTokenizer

    tokenizer = AutoTokenizer.from_pretrained(str(path))
    vision = CLIPVisionConfig(hidden_size=1024, intermediate_size=4096, num_hidden_layers=24, num_attention_heads=16,
                              image_size=336, patch_size=14, hidden_act="quick_gelu", projection_dim=768)
    text = LlamaConfig(vocab_size=32064, hidden_size=4096, intermediate_size=11008, num_hidden_layers=32,
                       num_attention_heads=32, num_key_value_heads=32, max_position_embeddings=4096,
                       rms_norm_eps=1e-5, eos_token_id=tokenizer.eos_token_id, pad_token_id=tokenizer.pad_token_id)
    config = LlavaConfig(vision_config=vision, text_config=text, image_token_index=tokenizer.convert_tokens_to_ids(
        IMAGE_TOKEN), vision_feature_select_strategy="default", vision_feature_layer=-2)
    config.architectures = ["LlavaForConditionalGeneration"]
    config.save_pretrained(str(path))
    _image_processor("clip", 336).save_pretrained(str(path))
    return path
