"""Gemma 3 with images (``Gemma3ForConditionalGeneration``, the 4B/12B/27B checkpoints): a SigLIP vision tower
(read after its post-norm), Gemma 3's multimodal projector (average-pool the patch grid down to
``mm_tokens_per_image`` tokens, Gemma RMSNorm, a projection matrix) and the Gemma 3 text model with its sliding
and global layers (:mod:`infercore.models.gemma3`).

Each image's tokens attend to the whole image during prefill, as HF's model does (its mask ORs "same image"
into the causal mask of every layer, sliding layers keeping their window): the model sets
``bidirectional_image_spans``, so the runner gives attention per-token visibility bounds
(:mod:`infercore.attention.visible_bounds`) and the scheduler never splits an image across steps
(:mod:`infercore.scheduler.image_spans`).
"""

from __future__ import annotations

from typing import ClassVar

import torch
from torch import nn
from transformers import PretrainedConfig

from infercore.layers import GemmaRMSNorm
from infercore.models.gemma3 import Gemma3ForCausalLM
from infercore.models.gemma3_vl_processor import Gemma3Processor
from infercore.models.tower_and_decoder import TowerProjectorDecoder
from infercore.models.vision_encoder import VisionTower


class Gemma3MultiModalProjector(nn.Module):
    """Patch grid [N, side², vision] → ``avg_pool`` to [N, tokens, vision] → Gemma RMSNorm → ``@ weight``
    ([vision, text], a plain matrix in the checkpoint) → [N, tokens, text]."""

    def __init__(self, config: PretrainedConfig) -> None:
        super().__init__()
        vision = config.vision_config
        self.patches_per_side = vision.image_size // vision.patch_size
        tokens_per_side = int(config.mm_tokens_per_image**0.5)
        if tokens_per_side**2 != config.mm_tokens_per_image or self.patches_per_side % tokens_per_side:
            raise ValueError(f"mm_tokens_per_image={config.mm_tokens_per_image} is not a square that divides the "
                             f"tower's {self.patches_per_side}x{self.patches_per_side} patch grid")
        self.kernel = self.patches_per_side // tokens_per_side
        self.mm_soft_emb_norm = GemmaRMSNorm(vision.hidden_size, eps=vision.layer_norm_eps)
        self.mm_input_projection_weight = nn.Parameter(torch.empty(vision.hidden_size,
                                                                   config.text_config.hidden_size))

    def forward(self, patches: torch.Tensor) -> torch.Tensor:
        n, _, width = patches.shape
        side = self.patches_per_side
        grid = patches.transpose(1, 2).reshape(n, width, side, side)
        pooled = nn.functional.avg_pool2d(grid, self.kernel, self.kernel).flatten(2).transpose(1, 2)
        normed = self.mm_soft_emb_norm(pooled.reshape(-1, width)).view(pooled.shape)
        return torch.matmul(normed, self.mm_input_projection_weight)


class Gemma3ForConditionalGeneration(TowerProjectorDecoder):
    """``Gemma3ForConditionalGeneration`` checkpoints, in both HF layouts (``model.vision_tower.…`` /
    ``model.language_model.…`` and the older ``vision_tower.…`` / ``language_model.model.…``)."""

    family: ClassVar[str] = "Gemma 3"
    multimodal_processor: ClassVar[type[Gemma3Processor]] = Gemma3Processor
    #: Image tokens see their whole image in prefill (:mod:`infercore.attention.visible_bounds`).
    bidirectional_image_spans: ClassVar[bool] = True

    def __init__(self, hf_config: PretrainedConfig, dtype: torch.dtype) -> None:
        super().__init__()
        self.config = hf_config
        text_config = hf_config.text_config
        if getattr(hf_config, "tie_word_embeddings", None) is not None:
            text_config.tie_word_embeddings = hf_config.tie_word_embeddings
        self.vision_tower = VisionTower(hf_config.vision_config, [-1], post_norm=True)
        self.multi_modal_projector = Gemma3MultiModalProjector(hf_config)
        self.language_model = Gemma3ForCausalLM(text_config, dtype)

    def embed_multimodal(self, items: list[dict[str, torch.Tensor]]) -> list[torch.Tensor]:
        """Each image's projected features [mm_tokens_per_image, text hidden]: one tower call for all."""
        pixels = torch.stack([item["pixel_values"].reshape(item["pixel_values"].shape[-3:]) for item in items])
        hidden = self.vision_tower(pixels)[0]
        return list(self.multi_modal_projector(hidden).unbind(0))
