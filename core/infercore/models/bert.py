"""BERT and XLM-RoBERTa encoders (embedders and cross-encoders), from the layer catalogue.

Embeddings (token, absolute position, token type) → post-norm encoder layers of bidirectional
attention (no KV cache) and a GELU MLP, each closed by a LayerNorm with bias. The engine pools the
hidden states (:mod:`infercore.pooling`); a sequence-classification model adds its head in
:meth:`classify`.
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator

import torch
from torch import nn
from transformers import PretrainedConfig

from infercore.attention import Attention
from infercore.attention.encoder_only import ENCODER_ONLY
from infercore.layers import (
    GELU,
    ColumnParallelLinear,
    LayerNorm,
    LearnedPositionEmbedding,
    QKVParallelLinear,
    RowParallelLinear,
    VocabParallelEmbedding,
)
from infercore.models.weight_loading import StackedParam, load_checkpoint_weights

STACKED_PARAMS = [
    StackedParam("qkv_proj", "query", "q"),
    StackedParam("qkv_proj", "key", "k"),
    StackedParam("qkv_proj", "value", "v"),
]
#: Checkpoint tensors an encoder never reads: pre-training heads and buffers.
_SKIPPED = ("cls.", "lm_head.", "embeddings.position_ids", "embeddings.token_type_ids")


def token_type_ids_from_sep(input_ids: torch.Tensor, positions: torch.Tensor, sep_token_id: int) -> torch.Tensor:
    """BERT's segment ids of flattened whole sequences: 0 up to and including a sequence's first separator,
    1 after it (a text pair ``[CLS] a [SEP] b [SEP]``); every sequence starts at position 0."""
    is_sep = (input_ids == sep_token_id).to(torch.int64)
    before = torch.cumsum(is_sep, 0) - is_sep  # separators before each token in the whole batch
    index = torch.arange(len(input_ids), device=input_ids.device)
    start = torch.cummax(torch.where(positions == 0, index, torch.zeros_like(index)), 0).values
    return ((before - before[start]) > 0).to(torch.int64)


def _sep_token_id(config: PretrainedConfig) -> int | None:
    """The separator id that starts a pair's second segment: the config's, else the tokenizer's in the model
    folder (BERT configs rarely name it); None (every token in segment 0) when neither says."""
    sep = getattr(config, "sep_token_id", None)
    if sep is not None:
        return int(sep)
    folder = getattr(config, "_name_or_path", "")
    try:
        from transformers import AutoTokenizer

        sep = AutoTokenizer.from_pretrained(folder).sep_token_id if folder else None
    except (OSError, ValueError):
        return None
    return int(sep) if sep is not None else None


class BertEmbeddings(nn.Module):
    """Token + absolute position + token type embeddings, then a LayerNorm. XLM-R's positions start after
    its padding index (``position_offset``)."""

    def __init__(self, config: PretrainedConfig, position_offset: int) -> None:
        super().__init__()
        self.word_embeddings = VocabParallelEmbedding(config.vocab_size, config.hidden_size)
        self.position_embeddings = LearnedPositionEmbedding(config.max_position_embeddings - position_offset,
                                                            config.hidden_size, offset=position_offset)
        self.token_type_embeddings = nn.Embedding(max(int(config.type_vocab_size), 1), config.hidden_size)
        self.LayerNorm = LayerNorm(config.hidden_size, eps=config.layer_norm_eps)
        self.sep_token_id = _sep_token_id(config) if int(config.type_vocab_size) > 1 else None

    def forward(self, input_ids: torch.Tensor, positions: torch.Tensor) -> torch.Tensor:
        hidden = self.word_embeddings(input_ids) + self.position_embeddings(positions)
        if self.sep_token_id is None:
            hidden = hidden + self.token_type_embeddings.weight[0]
        else:
            hidden = hidden + self.token_type_embeddings(token_type_ids_from_sep(input_ids, positions,
                                                                                 self.sep_token_id))
        return self.LayerNorm(hidden)


class BertSelfAttention(nn.Module):
    """Fused q/k/v with biases and bidirectional attention over each sequence."""

    def __init__(self, config: PretrainedConfig, layer_index: int) -> None:
        super().__init__()
        heads = config.num_attention_heads
        head_dim = config.hidden_size // heads
        self.qkv_proj = QKVParallelLinear(config.hidden_size, head_dim, heads, heads, bias=True)
        self.q_size = self.qkv_proj.num_heads * head_dim
        self.attn = Attention(self.qkv_proj.num_heads, head_dim, num_kv_heads=self.qkv_proj.num_heads,
                              scale=head_dim**-0.5, layer_index=layer_index, attn_type=ENCODER_ONLY)

    def forward(self, hidden: torch.Tensor) -> torch.Tensor:
        q, k, v = self.qkv_proj(hidden).split([self.q_size] * 3, dim=-1)
        return self.attn(q, k, v)


class BertSelfOutput(nn.Module):
    """Output projection, residual add, LayerNorm (post-norm)."""

    def __init__(self, config: PretrainedConfig, input_size: int) -> None:
        super().__init__()
        self.dense = RowParallelLinear(input_size, config.hidden_size, bias=True)
        self.LayerNorm = LayerNorm(config.hidden_size, eps=config.layer_norm_eps)

    def forward(self, hidden: torch.Tensor, residual: torch.Tensor) -> torch.Tensor:
        return self.LayerNorm(self.dense(hidden) + residual)


class BertAttention(nn.Module):
    def __init__(self, config: PretrainedConfig, layer_index: int) -> None:
        super().__init__()
        self.self = BertSelfAttention(config, layer_index)
        self.output = BertSelfOutput(config, config.hidden_size)

    def forward(self, hidden: torch.Tensor) -> torch.Tensor:
        return self.output(self.self(hidden), hidden)


class BertIntermediate(nn.Module):
    def __init__(self, config: PretrainedConfig) -> None:
        super().__init__()
        self.dense = ColumnParallelLinear(config.hidden_size, config.intermediate_size, bias=True)
        act = str(getattr(config, "hidden_act", "gelu"))
        self.act = GELU(approximate="tanh" if act in ("gelu_new", "gelu_pytorch_tanh", "gelu_fast") else "none")

    def forward(self, hidden: torch.Tensor) -> torch.Tensor:
        return self.act(self.dense(hidden))


class BertLayer(nn.Module):
    """Attention block then MLP block, each with its residual and LayerNorm."""

    def __init__(self, config: PretrainedConfig, layer_index: int) -> None:
        super().__init__()
        self.attention = BertAttention(config, layer_index)
        self.intermediate = BertIntermediate(config)
        self.output = BertSelfOutput(config, config.intermediate_size)

    def forward(self, hidden: torch.Tensor) -> torch.Tensor:
        hidden = self.attention(hidden)
        return self.output(self.intermediate(hidden), hidden)


class BertEncoder(nn.Module):
    def __init__(self, config: PretrainedConfig) -> None:
        super().__init__()
        self.layer = nn.ModuleList(BertLayer(config, i) for i in range(config.num_hidden_layers))

    def forward(self, hidden: torch.Tensor) -> torch.Tensor:
        for layer in self.layer:
            hidden = layer(hidden)
        return hidden


class BertModel(nn.Module):
    """The BERT encoder as an embedder: hidden states of every token for the engine to pool."""

    #: Checkpoint prefix of the encoder inside task models (``bert.encoder...``).
    base_prefix = "bert."

    def __init__(self, hf_config: PretrainedConfig, dtype: torch.dtype) -> None:
        super().__init__()
        self.config = hf_config
        self.embeddings = BertEmbeddings(hf_config, self.position_offset(hf_config))
        self.encoder = BertEncoder(hf_config)

    @staticmethod
    def position_offset(config: PretrainedConfig) -> int:
        return 0

    def forward(self, input_ids: torch.Tensor, positions: torch.Tensor) -> torch.Tensor:
        """Flattened whole sequences [T] and their positions [T] → hidden states [T, hidden]."""
        return self.encoder(self.embeddings(input_ids, positions))

    def compute_logits(self, hidden: torch.Tensor) -> torch.Tensor:
        """An encoder has no LM head; the runner's warm-up passes call this, pooling never does."""
        return hidden

    def load_weights(self, weights: Iterable[tuple[str, torch.Tensor]]) -> None:
        """Load HF-named tensors (with or without the task model's ``bert.`` prefix); pooler and
        pre-training heads are skipped."""
        load_checkpoint_weights(self, self._encoder_names(weights), STACKED_PARAMS,
                                ignore_prefixes=(*_SKIPPED, "pooler."))

    def _encoder_names(self, weights: Iterable[tuple[str, torch.Tensor]]) -> Iterator[tuple[str, torch.Tensor]]:
        for name, tensor in weights:
            yield (name.removeprefix(self.base_prefix), tensor)


