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

from collections.abc import Iterable, Iterator
from typing import ClassVar

import torch
from torch import nn
from transformers import PretrainedConfig

from infercore.layers import GemmaRMSNorm
from infercore.models.gemma3 import Gemma3ForCausalLM
from infercore.models.gemma3_vl_processor import Gemma3Processor
from infercore.models.llava import _split
from infercore.models.multimodal import MultiModalStepInputs
from infercore.models.vision_encoder import STACKED_PARAMS, VisionTower
from infercore.models.weight_loading import load_checkpoint_weights


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


class Gemma3ForConditionalGeneration(nn.Module):
    """``Gemma3ForConditionalGeneration`` checkpoints, in both HF layouts (``model.vision_tower.…`` /
    ``model.language_model.…`` and the older ``vision_tower.…`` / ``language_model.model.…``)."""

    supports_multimodal: ClassVar[bool] = True
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

    @property
    def mm_inputs(self) -> MultiModalStepInputs | None:
        return self.language_model.model.mm_inputs

    @mm_inputs.setter
    def mm_inputs(self, value: MultiModalStepInputs | None) -> None:
        self.language_model.model.mm_inputs = value

    def embed_multimodal(self, items: list[dict[str, torch.Tensor]]) -> list[torch.Tensor]:
        """Each image's projected features [mm_tokens_per_image, text hidden]: one tower call for all."""
        pixels = torch.stack([item["pixel_values"].reshape(item["pixel_values"].shape[-3:]) for item in items])
        hidden = self.vision_tower(pixels)[0]
        return list(self.multi_modal_projector(hidden).unbind(0))

    def dummy_multimodal_item(self) -> dict[str, torch.Tensor]:
        """A blank image of the tower's size (memory profiling)."""
        size = self.config.vision_config.image_size
        weight = self.vision_tower.vision_model.embeddings.patch_embedding.weight
        return {"pixel_values": torch.zeros(3, size, size, device=weight.device)}

    def forward(self, input_ids: torch.Tensor, positions: torch.Tensor) -> torch.Tensor:
        """Flattened tokens [T] and positions [T] → hidden states [T, hidden]; the step's image rows come in
        through ``mm_inputs``."""
        return self.language_model(input_ids, positions)

    def compute_logits(self, hidden: torch.Tensor) -> torch.Tensor:
        return self.language_model.compute_logits(hidden)

    def load_weights(self, weights: Iterable[tuple[str, torch.Tensor]]) -> None:
        """Route each tensor to the tower, the projector or the text model (whose loader takes its own names)."""
        tower: list[tuple[str, torch.Tensor]] = []
        projector: list[tuple[str, torch.Tensor]] = []

        def text() -> Iterator[tuple[str, torch.Tensor]]:
            for name, tensor in weights:
                part, rest = _split(name)
                if part == "language_model":
                    yield rest, tensor
                elif part == "vision_tower":
                    rest = rest.removeprefix("vision_model.")
                    if not self.vision_tower.skips_weight(rest):
                        tower.append((rest, tensor))
                elif part == "multi_modal_projector":
                    projector.append((rest, tensor))
                else:
                    raise ValueError(f"checkpoint tensor {name!r} belongs to no part of Gemma 3 (vision_tower, "
                                     "multi_modal_projector, language_model)")

        self.language_model.load_weights(text())
        load_checkpoint_weights(self.vision_tower.vision_model, tower, STACKED_PARAMS)
        load_checkpoint_weights(self.multi_modal_projector, projector, [])
