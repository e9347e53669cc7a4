"""LLaVA (1.5 and the llava-hf family): a CLIP or SigLIP vision tower, a two-layer projector, and a Llama,
Mistral or Qwen2 decoder that reads the projected image features in place of the image's placeholder
tokens (:mod:`infercore.models.multimodal` has the contract)."""

from __future__ import annotations

from typing import ClassVar

import torch
from torch import nn
from transformers import PretrainedConfig

from infercore.layers import GELU, ColumnParallelLinear, RowParallelLinear
from infercore.models.llama import LlamaForCausalLM
from infercore.models.llava_processor import LlavaProcessor
from infercore.models.mistral import MistralForCausalLM
from infercore.models.qwen2 import Qwen2ForCausalLM
from infercore.models.tower_and_decoder import TowerProjectorDecoder
from infercore.models.vision_encoder import VisionTower, vision_activation

#: The decoders a LLaVA checkpoint may pair with its tower, by the text config's model_type.
TEXT_MODELS: dict[str, type[LlamaForCausalLM]] = {
    "llama": LlamaForCausalLM, "mistral": MistralForCausalLM, "qwen2": Qwen2ForCausalLM,
}


class LlavaProjector(nn.Module):
    """``linear_2(act(linear_1(features)))``: vision width (times the feature layers) → text width."""

    def __init__(self, config: PretrainedConfig, num_feature_layers: int) -> None:
        super().__init__()
        bias = bool(getattr(config, "multimodal_projector_bias", True))
        text = config.text_config.hidden_size
        self.linear_1 = ColumnParallelLinear(config.vision_config.hidden_size * num_feature_layers, text, bias=bias)
        act = getattr(config, "projector_hidden_act", "gelu")
        self.act = GELU("none") if act == "gelu" else vision_activation(act)
        self.linear_2 = RowParallelLinear(text, text, bias=bias)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.linear_2(self.act(self.linear_1(x)))


def _feature_layers(config: PretrainedConfig) -> list[int]:
    layer = getattr(config, "vision_feature_layer", -2)
    return [int(layer)] if isinstance(layer, int) else [int(i) for i in layer]


class LlavaForConditionalGeneration(TowerProjectorDecoder):
    """``LlavaForConditionalGeneration`` checkpoints, in both HF layouts (``model.vision_tower.…`` /
    ``model.language_model.…`` and the older ``vision_tower.…`` / ``language_model.model.…``)."""

    family: ClassVar[str] = "LLaVA"
    multimodal_processor: ClassVar[type[LlavaProcessor]] = LlavaProcessor

    def __init__(self, hf_config: PretrainedConfig, dtype: torch.dtype) -> None:
        super().__init__()
        self.config = hf_config
        text_config = hf_config.text_config
        text_cls = TEXT_MODELS.get(text_config.model_type)
        if text_cls is None:
            raise ValueError(f"LLaVA with a {text_config.model_type!r} decoder is not supported; supported: "
                             f"{', '.join(TEXT_MODELS)}")
        layers = _feature_layers(hf_config)
        self.drop_first_token = getattr(hf_config, "vision_feature_select_strategy", "default") == "default"
        self.vision_tower = VisionTower(hf_config.vision_config, layers)
        self.multi_modal_projector = LlavaProjector(hf_config, len(layers))
        self.language_model = text_cls(text_config, dtype)

    def embed_multimodal(self, items: list[dict[str, torch.Tensor]]) -> list[torch.Tensor]:
        """Each image's projected features [tokens, text hidden]: one tower call for all of them."""
        pixels = torch.stack([item["pixel_values"].reshape(item["pixel_values"].shape[-3:]) for item in items])
        hidden = self.vision_tower(pixels)
        if self.drop_first_token:
            hidden = [h[:, 1:] for h in hidden]
        features = hidden[0] if len(hidden) == 1 else torch.cat(hidden, dim=-1)
        n, tokens, width = features.shape
        projected = self.multi_modal_projector(features.reshape(n * tokens, width))
        return list(projected.view(n, tokens, -1).unbind(0))

