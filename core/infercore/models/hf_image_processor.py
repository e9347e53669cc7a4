"""The base of processors whose images go through the checkpoint's own HF image processor
(``preprocessor_config.json``, loaded with ``AutoImageProcessor``, PIL backend: no torchvision)."""

from __future__ import annotations

import json
import logging
from typing import TYPE_CHECKING, Any

from infercore.models.multimodal import MultiModalProcessor, ProcessedImage

if TYPE_CHECKING:
    from PIL import Image


class HFImageProcessorBase(MultiModalProcessor):
    """Loads the checkpoint's image processor into :attr:`image_processor`; each image becomes its
    ``pixel_values`` and :attr:`num_image_tokens` placeholder tokens. Subclasses set the tokens."""

    def __init__(self, hf_config: Any, model_path: str, tokenizer: Any) -> None:
        super().__init__(hf_config, model_path, tokenizer)
        from transformers import AutoImageProcessor

        # Without torchvision, transformers falls back to the PIL backend and says so at WARNING: that is
        # the backend meant here.
        quiet = logging.getLogger("transformers")
        level = quiet.level
        quiet.setLevel(logging.ERROR)
        try:
            self.image_processor = AutoImageProcessor.from_pretrained(model_path)
        finally:
            quiet.setLevel(level)
        self.num_image_tokens = 0
        self._settings = json.dumps(self.image_processor.to_dict(), sort_keys=True, default=str)

    def process_image(self, image: Image.Image) -> ProcessedImage:
        """The image processor's ``pixel_values`` of one image (as RGB) and its placeholder count."""
        pixels = self.image_processor(images=image.convert("RGB"), return_tensors="np")["pixel_values"]
        return ProcessedImage({"pixel_values": pixels[0]}, self.num_image_tokens)

    def settings_key(self) -> str:
        """The image processor's settings, as sorted JSON."""
        return self._settings
