"""Qwen2.5-VL: the window-attention vision tower, and a Qwen2 decoder whose rotary is M-RoPE.

The decoder is :class:`~infercore.models.llama.LlamaModel` with Qwen2's options, each layer's rotary
wrapped in :class:`~infercore.layers.mrope.MRotaryEmbedding`; positions reach it as [3, T] rows
(:mod:`infercore.models.mrope_positions`). Image embeddings from :meth:`embed_images` replace the
``<|image_pad|>`` tokens' embeddings before the first layer.

Checkpoints name the parts either as transformers 5 saves them (``model.language_model.*``,
``model.visual.*``) or as the Qwen repositories ship them (``model.*``, ``visual.*``); both load.
"""

from __future__ import annotations

import copy
import math
from collections.abc import Iterable, Sequence
from typing import Any, ClassVar

import numpy as np
import torch
from torch import nn
from transformers import PretrainedConfig

from infercore.layers import ParallelLMHead
from infercore.layers.mrope import MRotaryEmbedding
from infercore.models.llama import (
    STACKED_PARAMS,
    DecoderOptions,
    LlamaModel,
    head_dim_of,
    windows_from_layer_types,
)
from infercore.models.mrope_positions import Grid, image_spans, mrope_positions
from infercore.models.qwen2_5_vl_image import QwenVLImageSettings, repeat_temporal
from infercore.models.qwen2_5_vl_processor import Qwen2_5_VLMultiModalProcessor
from infercore.models.qwen2_5_vl_vision import Qwen2_5_VisionTransformer
from infercore.models.weight_loading import load_checkpoint_weights

DEFAULT_MROPE_SECTION = (16, 24, 24)


def text_config_of(config: PretrainedConfig) -> PretrainedConfig:
    """The decoder's config, with plain-RoPE parameters for the layer catalogue's rotary."""
    text = copy.deepcopy(config.get_text_config() if hasattr(config, "get_text_config") else config)
    name = "rope_parameters" if isinstance(getattr(text, "rope_parameters", None), dict) else "rope_scaling"
    params = getattr(text, name, None)
    if isinstance(params, dict) and params:
        plain = {k: v for k, v in params.items() if k not in ("mrope_section", "mrope_interleaved")}
        if plain.get("rope_type") == "mrope" or plain.get("type") == "mrope":
            plain.pop("type", None)
            plain["rope_type"] = "default"
        setattr(text, name, plain)
    return text


def mrope_section_of(config: PretrainedConfig) -> tuple[int, ...]:
    text = config.get_text_config() if hasattr(config, "get_text_config") else config
    for name in ("rope_parameters", "rope_scaling"):
        params = getattr(text, name, None)
        if isinstance(params, dict) and params.get("mrope_section"):
            return tuple(int(x) for x in params["mrope_section"])
    return DEFAULT_MROPE_SECTION