class XLMRobertaModel(BertModel):
    """XLM-RoBERTa (BGE-M3 style): BERT's encoder with positions counted from ``pad_token_id + 1``."""

    base_prefix = "roberta."

    @staticmethod
    def position_offset(config: PretrainedConfig) -> int:
        return int(getattr(config, "pad_token_id", 1) or 0) + 1


class BertForSequenceClassification(nn.Module):
    """A BERT cross-encoder or classifier: the encoder, then (on the CLS token the engine pools) BERT's
    pooler (dense + tanh) and a linear classifier."""

    def __init__(self, hf_config: PretrainedConfig, dtype: torch.dtype) -> None:
        super().__init__()
        self.bert = BertModel(hf_config, dtype)
        self.bert.pooler = nn.Module()  # HF keeps BERT's pooler inside the encoder: bert.pooler.dense
        self.bert.pooler.dense = nn.Linear(hf_config.hidden_size, hf_config.hidden_size)
        self.classifier = nn.Linear(hf_config.hidden_size, hf_config.num_labels)

    def forward(self, input_ids: torch.Tensor, positions: torch.Tensor) -> torch.Tensor:
        return self.bert(input_ids, positions)

    def compute_logits(self, hidden: torch.Tensor) -> torch.Tensor:
        return hidden

    def classify(self, pooled: torch.Tensor) -> torch.Tensor:
        """Pooled CLS states [N, hidden] → class logits [N, num_labels]."""
        return self.classifier(torch.tanh(self.bert.pooler.dense(pooled)))

    def load_weights(self, weights: Iterable[tuple[str, torch.Tensor]]) -> None:
        load_checkpoint_weights(self, weights, STACKED_PARAMS, ignore_prefixes=tuple(f"bert.{p}" for p in _SKIPPED))


