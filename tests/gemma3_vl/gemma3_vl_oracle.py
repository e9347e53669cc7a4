"""HF's Gemma3ForConditionalGeneration as the oracle: greedy tokens and per-step logprobs for a prompt's expanded
token ids and its images (HF's image processor; ``token_type_ids`` marking the image soft tokens, as HF's
processor makes them, so HF applies its bidirectional image mask)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import torch
from hf_vlm_oracle import TOLERANCE, HFVisionOracle

MAX_NEW_TOKENS = 10
__all__ = ["MAX_NEW_TOKENS", "TOLERANCE", "Gemma3Oracle"]


class Gemma3Oracle(HFVisionOracle):
    hf_class = "Gemma3ForConditionalGeneration"
    max_new_tokens = MAX_NEW_TOKENS

    def __init__(self, folder: Path) -> None:
        super().__init__(folder)
        self.image_token_id = self.model.config.image_token_id

    def extra_inputs(self, ids: torch.Tensor) -> dict[str, Any]:
        return {"token_type_ids": (ids == self.image_token_id).long()}