class Qwen2_5_VLForConditionalGeneration(nn.Module):
    """Qwen2.5-VL (images in, text out)."""

    loads_checkpoint_slices = False
    supports_multimodal: ClassVar[bool] = True
    multimodal_processor: ClassVar[type[Qwen2_5_VLMultiModalProcessor]] = Qwen2_5_VLMultiModalProcessor
    uses_mrope: ClassVar[bool] = True

    def __init__(self, hf_config: PretrainedConfig, dtype: torch.dtype) -> None:
        super().__init__()
        section = mrope_section_of(hf_config)
        text = text_config_of(hf_config)
        self.config = hf_config
        self.text_config = text
        self.image_token_id = int(hf_config.image_token_id)
        self.merge = int(hf_config.vision_config.spatial_merge_size)
        self.visual = Qwen2_5_VisionTransformer(hf_config.vision_config)
        options = DecoderOptions(qkv_bias=True, sliding_windows=windows_from_layer_types(text))
        self.model = LlamaModel(text, options, dtype)
        #: The step's per-token cos/sin rows, gathered by the first layer and read by the others.
        self._rope_memo: dict[str, torch.Tensor] = {}
        for layer in self.model.layers:
            layer.self_attn.rotary_emb = MRotaryEmbedding(layer.self_attn.rotary_emb, section, self._rope_memo)
        self.tie_word_embeddings = bool(getattr(hf_config, "tie_word_embeddings", False))
        self.lm_head = ParallelLMHead(text.vocab_size, text.hidden_size)
        if self.tie_word_embeddings:
            self.lm_head.weight = self.model.embed_tokens.weight
        self.head_dim = head_dim_of(text)
        #: The step's image rows and M-RoPE positions, set by the runner (None outside the engine).
        self.mm_inputs: Any = None

    # -- images (the multimodal contract of infercore.models.multimodal) ----------------------------

    def embed_images(self, pixel_values: torch.Tensor, grids: Sequence[Grid]) -> list[torch.Tensor]:
        """Each image's embeddings [its placeholder tokens, hidden] from its patches (concatenated, in order)."""
        embeds = self.visual(pixel_values, grids)
        sizes = [int(t) * int(h) * int(w) // (self.merge * self.merge) for t, h, w in grids]
        return list(embeds.split(sizes))

    def embed_multimodal(self, items: list[dict[str, torch.Tensor]]) -> list[torch.Tensor]:
        """Embeddings of each image (``pixel_values`` and ``image_grid_thw`` of each), one tower pass for all."""
        if not items:
            return []
        grids = [tuple(int(x) for x in g) for item in items for g in item["image_grid_thw"].reshape(-1, 3).tolist()]
        pixels = torch.cat([self._full_patches(item["pixel_values"]) for item in items])
        per_image = self.embed_images(pixels, grids)
        counts = [int(item["image_grid_thw"].reshape(-1, 3).shape[0]) for item in items]
        out, i = [], 0
        for n in counts:
            out.append(torch.cat(per_image[i:i + n]) if n != 1 else per_image[i])
            i += n
        return out

    def dummy_multimodal_item(self) -> dict[str, torch.Tensor]:
        """The largest image the folder's processor makes (``max_pixels``, square), blank (memory profiling)."""
        settings = QwenVLImageSettings.from_model_folder(getattr(self.config, "_name_or_path", "") or ".")
        factor = settings.patch_size * settings.merge_size
        side = max(factor, math.isqrt(settings.max_pixels) // factor * factor)
        grid = side // settings.patch_size
        device = self.visual.patch_embed.weight.device
        width = int(self.config.vision_config.in_channels) * settings.patch_size**2
        return {"pixel_values": torch.zeros(grid * grid, width, device=device),
                "image_grid_thw": torch.tensor([[1, grid, grid]], device=device)}

    def _full_patches(self, pixels: torch.Tensor) -> torch.Tensor:
        """Patches with their temporal repeat: the processor sends one frame of each (``C * P * P`` wide)."""
        vision = self.config.vision_config
        if pixels.shape[-1] == self.visual.patch_dim:
            return pixels
        return repeat_temporal(pixels, int(vision.in_channels), int(vision.temporal_patch_size))

    def prompt_positions(self, token_ids: Sequence[int], grids: Sequence[Grid]) -> tuple[torch.Tensor, int]:
        """M-RoPE positions [3, len] of a prompt with these images, and its decode delta."""
        spans = image_spans(token_ids, self.image_token_id, grids, self.merge)
        return mrope_positions(len(token_ids), spans, self.merge)

    def mrope_positions(self, prompt_token_ids: Sequence[int], features: Sequence[Any]) -> tuple[np.ndarray, int]:
        """A request's M-RoPE positions [3, prompt_len] and delta, from its images' offsets and grids."""
        spans: list[tuple[int, Grid]] = []
        for feature in features:
            grid = feature.data["image_grid_thw"].to_numpy().reshape(-1, 3)
            offset = int(feature.offset)
            for t, h, w in grid.tolist():
                spans.append((offset, (int(t), int(h), int(w))))
                offset += int(t) * int(h) * int(w) // (self.merge * self.merge)
        positions, delta = mrope_positions(len(prompt_token_ids), spans, self.merge)
        return positions.numpy(), delta

    # -- the decoder --------------------------------------------------------------------------------

    def embed_input_ids(self, input_ids: torch.Tensor, image_embeds: torch.Tensor | None = None,
                        is_image: torch.Tensor | None = None) -> torch.Tensor:
        """Token embeddings [T, hidden], the rows where ``is_image`` holds replaced by ``image_embeds``."""
        hidden = self.model.embed_tokens(input_ids)
        if image_embeds is not None and is_image is not None and image_embeds.shape[0]:
            hidden = hidden.masked_scatter(is_image.unsqueeze(-1), image_embeds.to(hidden.dtype))
        return hidden

    def forward(self, input_ids: torch.Tensor, positions: torch.Tensor,
                inputs_embeds: torch.Tensor | None = None) -> torch.Tensor:
        """Tokens [T] (or their embeddings [T, hidden]) at M-RoPE ``positions`` [3, T] (or [T] for text).

        Under the engine, the step's image rows and M-RoPE positions come from ``mm_inputs`` (set by the
        runner) and ``positions`` [T] is ignored for them."""
        hidden = self.model.embed_tokens(input_ids) if inputs_embeds is None else inputs_embeds
        step = self.mm_inputs
        if step is not None:
            hidden = step.merge(hidden)
            if step.mrope_positions is not None and positions.dim() == 1:
                positions = step.mrope_positions[:, : input_ids.shape[0]]
        self._rope_memo.clear()
        residual = None
        for layer in self.model.layers:
            hidden, residual = layer(positions, hidden, residual)
        self._rope_memo.clear()
        hidden, _ = self.model.norm(hidden, residual)
        return hidden

    def compute_logits(self, hidden: torch.Tensor) -> torch.Tensor:
        return self.lm_head.compute_logits(hidden)

    def load_weights(self, weights: Iterable[tuple[str, torch.Tensor]]) -> None:
        """Load HF-named tensors of either naming; a missing or unknown tensor is an error naming it."""
        ignore = ("lm_head.",) if self.tie_word_embeddings else ()
        load_checkpoint_weights(self, ((_canonical(n), t) for n, t in weights), STACKED_PARAMS,
                                ignore_prefixes=ignore, extra=_TowerLoader(self.visual))


class _TowerLoader:
    """Routes the ``visual.*`` tensors to the vision tower's own loader."""

    def __init__(self, tower: Qwen2_5_VisionTransformer) -> None:
        self.tower = tower
        self.filled: set[str] = set()

    def owns(self, param_name: str) -> bool:
        return param_name.startswith("visual.")

    def load(self, name: str, tensor: torch.Tensor) -> bool:
        if not name.startswith("visual."):
            return False
        with torch.no_grad():
            self.filled |= self.tower.load_weights([(name.removeprefix("visual."), tensor)])
        return True

    def missing(self) -> list[str]:
        return sorted(f"visual.{n}" for n, _ in self.tower.named_parameters() if n not in self.filled)


def _canonical(name: str) -> str:
    for old, new in (("model.language_model.", "model."), ("model.visual.", "visual."),
                     ("language_model.model.", "model."), ("language_model.lm_head.", "lm_head.")):
        if name.startswith(old):
            return new + name[len(old):]
    return name