class XLMRobertaForSequenceClassification(nn.Module):
    """An XLM-R cross-encoder (BGE-reranker style): the encoder, then RoBERTa's classification head on the
    CLS token (dense, tanh, out_proj)."""

    def __init__(self, hf_config: PretrainedConfig, dtype: torch.dtype) -> None:
        super().__init__()
        self.roberta = XLMRobertaModel(hf_config, dtype)
        self.classifier = nn.Module()
        self.classifier.dense = nn.Linear(hf_config.hidden_size, hf_config.hidden_size)
        self.classifier.out_proj = nn.Linear(hf_config.hidden_size, hf_config.num_labels)

    def forward(self, input_ids: torch.Tensor, positions: torch.Tensor) -> torch.Tensor:
        return self.roberta(input_ids, positions)

    def compute_logits(self, hidden: torch.Tensor) -> torch.Tensor:
        return hidden

    def classify(self, pooled: torch.Tensor) -> torch.Tensor:
        """Pooled CLS states [N, hidden] → class logits [N, num_labels]."""
        return self.classifier.out_proj(torch.tanh(self.classifier.dense(pooled)))

    def load_weights(self, weights: Iterable[tuple[str, torch.Tensor]]) -> None:
        load_checkpoint_weights(self, weights, STACKED_PARAMS,
                                ignore_prefixes=(*(f"roberta.{p}" for p in _SKIPPED), "roberta.pooler."))
