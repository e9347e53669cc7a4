"""Tiny LLaVA model folders (CLIP or SigLIP tower, Llama or Qwen2 decoder) with random weights, a trained
tokenizer holding an ``<image>`` token, a chat template that renders image parts, and the tower's real HF
image processor config (``preprocessor_config.json``): a folder loads exactly like one from the hub.

Also :func:`llava_config_folder`: a config-only folder of a real model's shape for dummy-weight benchmarks.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from infercore.tiny_models import (
    CHAT_TEMPLATE,
    DEFAULT_ADDED_TOKENS,
    build_tokenizer,
    set_generation_eos,
    tiny_config,
)

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
    set_generation_eos(path, tokenizer.eos_token_id)
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


#: Gemma 3's image placeholder, its end marker and its soft token (the names the real checkpoints use).
BOI_TOKEN, EOI_TOKEN, IMAGE_SOFT_TOKEN = "<start_of_image>", "<end_of_image>", "<image_soft_token>"
#: The vision chat template with image parts rendered as Gemma 3's placeholder.
GEMMA3_CHAT_TEMPLATE = VISION_CHAT_TEMPLATE.replace(IMAGE_TOKEN, BOI_TOKEN)


def build_gemma3_vl_folder(path: str | Path, seed: int = 0, image_size: int = 32, patch_size: int = 4,
                           mm_tokens_per_image: int = 16, sliding_window: int | None = None) -> Path:
    """Write a random-weight ``Gemma3ForConditionalGeneration`` folder (3-layer SigLIP tower, the tiny Gemma 3
    text model: two sliding layers, their window as long as an image, and a global one) with Gemma 3's image processor (PIL backend)
    and a tokenizer naming its image tokens as Gemma's does; returns it."""
    import torch
    from transformers import (
        AutoTokenizer,
        Gemma3Config,
        Gemma3ForConditionalGeneration,
        Gemma3ImageProcessorPil,
    )

    path = Path(path)
    build_tokenizer(path, seed=seed, added_tokens=[*DEFAULT_ADDED_TOKENS, BOI_TOKEN, EOI_TOKEN, IMAGE_SOFT_TOKEN],
                    chat_template=GEMMA3_CHAT_TEMPLATE)
    cfg_path = path / "tokenizer_config.json"
    cfg = json.loads(cfg_path.read_text())
    # What HF's Gemma3Processor reads from the tokenizer (the real checkpoints' tokenizer_config has them).
    cfg["extra_special_tokens"] = {"boi_token": BOI_TOKEN, "eoi_token": EOI_TOKEN, "image_token": IMAGE_SOFT_TOKEN}
    cfg_path.write_text(json.dumps(cfg, indent=2))
    tokenizer = AutoTokenizer.from_pretrained(str(path))
    # By default a window as long as an image: transformers versions differ on whether a sliding layer's window
    # bounds what an image token sees of its own image (5.25: it does), which only a longer image shows.
    text_config = tiny_config("Gemma3ForCausalLM", vocab_size=len(tokenizer), final_logit_softcapping=None,
                              sliding_window=sliding_window or mm_tokens_per_image)
    text_config.eos_token_id = tokenizer.eos_token_id
    text_config.bos_token_id = None
    text_config.pad_token_id = tokenizer.pad_token_id
    ids = tokenizer.convert_tokens_to_ids([BOI_TOKEN, EOI_TOKEN, IMAGE_SOFT_TOKEN])
    config = Gemma3Config(text_config=text_config.to_dict(),
                          vision_config=tiny_vision_config("siglip", image_size, patch_size).to_dict(),
                          mm_tokens_per_image=mm_tokens_per_image, boi_token_index=ids[0], eoi_token_index=ids[1],
                          image_token_index=ids[2], tie_word_embeddings=True)
    config.architectures = ["Gemma3ForConditionalGeneration"]
    torch.manual_seed(seed)
    model = Gemma3ForConditionalGeneration(config)
    with torch.no_grad():
        for name, p in model.named_parameters():
            if p.dim() >= 2:
                p.normal_(0.0, 0.1)
            elif "norm" in name:
                p.normal_(0.0, 0.1)  # Gemma norms scale by 1 + weight: make them matter
    model.save_pretrained(str(path), safe_serialization=True)
    Gemma3ImageProcessorPil(size={"height": image_size, "width": image_size}).save_pretrained(str(path))
    (path / "processor_config.json").write_text(json.dumps({"processor_class": "Gemma3Processor",
                                                            "image_seq_length": mm_tokens_per_image}, indent=2))
    set_generation_eos(path, tokenizer.eos_token_id)
    return path


def gemma3_vl_config_folder(path: str | Path) -> Path:
    """A config-only Gemma-3-4B-shaped folder (SigLIP so400m at 896 px, 34 text layers, five sliding to one
    global, 256 image tokens) with Gemma 3's image processor and a tiny tokenizer, for ``load_format="dummy"``."""
    from transformers import AutoTokenizer, Gemma3Config, Gemma3ImageProcessorPil, SiglipVisionConfig

    path = Path(path)
    build_tokenizer(path, added_tokens=[*DEFAULT_ADDED_TOKENS, BOI_TOKEN, EOI_TOKEN, IMAGE_SOFT_TOKEN],
                    chat_template=GEMMA3_CHAT_TEMPLATE)
    tokenizer = AutoTokenizer.from_pretrained(str(path))
    ids = tokenizer.convert_tokens_to_ids([BOI_TOKEN, EOI_TOKEN, IMAGE_SOFT_TOKEN])
    text = dict(vocab_size=262208, hidden_size=2560, intermediate_size=10240, num_hidden_layers=34,
                num_attention_heads=8, num_key_value_heads=4, head_dim=256, sliding_window=1024,
                query_pre_attn_scalar=256, max_position_embeddings=131072, rms_norm_eps=1e-6,
                eos_token_id=tokenizer.eos_token_id, pad_token_id=tokenizer.pad_token_id, bos_token_id=None,
                rope_parameters={"sliding_attention": {"rope_type": "default", "rope_theta": 10000.0},
                                 "full_attention": {"rope_type": "linear", "factor": 8.0, "rope_theta": 1000000.0}},
                layer_types=["full_attention" if (i + 1) % 6 == 0 else "sliding_attention" for i in range(34)])
    vision = SiglipVisionConfig(hidden_size=1152, intermediate_size=4304, num_hidden_layers=27, num_attention_heads=16,
                                image_size=896, patch_size=14, vision_use_head=False, hidden_act="gelu_pytorch_tanh",
                                layer_norm_eps=1e-6)
    config = Gemma3Config(text_config=text, vision_config=vision.to_dict(), mm_tokens_per_image=256,
                          boi_token_index=ids[0], eoi_token_index=ids[1], image_token_index=ids[2])
    config.architectures = ["Gemma3ForConditionalGeneration"]
    config.save_pretrained(str(path))
    Gemma3ImageProcessorPil(size={"height": 896, "width": 896}).save_pretrained(str(path))
    return path
