"""The shell of a vision-language model made of a vision tower, a projector and a text decoder (LLaVA,
Gemma 3): the step's image rows reach the decoder through ``mm_inputs``, and checkpoint tensors are routed to
the three parts in both HF layouts (``model.vision_tower.…`` / ``model.language_model.…`` and the older
``vision_tower.…`` / ``language_model.model.…``). A subclass builds ``vision_tower``,
``multi_modal_projector`` and ``language_model`` and says how images become features
(``embed_multimodal``)."""

from __future__ import annotations

from collections.abc import Iterable, Iterator
from typing import ClassVar

import torch
from torch import nn

from infercore.models.multimodal import MultiModalStepInputs
from infercore.models.vision_encoder import STACKED_PARAMS, VisionTower
from infercore.models.weight_loading import load_checkpoint_weights


class TowerProjectorDecoder(nn.Module):
    """Tower + projector + decoder; see the module docstring."""

    supports_multimodal: ClassVar[bool] = True
    #: The family's name in errors about checkpoint tensors that belong to no part.
    family: ClassVar[str] = "this model"
    vision_tower: VisionTower
    multi_modal_projector: nn.Module
    language_model: nn.Module

    @property
    def mm_inputs(self) -> MultiModalStepInputs | None:
        return self.language_model.model.mm_inputs

    @mm_inputs.setter
    def mm_inputs(self, value: MultiModalStepInputs | None) -> None:
        self.language_model.model.mm_inputs = value

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
        """Route each tensor to the tower, the projector or the decoder (whose loader takes its own names)."""
        tower: list[tuple[str, torch.Tensor]] = []
        projector: list[tuple[str, torch.Tensor]] = []

        def text() -> Iterator[tuple[str, torch.Tensor]]:
            for name, tensor in weights:
                part, rest = split_checkpoint_name(name)
                if part == "language_model":
                    yield rest, tensor
                elif part == "vision_tower":
                    rest = rest.removeprefix("vision_model.")  # hub checkpoints nest the ViT one level deeper
                    if not self.vision_tower.skips_weight(rest):
                        tower.append((rest, tensor))
                elif part == "multi_modal_projector":
                    projector.append((rest, tensor))
                else:
                    raise ValueError(f"checkpoint tensor {name!r} belongs to no part of {self.family} (vision_tower, "
                                     "multi_modal_projector, language_model)")

        self.language_model.load_weights(text())
        load_checkpoint_weights(self.vision_tower.vision_model, tower, STACKED_PARAMS)
        load_checkpoint_weights(self.multi_modal_projector, projector, [])


def split_checkpoint_name(name: str) -> tuple[str, str]:
    """``(part, name within the part)`` for both checkpoint layouts; the decoder's names keep its ``model.``
    prefix and its ``lm_head``."""
    if name.startswith("model."):
        name = name[len("model."):]
        if name.startswith("language_model."):
            return "language_model", "model." + name[len("language_model."):]
    elif name.startswith("lm_head."):
        return "language_model", name
    part, _, rest = name.partition(".")
    return part, rest
