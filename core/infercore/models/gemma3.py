"""Gemma 3 (text): sliding and global attention layers, each with its own rotary settings.

Against Llama it adds Gemma's RMSNorm (scale ``1 + weight``) on the residual branches before and
after both attention and the MLP, per-head q/k norms, a GeGLU MLP (tanh GELU), token embeddings
scaled by ``sqrt(hidden_size)``, attention scaled by ``query_pre_attn_scalar ** -0.5`` and an
optional soft cap on the final logits.
"""

from __future__ import annotations

import torch
from torch import nn
from transformers import PretrainedConfig

from infercore.attention import Attention
from infercore.layers import (
    GeGLU,
    GemmaRMSNorm,
    MergedColumnParallelLinear,
    QKVParallelLinear,
    RowParallelLinear,
    get_rope,
)
from infercore.models.gemma3_config import Gemma3LayerSettings, gemma3_layer_settings
from infercore.models.llama import DecoderOptions, LlamaForCausalLM, head_dim_of

#: HF's name for the tanh approximation of GELU.
_TANH_GELU = ("gelu_pytorch_tanh", "gelu_new", "gelu_fast")


class Gemma3Attention(nn.Module):
    """Fused QKV, Gemma RMSNorm of each q/k head, this layer's rotary, paged attention (windowed or not)."""

    def __init__(self, config: PretrainedConfig, settings: Gemma3LayerSettings, layer_index: int,
                 dtype: torch.dtype) -> None:
        super().__init__()
        head_dim = head_dim_of(config)
        bias = bool(getattr(config, "attention_bias", False))
        self.qkv_proj = QKVParallelLinear(config.hidden_size, head_dim, config.num_attention_heads,
                                          config.num_key_value_heads, bias=bias)
        self.num_heads, self.num_kv_heads = self.qkv_proj.num_heads, self.qkv_proj.num_kv_heads
        self.q_size, self.kv_size = self.num_heads * head_dim, self.num_kv_heads * head_dim
        self.o_proj = RowParallelLinear(config.num_attention_heads * head_dim, config.hidden_size, bias=bias)
        self.q_norm = GemmaRMSNorm(head_dim, eps=config.rms_norm_eps)
        self.k_norm = GemmaRMSNorm(head_dim, eps=config.rms_norm_eps)
        rope = settings.rope
        self.rotary_emb = get_rope(head_dim, int(head_dim * rope.partial_rotary_factor),
                                   config.max_position_embeddings, rope.base, rope.scaling, dtype)
        scale = float(getattr(config, "query_pre_attn_scalar", None) or head_dim) ** -0.5
        self.attn = Attention(self.num_heads, head_dim, num_kv_heads=self.num_kv_heads, scale=scale,
                              layer_index=layer_index, sliding_window=settings.sliding_window)

    def forward(self, positions: torch.Tensor, hidden: torch.Tensor) -> torch.Tensor:
        q, k, v = self.qkv_proj(hidden).split([self.q_size, self.kv_size, self.kv_size], dim=-1)
        if self.rotary_emb.is_full:
            q, k = self.rotary_emb.forward_with_qk_norm(positions, q, k, self.q_norm, self.k_norm)
        else:
            head_dim = self.rotary_emb.head_size
            q = self.q_norm(q.reshape(-1, head_dim)).view(q.shape)
            k = self.k_norm(k.reshape(-1, head_dim)).view(k.shape)
            q, k = self.rotary_emb(positions, q, k)
        return self.o_proj(self.attn(q, k, v))


class Gemma3MLP(nn.Module):
    """GeGLU: ``down(gelu_tanh(gate(x)) * up(x))`` with gate and up fused."""

    def __init__(self, config: PretrainedConfig) -> None:
        super().__init__()
        activation = getattr(config, "hidden_activation", None) or getattr(config, "hidden_act", "gelu_pytorch_tanh")
        if activation not in _TANH_GELU:
            raise ValueError(f"Gemma 3 MLP activation {activation!r} is not supported; Gemma 3 checkpoints use "
                             "'gelu_pytorch_tanh'")
        size = config.intermediate_size
        self.gate_up_proj = MergedColumnParallelLinear(config.hidden_size, [size, size])
        self.act_fn = GeGLU("tanh")
        self.down_proj = RowParallelLinear(size, config.hidden_size)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.down_proj(self.act_fn(self.gate_up_proj(x)))


