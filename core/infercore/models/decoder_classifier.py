"""Decoder models as sequence classifiers and rerankers (``Qwen3ForSequenceClassification``,
``Qwen2ForSequenceClassification``): the decoder, then a linear ``score`` head on the last token, which
the engine pools (LAST).

A causal-LM checkpoint served as a classifier through ``hf_overrides`` (``classifier_from_token``: the labels
are vocabulary tokens, as Qwen3-Reranker scores "yes" against "no") builds its ``score`` rows from the LM
head's rows of those tokens; with ``is_original_qwen3_reranker`` the one row is "yes" minus "no", so the
sigmoid of the score is the softmax probability of "yes" over the two."""

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
        token_ids = getattr(self.config, "classifier_from_token_ids", None)
        if token_ids is None:
            load_checkpoint_weights(self, weights, STACKED_PARAMS, ignore_prefixes=("lm_head.",))
            return
        rows = _TokenRows(token_ids, tied=bool(getattr(self.config, "tie_word_embeddings", False)))
        load_checkpoint_weights(self, weights, STACKED_PARAMS, extra=rows)
        picked = rows.rows()
        if getattr(self.config, "is_original_qwen3_reranker", False):
            picked = picked[1:2] - picked[0:1]
        with torch.no_grad():
            self.score.weight.copy_(picked)


class _TokenRows:
    """Takes the LM head's rows of the label tokens as the checkpoint streams by (the input embedding's when the
    head is tied to it) for the ``score`` head, which no checkpoint tensor fills by name."""

    def __init__(self, token_ids: list[int], tied: bool) -> None:
        self.token_ids = token_ids
        self.source = "model.embed_tokens.weight" if tied else "lm_head.weight"
        self.found: dict[str, torch.Tensor] = {}

    def owns(self, param_name: str) -> bool:
        return param_name == "score.weight"

    def load(self, name: str, tensor: torch.Tensor) -> bool:
        if name in ("lm_head.weight", "model.embed_tokens.weight"):
            self.found[name] = tensor[self.token_ids].float()
        return name == "lm_head.weight"  # the embedding also loads as itself

    def rows(self) -> torch.Tensor:
        return self.found[self.source]

    def missing(self) -> list[str]:
        return [] if self.source in self.found else [self.source]


class Qwen3ForSequenceClassification(DecoderForSequenceClassification):
    family = Qwen3ForCausalLM


class Qwen2ForSequenceClassification(DecoderForSequenceClassification):
    family = Qwen2ForCausalLM
