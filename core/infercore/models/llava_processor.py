"""LLaVA's front-end half: the checkpoint's HF image processor (CLIP's or SigLIP's, PIL backend: no
torchvision) and the placeholder count of one image."""

from __future__ import annotations

from typing import Any

from infercore.models.hf_image_processor import HFImageProcessorBase


def llava_image_tokens(hf_config: Any) -> int:
    """Placeholder tokens per image: the tower's patches, plus CLIP's class token unless the feature
    strategy is ``default`` (which drops the first token)."""
    vision = hf_config.vision_config
    tokens = (vision.image_size // vision.patch_size) ** 2
    if vision.model_type.startswith("clip"):
        tokens += 1
    if getattr(hf_config, "vision_feature_select_strategy", "default") == "default":
        tokens -= 1
    return tokens


def image_token_id(hf_config: Any) -> int:
    token = getattr(hf_config, "image_token_index", None)
    if token is None:
        token = getattr(hf_config, "image_token_id", None)
    if token is None:
        raise ValueError("the model's config names no image token (image_token_index); it cannot take images")
    return int(token)


class LlavaProcessor(HFImageProcessorBase):
    """Resizes, crops and normalizes with the checkpoint's image processor (``preprocessor_config.json``);
    each image becomes :func:`llava_image_tokens` copies of the image token."""

    def __init__(self, hf_config: Any, model_path: str, tokenizer: Any) -> None:
        super().__init__(hf_config, model_path, tokenizer)
        self.placeholder_token_id = image_token_id(hf_config)
        self.num_image_tokens = llava_image_tokens(hf_config)
        if tokenizer is not None:
            self.placeholder_text = tokenizer.convert_ids_to_tokens(self.placeholder_token_id)
