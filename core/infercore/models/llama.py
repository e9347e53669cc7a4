"""The Llama decoder, which Mistral, Qwen2, Qwen3, Phi-3, the mixture-of-experts families and Gemma 3
reuse through :class:`DecoderOptions`.

Attention → MLP → decoder layer → model → causal LM, as in the paper's diagram; paged attention,
kernels and sharding live in :mod:`infercore.layers` and :mod:`infercore.attention`.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from dataclasses import dataclass
from typing import ClassVar

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
from infercore.layers.pipeline_parallel import MissingLayer, get_pp_state
from infercore.models.multimodal import MultiModalStepInputs
from infercore.models.rope_params import rope_settings
from infercore.models.weight_loading import StackedParam, load_checkpoint_weights
from infercore.quantization.activation import ActivationQuant, QuantizedActivation, input_quant_of

STACKED_PARAMS = [
    StackedParam("qkv_proj", "q_proj", "q"),
    StackedParam("qkv_proj", "k_proj", "k"),
    StackedParam("qkv_proj", "v_proj", "v"),
    StackedParam("gate_up_proj", "gate_proj", 0),
    StackedParam("gate_up_proj", "up_proj", 1),
]


#: Builds layer ``layer_index``'s feed-forward block: ``(config, layer_index) -> module``.
FeedForwardFactory = Callable[[PretrainedConfig, int], nn.Module]
#: Builds a whole decoder layer: ``(config, options, layer_index, dtype) -> module`` with the forward
#: ``(positions, hidden, residual) -> (hidden, residual)`` of :class:`LlamaDecoderLayer`.
DecoderLayerFactory = Callable[[PretrainedConfig, "DecoderOptions", int, torch.dtype], nn.Module]


@dataclass(frozen=True)
class DecoderOptions:
    """Where the Llama-family architectures differ: a family is an option set, not a copy of the shell."""

    qkv_bias: bool = False
    o_bias: bool = False
    mlp_bias: bool = False
    #: RMSNorm of each query and key head before rotary (Qwen3).
    qk_norm: bool = False
    #: Sliding attention window per layer (None = full attention).
    sliding_windows: tuple[int | None, ...] = ()
    #: Each layer's feed-forward block (None: the dense SwiGLU MLP); a mixture of experts, say.
    feed_forward: FeedForwardFactory | None = None
    #: The decoder layer's attribute (and checkpoint name) for its feed-forward block.
    ffn_name: str = "mlp"
    #: The norm of the residual stream (the layers' and the final one): RMSNorm, Gemma's ``1 + weight``.
    norm: Callable[..., nn.Module] = RMSNorm
    #: A factor on the token embeddings, rounded to the model's dtype as HF does (Gemma: sqrt(hidden)).
    embedding_scale: float | None = None
    #: Builds each decoder layer (None: :class:`LlamaDecoderLayer`), for families whose layer differs in
    #: where its norms sit (Gemma's sandwich norms).
    decoder_layer: DecoderLayerFactory | None = None


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

    def input_quant(self) -> ActivationQuant | None:
        """How the norm in front may quantize the input (the QKV projection's wish)."""
        return input_quant_of(self.qkv_proj)

    def forward(self, positions: torch.Tensor, hidden: torch.Tensor | QuantizedActivation) -> torch.Tensor:
        return self.o_proj(self.attend(positions, hidden))

    def attend(self, positions: torch.Tensor, hidden: torch.Tensor | QuantizedActivation) -> torch.Tensor:
        """The attention's output before ``o_proj``, the tokens' K/V written to the cache on the way (a draft
        head's catch-up that only needs its cache stops here)."""
        q, k, v = self._qkv(hidden)
        if self.fused_qk_norm_rotary:
            # The backend may norm and rotate q/k in the same pass as its KV cache write.
            return self.attn.forward_qk_norm_rotary(positions, q, k, v, self.rotary_emb, self.q_norm, self.k_norm)
        return self.attn(*self._norm_rotate(positions, q, k), v)

    def write_kv(self, positions: torch.Tensor, hidden: torch.Tensor | QuantizedActivation) -> None:
        """The tokens' K/V cache entries alone, as :meth:`attend` writes them, without the attention where the
        backend can skip it (a draft head's catch-up over tokens it will not draft from)."""
        q, k, v = self._qkv(hidden)
        if self.fused_qk_norm_rotary:
            q, k = self.rotary_emb.forward_with_qk_norm(positions, q, k, self.q_norm, self.k_norm)
        else:
            q, k = self._norm_rotate(positions, q, k)
        self.attn.write_kv(q, k, v)

    def _qkv(self, hidden: torch.Tensor | QuantizedActivation) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
        """q, k and v: row-strided column slices of the QKV output (the attention backends take them so)."""
        q, k, v = self.qkv_proj(hidden).split([self.q_size, self.kv_size, self.kv_size], dim=-1)
        return q, k, v

    def _norm_rotate(self, positions: torch.Tensor, q: torch.Tensor,
                     k: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """q and k normed per head (Qwen3-style, where the model has the norms), then rotated, op by op."""
        if self.qk_norm:
            q = self.q_norm(q.reshape(-1, self.head_dim)).view(q.shape)
            k = self.k_norm(k.reshape(-1, self.head_dim)).view(k.shape)
        return self.rotary_emb(positions, q, k)


class LlamaMLP(nn.Module):
    """SwiGLU: ``down(silu(gate(x)) * up(x))`` with gate and up fused."""

    def __init__(self, config: PretrainedConfig, options: DecoderOptions) -> None:
        super().__init__()
        size = config.intermediate_size
        self.gate_up_proj = MergedColumnParallelLinear(config.hidden_size, [size, size], bias=options.mlp_bias)
        self.act_fn = SiluAndMul()
        self.down_proj = RowParallelLinear(size, config.hidden_size, bias=options.mlp_bias)

    def input_quant(self) -> ActivationQuant | None:
        """How the norm in front may quantize the input (the gate/up projection's wish)."""
        return input_quant_of(self.gate_up_proj)

    def forward(self, x: torch.Tensor | QuantizedActivation) -> torch.Tensor:
        gate_up = self.gate_up_proj(x)
        # A down projection that fuses the activation (unquantized; wrapped by LoRA, only where the platform's
        # lora_linear op takes the gate/up output too) takes it as it is; the op may compute both at once.
        if getattr(self.down_proj, "fuses_silu_and_mul", False):
            return self.down_proj.forward_silu_and_mul(gate_up)
        # The activation quantizes its output itself when the down projection takes FP8 input.
        return self.down_proj(self.act_fn(gate_up, quant=input_quant_of(self.down_proj)))


class LlamaDecoderLayer(nn.Module):
    """Pre-norm attention, then the feed-forward block ``options.ffn_name``: the dense MLP unless
    ``options.feed_forward`` builds another (a mixture-of-experts block, say). The residual stream is
    carried alongside so norms can fuse the add, and quantize their output when the block after them
    takes FP8 input (:func:`~infercore.quantization.activation.input_quant_of`)."""

    def __init__(self, config: PretrainedConfig, options: DecoderOptions, layer_index: int,
                 dtype: torch.dtype) -> None:
        super().__init__()
        self.self_attn = LlamaAttention(config, options, layer_index, dtype)
        self.ffn_name = options.ffn_name
        ffn = (options.feed_forward(config, layer_index) if options.feed_forward is not None
               else LlamaMLP(config, options))
        self.add_module(self.ffn_name, ffn)
        self.input_layernorm = options.norm(config.hidden_size, eps=config.rms_norm_eps)
        self.post_attention_layernorm = options.norm(config.hidden_size, eps=config.rms_norm_eps)

    def forward(self, positions: torch.Tensor, hidden: torch.Tensor,
                residual: torch.Tensor | None) -> tuple[torch.Tensor, torch.Tensor]:
        ffn = getattr(self, self.ffn_name)
        normed: torch.Tensor | QuantizedActivation
        if residual is None:
            residual = hidden
            normed = self.input_layernorm(hidden, quant=self.self_attn.input_quant())
        else:
            normed, residual = self.input_layernorm(hidden, residual, quant=self.self_attn.input_quant())
        hidden = self.self_attn(positions, normed)
        normed, residual = self.post_attention_layernorm(hidden, residual, quant=input_quant_of(ffn))
        return ffn(normed), residual


class LlamaModel(nn.Module):
    """Embedding (scaled when the options say so), decoder layers and the final norm.

    Under pipeline parallelism (:mod:`infercore.layers.pipeline_parallel`) it holds only its stage's
    layers (the others are :class:`MissingLayer`), the embedding on the first stage (``keep_embedding``
    keeps it on another: the last stage's tied LM head reads it) and the norm on the last; a stage after
    the first starts from the hidden states and residual the stage before sent, and a stage before the
    last sends its own on."""

    def __init__(self, config: PretrainedConfig, options: DecoderOptions, dtype: torch.dtype,
                 keep_embedding: bool = False) -> None:
        super().__init__()
        pp = get_pp_state()
        self.hidden_size, self.dtype = config.hidden_size, dtype
        self.embed_tokens = (VocabParallelEmbedding(config.vocab_size, config.hidden_size)
                             if pp.is_first or keep_embedding else MissingLayer())
        scale = options.embedding_scale
        self.embed_scale: torch.Tensor | None
        self.register_buffer("embed_scale", None if scale is None else torch.tensor(scale, dtype=dtype),
                             persistent=False)
        build = options.decoder_layer or LlamaDecoderLayer
        self.start_layer, self.end_layer = pp.layer_range(config.num_hidden_layers)
        self.layers = nn.ModuleList(build(config, options, i, dtype) if self.start_layer <= i < self.end_layer
                                    else MissingLayer() for i in range(config.num_hidden_layers))
        self.norm = options.norm(config.hidden_size, eps=config.rms_norm_eps) if pp.is_last else MissingLayer()
        #: A vision-language model's step image rows (:mod:`infercore.models.multimodal`), merged into the
        #: token embeddings; None for a text-only model.
        self.mm_inputs: MultiModalStepInputs | None = None

    def forward(self, input_ids: torch.Tensor, positions: torch.Tensor) -> torch.Tensor:
        pp = get_pp_state()
        residual: torch.Tensor | None = None
        if pp.is_first:
            hidden = self.embed_tokens(input_ids)
            if self.embed_scale is not None:
                hidden = hidden * self.embed_scale
            if self.mm_inputs is not None:
                hidden = self.mm_inputs.merge(hidden)
        else:
            hidden, residual = pp.recv(len(positions), self.hidden_size, self.dtype, positions.device)
        for layer in self.layers[self.start_layer:self.end_layer]:
            hidden, residual = layer(positions, hidden, residual)
        if not pp.is_last:
            assert residual is not None
            pp.send(hidden, residual)
            return hidden
        hidden, _ = self.norm(hidden, residual)
        return hidden


class LlamaForCausalLM(nn.Module):
    """Llama 2/3 (rope scaling included). Families subclass it and change :meth:`decoder_options`
    (and, with experts, :meth:`load_weights`)."""

    #: Pipeline stages build only their layers (see :class:`LlamaModel`).
    supports_pipeline_parallel: ClassVar[bool] = True

    #: Whether the LM head shares the embedding when the config does not say.
    ties_embeddings_by_default: ClassVar[bool] = False

    #: Its weight loaders narrow checkpoint tensors to this rank's shard before reading them, so under
    #: tensor parallelism the loader hands it lazy slices (see models/checkpoint_slice.py).
    loads_checkpoint_slices = True

    def __init__(self, hf_config: PretrainedConfig, dtype: torch.dtype) -> None:
        super().__init__()
        self.config = hf_config
        self.tie_word_embeddings = bool(getattr(hf_config, "tie_word_embeddings", self.ties_embeddings_by_default))
        last = get_pp_state().is_last
        self.model = LlamaModel(hf_config, self.decoder_options(hf_config), dtype,
                                keep_embedding=last and self.tie_word_embeddings)
        self.lm_head = ParallelLMHead(hf_config.vocab_size, hf_config.hidden_size) if last else MissingLayer()
        if self.tie_word_embeddings and last:
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
