"""Decoder models as sequence classifiers and rerankers (``Qwen3ForSequenceClassification``,
``Qwen2ForSequenceClassification``): the decoder, then a linear ``score`` head on the last token, which
the engine pools (LAST)."""

from __future__ import annotations

from collections.abc import Iterable

import torch
from torch import nn
from transformers import PretrainedConfig

from infercore.models.llama import STACKED_PARAMS, LlamaForCausalLM, LlamaModel
from infercore.models.qwen2 import Qwen2ForCausalLM
from infercore.models.qwen3 import Qwen3ForCausalLM
from infercore.models.weight_loading import load_checkpoint_weights


class DecoderForSequenceClassification(nn.Module):
    """A decoder family's model with a bias-free ``score`` projection to ``num_labels`` instead of an LM head."""

    family: type[LlamaForCausalLM] = LlamaForCausalLM

    def __init__(self, hf_config: PretrainedConfig, dtype: torch.dtype) -> None:
        super().__init__()
        self.config = hf_config
        self.model = LlamaModel(hf_config, self.family.decoder_options(hf_config), dtype)
        self.score = nn.Linear(hf_config.hidden_size, hf_config.num_labels, bias=False)

    def forward(self, input_ids: torch.Tensor, positions: torch.Tensor) -> torch.Tensor:
        """Flattened tokens [T] and positions [T] → hidden states [T, hidden] for the engine to pool."""
        return self.model(input_ids, positions)

    def compute_logits(self, hidden: torch.Tensor) -> torch.Tensor:
        """No LM head: the runner's warm-up passes call this, pooling never does."""
        return hidden

    def classify(self, pooled: torch.Tensor) -> torch.Tensor:
        """Pooled last-token states [N, hidden] → class logits [N, num_labels]."""
        return self.score(pooled)

    def load_weights(self, weights: Iterable[tuple[str, torch.Tensor]]) -> None:
        load_checkpoint_weights(self, weights, STACKED_PARAMS, ignore_prefixes=("lm_head.",))


class Qwen3ForSequenceClassification(DecoderForSequenceClassification):
    family = Qwen3ForCausalLM


class Qwen2ForSequenceClassification(DecoderForSequenceClassification):
    family = Qwen2ForCausalLM
