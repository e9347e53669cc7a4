"""HF transformers' greedy tokens and logprobs for Qwen2.5-VL prompts with images (the CI oracle)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np
import torch

from infercore.models.qwen2_5_vl_image import Qwen2_5_VLImageProcessor


class HFQwenVL:
    """The folder's model in transformers (float32), fed the same processed images as the engine."""

    def __init__(self, folder: Path) -> None:
        from transformers import AutoConfig, AutoTokenizer, Qwen2_5_VLForConditionalGeneration

        self.config = AutoConfig.from_pretrained(str(folder))
        self.tokenizer = AutoTokenizer.from_pretrained(str(folder))
        self.model = Qwen2_5_VLForConditionalGeneration.from_pretrained(str(folder), dtype=torch.float32).eval()
        self.images = Qwen2_5_VLImageProcessor.from_model_folder(folder)

    def inputs(self, prompt: str, images: list[Any]) -> dict[str, torch.Tensor]:
        """The prompt's ids with each ``<|image_pad|>`` expanded to its image's token count, and the pixels."""
        pad = int(self.config.image_token_id)
        ids: list[int] = []
        counts = iter(self.images.num_image_tokens(*image.shape[:2]) for image in images)
        for token in self.tokenizer.encode(prompt, add_special_tokens=False):
            ids.extend([pad] * next(counts) if token == pad else [token])
        input_ids = torch.tensor([ids])
        out: dict[str, torch.Tensor] = {"input_ids": input_ids, "attention_mask": torch.ones_like(input_ids)}
        if images:
            processed = self.images(images)
            out.update(pixel_values=processed["pixel_values"], image_grid_thw=processed["image_grid_thw"],
                       mm_token_type_ids=(input_ids == pad).int())
        return out

    def greedy(self, prompt: str, images: list[Any], max_new_tokens: int) -> tuple[list[int], torch.Tensor]:
        """HF's greedy tokens and the log-softmax of each step's logits [steps, vocab]."""
        inputs = self.inputs(prompt, images)
        with torch.no_grad():
            gen = self.model.generate(**inputs, do_sample=False, max_new_tokens=max_new_tokens,
                                      min_new_tokens=max_new_tokens, output_logits=True,
                                      return_dict_in_generate=True, pad_token_id=0)
        tokens = gen.sequences[0, inputs["input_ids"].shape[1]:].tolist()
        return tokens, torch.stack(gen.logits)[:, 0].float().log_softmax(-1)


def make_image(height: int, width: int, seed: int) -> np.ndarray:
    """A deterministic RGB image: a gradient plus noise."""
    rng = np.random.default_rng(seed)
    yy, xx = np.mgrid[0:height, 0:width]
    base = np.stack([xx * 3, yy * 2, (xx + yy)], axis=-1) % 256
    return np.clip(base + rng.integers(0, 64, size=(height, width, 3)), 0, 255).astype(np.uint8)