class Gemma3DecoderLayer(nn.Module):
    """Sandwich norms: each branch is normed on the way in and on the way out, then added to the residual."""

    def __init__(self, config: PretrainedConfig, options: DecoderOptions, layer_index: int,
                 dtype: torch.dtype) -> None:
        super().__init__()
        eps = config.rms_norm_eps
        settings = gemma3_layer_settings(config)[layer_index]
        self.self_attn = Gemma3Attention(config, settings, layer_index, dtype)
        self.mlp = Gemma3MLP(config)
        self.input_layernorm = GemmaRMSNorm(config.hidden_size, eps=eps)
        self.post_attention_layernorm = GemmaRMSNorm(config.hidden_size, eps=eps)
        self.pre_feedforward_layernorm = GemmaRMSNorm(config.hidden_size, eps=eps)
        self.post_feedforward_layernorm = GemmaRMSNorm(config.hidden_size, eps=eps)

    def forward(self, positions: torch.Tensor, hidden: torch.Tensor,
                residual: torch.Tensor | None) -> tuple[torch.Tensor, torch.Tensor]:
        # ``hidden`` is the previous layer's MLP branch output, not yet added to ``residual``.
        if residual is None:
            residual = hidden
            hidden = self.input_layernorm(hidden)
        else:
            hidden, residual = self.input_layernorm(hidden, residual)
        hidden = self.post_attention_layernorm(self.self_attn(positions, hidden))
        hidden, residual = self.pre_feedforward_layernorm(hidden, residual)
        return self.post_feedforward_layernorm(self.mlp(hidden)), residual


class Gemma3ForCausalLM(LlamaForCausalLM):
    """Gemma 3 text models (1B, and the language model of the larger ones saved on its own): Llama's
    shell with Gemma's norm, scaled embeddings and sandwich-norm layers."""

    ties_embeddings_by_default = True

    #: Its weight loaders narrow checkpoint tensors to this rank's shard before reading them, so under
    #: tensor parallelism the loader hands it lazy slices (see models/checkpoint_slice.py).
    loads_checkpoint_slices = True

    def __init__(self, hf_config: PretrainedConfig, dtype: torch.dtype) -> None:
        if getattr(hf_config, "attn_logit_softcapping", None) is not None:
            # HF's Gemma 3 never applies it either; a checkpoint that sets it expects Gemma 2 semantics.
            raise ValueError("this Gemma 3 config sets attn_logit_softcapping, which Gemma 3 does not use; "
                             "set it to null in config.json (Gemma 3 checkpoints leave it unset)")
        if getattr(hf_config, "use_bidirectional_attention", False):
            raise ValueError("this Gemma 3 config sets use_bidirectional_attention (an embedding model); "
                             "infercore generates text with causal attention only: serve a causal Gemma 3 model")
        super().__init__(hf_config, dtype)
        self.final_logit_softcapping = getattr(hf_config, "final_logit_softcapping", None)

    @classmethod
    def decoder_options(cls, config: PretrainedConfig) -> DecoderOptions:
        return DecoderOptions(norm=GemmaRMSNorm, embedding_scale=config.hidden_size**0.5,
                              decoder_layer=Gemma3DecoderLayer)

    def compute_logits(self, hidden: torch.Tensor) -> torch.Tensor:
        """Hidden states [N, hidden] → logits [N, vocab], soft-capped when the config says so."""
        logits = self.lm_head.compute_logits(hidden)
        cap = self.final_logit_softcapping
        if cap is not None:
            logits = torch.tanh(logits / cap) * cap
        return logits
