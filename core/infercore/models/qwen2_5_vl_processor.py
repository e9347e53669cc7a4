"""Qwen2.5-VL's front-end processor: built from the model folder (``preprocessor_config.json``, the
tokenizer and its chat template), with no torchvision and no transformers processor class.

An image becomes its patches and grid (:mod:`infercore.models.qwen2_5_vl_image`) and
``grid_h * grid_w / merge²`` ``<|image_pad|>`` tokens between ``<|vision_start|>`` and ``<|vision_end|>``.
transformers' ``AutoProcessor`` for this model also loads a video processor, which needs torchvision;
videos are what that would add here.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from infercore.models.multimodal import MultiModalProcessor, ProcessedImage
from infercore.models.qwen2_5_vl_image import Qwen2_5_VLImageProcessor, image_to_array

IMAGE_PLACEHOLDER = "<|vision_start|><|image_pad|><|vision_end|>"


class Qwen2_5_VLMultiModalProcessor(MultiModalProcessor):
    """Images → ``pixel_values`` [patches, 3 * 14 * 14] (one frame: the model repeats it over the temporal
    patch on the device, so half the bytes travel to the workers) and ``image_grid_thw`` [1, 3]."""

    def __init__(self, hf_config: Any, model_path: str, tokenizer: Any) -> None:
        super().__init__(hf_config, model_path, tokenizer)
        self.images = Qwen2_5_VLImageProcessor.from_model_folder(model_path)
        self.placeholder_token_id = int(hf_config.image_token_id)
        self.placeholder_text = IMAGE_PLACEHOLDER

    def process_image(self, image: Any) -> ProcessedImage:
        patches, grid = self.images.preprocess_one(image_to_array(image), repeat_frames=False)
        tokens = grid[0] * grid[1] * grid[2] // self.images.settings.merge_size**2
        return ProcessedImage(data={"pixel_values": patches.numpy(),
                                    "image_grid_thw": np.asarray([grid], dtype=np.int64)}, num_tokens=tokens)

    def settings_key(self) -> str:
        return f"{type(self).__qualname__}:{self.images.settings}"
