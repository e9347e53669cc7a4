"""GPT-NeoX (Pythia): a fused per-head QKV projection, partial rotary, parallel residual, an untied head.

Each tensor-parallel rank holds ``num_attention_heads / spec.tp_size`` heads: the model sizes its
own split from :class:`ModelSpec`, the way a plugin model should.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

import torch
from torch import nn

from infercore.plugin_api import (
    GELU,
    Attention,
    ColumnParallelLinear,
    LayerNorm,
    ModelSpec,
    ParallelLMHead,
    RowParallelLinear,
    VocabParallelEmbedding,
    get_rope,
)


def _rope_settings(config: Any) -> tuple[float, float]:
    """(base, fraction of each head rotated), from ``rope_parameters`` or the older field names."""
    params = getattr(config, "rope_parameters", None) or {}
    base = params.get("rope_theta", getattr(config, "rotary_emb_base", 10000.0))
    return float(base), float(params.get("partial_rotary_factor", getattr(config, "rotary_pct", 0.25)))


class GPTNeoXAttention(nn.Module):
    """This rank's heads of the fused projection, laid out per head as ``[q | k | v]``."""

    def __init__(self, config: Any, spec: ModelSpec, layer_index: int) -> None:
        super().__init__()
        hidden, heads = config.hidden_size, config.num_attention_heads
        self.head_size = hidden // heads
        self.local_heads = heads // spec.tp_size
        # HF's rows are grouped by head, so a rank's contiguous share of rows is whole heads.
        self.query_key_value = ColumnParallelLinear(hidden, 3 * hidden, bias=True)
        self.dense = RowParallelLinear(hidden, hidden, bias=True)
        base, fraction = _rope_settings(config)
        self.rotary = get_rope(self.head_size, int(self.head_size * fraction), config.max_position_embeddings,
                               base, None, spec.dtype)
        self.attn = Attention(self.local_heads, self.head_size, num_kv_heads=self.local_heads,
                              scale=self.head_size**-0.5, layer_index=layer_index)

    def forward(self, positions: torch.Tensor, x: torch.Tensor) -> torch.Tensor:
        width = self.local_heads * self.head_size
        qkv = self.query_key_value(x).view(-1, self.local_heads, 3, self.head_size)
        q, k, v = (qkv[:, :, i].reshape(-1, width) for i in range(3))
        q, k = self.rotary(positions, q, k)
        return self.dense(self.attn(q, k, v))


class GPTNeoXMLP(nn.Module):
    """hidden → intermediate → GELU → hidden."""

    def __init__(self, config: Any) -> None:
        super().__init__()
        self.dense_h_to_4h = ColumnParallelLinear(config.hidden_size, config.intermediate_size, bias=True)
        self.act = GELU("tanh" if config.hidden_act == "gelu_new" else "none")
        self.dense_4h_to_h = RowParallelLinear(config.intermediate_size, config.hidden_size, bias=True)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.dense_4h_to_h(self.act(self.dense_h_to_4h(x)))


class GPTNeoXLayer(nn.Module):
    """Attention and MLP side by side on the same input (parallel residual), or one after the other."""

    def __init__(self, config: Any, spec: ModelSpec, layer_index: int) -> None:
        super().__init__()
        self.parallel_residual = bool(config.use_parallel_residual)
        self.input_layernorm = LayerNorm(config.hidden_size, config.layer_norm_eps)
        self.post_attention_layernorm = LayerNorm(config.hidden_size, config.layer_norm_eps)
        self.attention = GPTNeoXAttention(config, spec, layer_index)
        self.mlp = GPTNeoXMLP(config)

    def forward(self, positions: torch.Tensor, x: torch.Tensor) -> torch.Tensor:
        attended = self.attention(positions, self.input_layernorm(x))
        if self.parallel_residual:
            return x + attended + self.mlp(self.post_attention_layernorm(x))
        x = x + attended
        return x + self.mlp(self.post_attention_layernorm(x))


class GPTNeoXModel(nn.Module):
    """Token embedding, the layers, a final LayerNorm."""

    def __init__(self, config: Any, spec: ModelSpec) -> None:
        super().__init__()
        self.embed_in = VocabParallelEmbedding(config.vocab_size, config.hidden_size)
        self.layers = nn.ModuleList(GPTNeoXLayer(config, spec, i) for i in range(config.num_hidden_layers))
        self.final_layer_norm = LayerNorm(config.hidden_size, config.layer_norm_eps)

    def forward(self, input_ids: torch.Tensor, positions: torch.Tensor) -> torch.Tensor:
        x = self.embed_in(input_ids)
        for layer in self.layers:
            x = layer(positions, x)
        return self.final_layer_norm(x)


class GPTNeoXForCausalLM(nn.Module):
    """GPT-NeoX for causal LM, with its own output projection (``embed_out``)."""

    def __init__(self, spec: ModelSpec) -> None:
        super().__init__()
        config = spec.hf_config
        if config.num_attention_heads % spec.tp_size:
            raise ValueError(f"GPT-NeoX has {config.num_attention_heads} attention heads, which "
                             f"{spec.tp_size} tensor-parallel ranks cannot share; choose a size that divides it")
        self.gpt_neox = GPTNeoXModel(config, spec)
        self.embed_out = ParallelLMHead(config.vocab_size, config.hidden_size)
        if getattr(config, "tie_word_embeddings", False):
            self.embed_out.weight = self.gpt_neox.embed_in.weight

    @classmethod
    def from_spec(cls, spec: ModelSpec) -> GPTNeoXForCausalLM:
        return cls(spec)

    def forward(self, input_ids: torch.Tensor, positions: torch.Tensor) -> torch.Tensor:
        return self.gpt_neox(input_ids, positions)

    def compute_logits(self, hidden: torch.Tensor) -> torch.Tensor:
        return self.embed_out.compute_logits(hidden)

    def load_weights(self, weights: Iterable[tuple[str, torch.Tensor]]) -> set[str]:
        """Checkpoint names are the parameter names; each layer's loader keeps this rank's share."""
        params = dict(self.named_parameters())
        loaded: set[str] = set()
        for name, tensor in weights:
            if name.endswith((".attention.bias", ".attention.masked_bias", "rotary_emb.inv_freq")):
                continue  # buffers of older checkpoints
            if name not in params:
                if name == "embed_out.weight":
                    continue  # tied: the embedding is the head
                raise ValueError(f"checkpoint tensor {name!r} matches no parameter of GPTNeoXForCausalLM")
            param = params[name]
            with torch.no_grad():
                getattr(param, "weight_loader", lambda p, t: p.copy_(t))(param, tensor)
            loaded.add(name)
        return loaded
