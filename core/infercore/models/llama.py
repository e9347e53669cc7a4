"""The Llama decoder, which Mistral, Qwen2 and Qwen3 reuse through :class:`DecoderOptions`.

Attention → MLP → decoder layer → model → causal LM, as in the paper's diagram; paged attention,
kernels and sharding live in :mod:`infercore.layers` and :mod:`infercore.attention`.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass

import torch
from torch import nn
from transformers import PretrainedConfig

from infercore.attention import Attention
from infercore.layers import (
    MergedColumnParallelLinear,
    ParallelLMHead,
    QKVParallelLinear,
    RMSNorm,
    RowParallelLinear,
    SiluAndMul,
    VocabParallelEmbedding,
    get_rope,
)
from infercore.models.rope_params import rope_settings
from infercore.models.weight_loading import StackedParam, load_checkpoint_weights

STACKED_PARAMS = [
    StackedParam("qkv_proj", "q_proj", "q"),
    StackedParam("qkv_proj", "k_proj", "k"),
    StackedParam("qkv_proj", "v_proj", "v"),
    StackedParam("gate_up_proj", "gate_proj", 0),
    StackedParam("gate_up_proj", "up_proj", 1),
]


@dataclass(frozen=True)
class DecoderOptions:
    """Where the Llama-family architectures differ."""

    qkv_bias: bool = False
    o_bias: bool = False
    mlp_bias: bool = False
    #: RMSNorm of each query and key head before rotary (Qwen3).
    qk_norm: bool = False
    #: Sliding attention window per layer (None = full attention).
    sliding_windows: tuple[int | None, ...] = ()


def head_dim_of(config: PretrainedConfig) -> int:
    return getattr(config, "head_dim", None) or config.hidden_size // config.num_attention_heads


def windows_from_layer_types(config: PretrainedConfig) -> tuple[int | None, ...]:
    """Per-layer windows from ``layer_types`` (``"sliding_attention"`` layers use ``sliding_window``)."""
    types = getattr(config, "layer_types", None) or ["full_attention"] * config.num_hidden_layers
    window = getattr(config, "sliding_window", None)
    return tuple(window if t == "sliding_attention" else None for t in types)


class LlamaAttention(nn.Module):
    """Fused QKV projection, optional per-head q/k norm, rotary, paged attention, output projection."""

    def __init__(self, config: PretrainedConfig, options: DecoderOptions, layer_index: int,
                 dtype: torch.dtype) -> None:
        super().__init__()
        head_dim = head_dim_of(config)
        self.qkv_proj = QKVParallelLinear(config.hidden_size, head_dim, config.num_attention_heads,
                                          config.num_key_value_heads, bias=options.qkv_bias)
        self.num_heads, self.num_kv_heads = self.qkv_proj.num_heads, self.qkv_proj.num_kv_heads
        self.q_size, self.kv_size = self.num_heads * head_dim, self.num_kv_heads * head_dim
        self.head_dim = head_dim
        self.o_proj = RowParallelLinear(config.num_attention_heads * head_dim, config.hidden_size,
                                        bias=options.o_bias)
        if options.qk_norm:
            self.q_norm = RMSNorm(head_dim, eps=config.rms_norm_eps)
            self.k_norm = RMSNorm(head_dim, eps=config.rms_norm_eps)
        self.qk_norm = options.qk_norm
        rope = rope_settings(config)
        self.rotary_emb = get_rope(head_dim, int(head_dim * rope.partial_rotary_factor),
                                   config.max_position_embeddings, rope.base, rope.scaling, dtype)
        #: Norm and rotate q/k in one op, in place on the QKV output (needs full rotary).
        self.fused_qk_norm_rotary = options.qk_norm and self.rotary_emb.is_full
        window = options.sliding_windows[layer_index] if options.sliding_windows else None
        self.attn = Attention(self.num_heads, head_dim, num_kv_heads=self.num_kv_heads, scale=head_dim**-0.5,
                              layer_index=layer_index, sliding_window=window)

    def forward(self, positions: torch.Tensor, hidden: torch.Tensor) -> torch.Tensor:
        # q, k, v are row-strided column slices of the QKV output; the attention backends take them so.
        q, k, v = self.qkv_proj(hidden).split([self.q_size, self.kv_size, self.kv_size], dim=-1)
        if self.fused_qk_norm_rotary:
            # The backend may norm and rotate q/k in the same pass as its KV cache write.
            return self.o_proj(self.attn.forward_qk_norm_rotary(positions, q, k, v, self.rotary_emb,
                                                                self.q_norm, self.k_norm))
        if self.qk_norm:
            q = self.q_norm(q.reshape(-1, self.head_dim)).view(q.shape)
            k = self.k_norm(k.reshape(-1, self.head_dim)).view(k.shape)
        q, k = self.rotary_emb(positions, q, k)
        return self.o_proj(self.attn(q, k, v))


class LlamaMLP(nn.Module):
    """SwiGLU: ``down(silu(gate(x)) * up(x))`` with gate and up fused."""

    def __init__(self, config: PretrainedConfig, options: DecoderOptions) -> None:
        super().__init__()
        size = config.intermediate_size
        self.gate_up_proj = MergedColumnParallelLinear(config.hidden_size, [size, size], bias=options.mlp_bias)
        self.act_fn = SiluAndMul()
        self.down_proj = RowParallelLinear(size, config.hidden_size, bias=options.mlp_bias)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.down_proj(self.act_fn(self.gate_up_proj(x)))


class LlamaDecoderLayer(nn.Module):
    """Pre-norm attention, then the feed-forward block ``ffn_name``: the dense MLP unless ``ffn`` is given
    (a mixture-of-experts block, say). The residual stream is carried alongside so norms can fuse the add."""

    def __init__(self, config: PretrainedConfig, options: DecoderOptions, layer_index: int,
                 dtype: torch.dtype, ffn: nn.Module | None = None, ffn_name: str = "mlp") -> None:
        super().__init__()
        self.self_attn = LlamaAttention(config, options, layer_index, dtype)
        self.ffn_name = ffn_name
        self.add_module(ffn_name, ffn if ffn is not None else LlamaMLP(config, options))
        self.input_layernorm = RMSNorm(config.hidden_size, eps=config.rms_norm_eps)
        self.post_attention_layernorm = RMSNorm(config.hidden_size, eps=config.rms_norm_eps)

    def forward(self, positions: torch.Tensor, hidden: torch.Tensor,
                residual: torch.Tensor | None) -> tuple[torch.Tensor, torch.Tensor]:
        if residual is None:
            residual = hidden
            hidden = self.input_layernorm(hidden)
        else:
            hidden, residual = self.input_layernorm(hidden, residual)
        hidden = self.self_attn(positions, hidden)
        hidden, residual = self.post_attention_layernorm(hidden, residual)
        return getattr(self, self.ffn_name)(hidden), residual


class LlamaModel(nn.Module):
    """Embedding, decoder layers (dense ones unless ``layers`` are given) and the final norm."""

    def __init__(self, config: PretrainedConfig, options: DecoderOptions, dtype: torch.dtype,
                 layers: list[LlamaDecoderLayer] | None = None) -> None:
        super().__init__()
        self.embed_tokens = VocabParallelEmbedding(config.vocab_size, config.hidden_size)
        if layers is None:
            layers = [LlamaDecoderLayer(config, options, i, dtype) for i in range(config.num_hidden_layers)]
        self.layers = nn.ModuleList(layers)
        self.norm = RMSNorm(config.hidden_size, eps=config.rms_norm_eps)

    def forward(self, input_ids: torch.Tensor, positions: torch.Tensor) -> torch.Tensor:
        hidden = self.embed_tokens(input_ids)
        residual = None
        for layer in self.layers:
            hidden, residual = layer(positions, hidden, residual)
        hidden, _ = self.norm(hidden, residual)
        return hidden


class LlamaForCausalLM(nn.Module):
    """Llama 2/3 (rope scaling included). Subclasses change :meth:`decoder_options` only."""

    #: Its weight loaders narrow checkpoint tensors to this rank's shard before reading them, so under
    #: tensor parallelism the loader hands it lazy slices (see models/checkpoint_slice.py).
    loads_checkpoint_slices = True

    def __init__(self, hf_config: PretrainedConfig, dtype: torch.dtype) -> None:
        super().__init__()
        self.config = hf_config
        self.tie_word_embeddings = bool(getattr(hf_config, "tie_word_embeddings", False))
        self.model = LlamaModel(hf_config, self.decoder_options(hf_config), dtype)
        self.lm_head = ParallelLMHead(hf_config.vocab_size, hf_config.hidden_size)
        if self.tie_word_embeddings:
            self.lm_head.weight = self.model.embed_tokens.weight

    @classmethod
    def decoder_options(cls, config: PretrainedConfig) -> DecoderOptions:
        bias = bool(getattr(config, "attention_bias", False))
        return DecoderOptions(qkv_bias=bias, o_bias=bias, mlp_bias=bool(getattr(config, "mlp_bias", False)),
                              sliding_windows=windows_from_layer_types(config))

    def forward(self, input_ids: torch.Tensor, positions: torch.Tensor) -> torch.Tensor:
        """Flattened tokens of all requests [T] and their positions [T] → hidden states [T, hidden]."""
        return self.model(input_ids, positions)

    def compute_logits(self, hidden: torch.Tensor) -> torch.Tensor:
        """Hidden states [N, hidden] → logits [N, vocab] in the model's dtype."""
        return self.lm_head.compute_logits(hidden)

    def load_weights(self, weights: Iterable[tuple[str, torch.Tensor]]) -> None:
        """Load HF-named checkpoint tensors; q/k/v and gate/up go into their fused parameters."""
        ignore = ("lm_head.",) if self.tie_word_embeddings else ()
        load_checkpoint_weights(self, weights, STACKED_PARAMS, ignore_prefixes=ignore)
