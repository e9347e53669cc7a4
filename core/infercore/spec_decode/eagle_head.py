"""EAGLE draft heads: one decoder layer fed by the target's hidden states, in the public checkpoint layouts.

**EAGLE-3** (``method: eagle3``; e.g. ``yuhuili/EAGLE3-LLaMA3.1-Instruct-8B`` and the Qwen3 heads in the
same layout): three of the target's layers' hidden states (low, mid, high), concatenated and projected
by ``fc`` [H, 3·H_target]; the layer ``midlayer.*`` attends over ``cat(input_layernorm(embed(token)),
hidden_norm(h))`` (its q/k/v take 2·H), adds ``h`` back and runs its MLP; ``norm`` and ``lm_head`` give
logits over a draft vocabulary of ``draft_vocab_size`` tokens, and ``d2t[i]`` maps draft token ``i`` to
target token ``i + d2t[i]`` (``t2d``, the reverse mask, is read and unused). The layer's output is the
next draft step's ``h`` (fc applies to the target's states only). ``embed_tokens`` is the target's when
the checkpoint has none.

**EAGLE-1** (``method: eagle``; e.g. ``yuhuili/EAGLE-LLaMA3-Instruct-8B``): ``fc`` [H, 2·H] projects
``cat(embed(token), h)`` where ``h`` is the target's last (normed) hidden state; ``layers.0.*`` is a
Llama decoder layer without its input norm; the target's LM head gives the logits.
"""

from __future__ import annotations

import copy
from collections.abc import Iterable

import torch
from torch import nn
from transformers import PretrainedConfig

from infercore.layers import ParallelLMHead, RMSNorm, RowParallelLinear, VocabParallelEmbedding
from infercore.models.llama import STACKED_PARAMS, DecoderOptions, LlamaAttention, LlamaMLP, head_dim_of
from infercore.models.weight_loading import load_checkpoint_weights

#: Architecture names of EAGLE-3 head checkpoints (config.json's ``architectures``).
EAGLE3_ARCHITECTURES = ("LlamaForCausalLMEagle3", "Eagle3LlamaForCausalLM", "Eagle3Qwen3ForCausalLM")


def default_aux_layers(num_layers: int) -> tuple[int, ...]:
    """EAGLE-3's low, mid and high layers: the inputs of layers 2, L/2 and L-3 (clamped for tiny models)."""
    return tuple(min(max(i, 0), num_layers - 1) for i in (2, num_layers // 2, num_layers - 3))


class EagleLayer(nn.Module):
    """The head's decoder layer: attention over ``in_mult``·H inputs, then the residual and the MLP."""

    def __init__(self, config: PretrainedConfig, dtype: torch.dtype, eagle3: bool, window: int | None) -> None:
        super().__init__()
        hidden = config.hidden_size
        wide = copy.deepcopy(config)
        wide.head_dim = head_dim_of(config)
        if eagle3:
            wide.hidden_size = 2 * hidden
        options = DecoderOptions(qkv_bias=bool(getattr(config, "attention_bias", False)), sliding_windows=(window,))
        self.self_attn = LlamaAttention(wide, options, 0, dtype)
        self.self_attn.o_proj = RowParallelLinear(config.num_attention_heads * wide.head_dim, hidden, bias=False)
        self.mlp = LlamaMLP(config, options)
        eps = config.rms_norm_eps
        if eagle3:
            self.input_layernorm = RMSNorm(hidden, eps=eps)
            self.hidden_norm = RMSNorm(hidden, eps=eps)
        self.post_attention_layernorm = RMSNorm(hidden, eps=eps)
        self.eagle3 = eagle3

    def forward(self, positions: torch.Tensor, embeds: torch.Tensor, hidden: torch.Tensor) -> torch.Tensor:
        """EAGLE-3: ``(embeds, h)`` → next ``h``; EAGLE-1: ``embeds`` is ``fc(cat(embed, h))`` and ``hidden`` it too."""
        hidden = hidden + self.self_attn(positions, self._attention_input(embeds, hidden))
        return hidden + self.mlp(self.post_attention_layernorm(hidden))

    def write_kv(self, positions: torch.Tensor, embeds: torch.Tensor, hidden: torch.Tensor) -> None:
        """Only the tokens' K/V entries, as :meth:`forward` writes them (no output projection, no MLP)."""
        self.self_attn.write_kv(positions, self._attention_input(embeds, hidden))

    def _attention_input(self, embeds: torch.Tensor, hidden: torch.Tensor) -> torch.Tensor:
        return torch.cat([self.input_layernorm(embeds), self.hidden_norm(hidden)], dim=-1) if self.eagle3 else embeds


class EagleHead(nn.Module):
    """An EAGLE-1 or EAGLE-3 draft head (see the module docstring)."""

    def __init__(self, config: PretrainedConfig, dtype: torch.dtype, *, eagle3: bool, target_hidden: int,
                 num_aux: int, window: int | None = None) -> None:
        super().__init__()
        hidden = config.hidden_size
        self.eagle3 = eagle3
        self.vocab_size = int(config.vocab_size)
        self.draft_vocab_size = int(getattr(config, "draft_vocab_size", None) or self.vocab_size)
        self.embed_tokens = VocabParallelEmbedding(self.vocab_size, hidden)
        in_features = num_aux * target_hidden if eagle3 else 2 * hidden
        self.fc = nn.Linear(in_features, hidden, bias=bool(getattr(config, "bias", not eagle3)))
        layer = EagleLayer(config, dtype, eagle3, window)
        if eagle3:
            self.midlayer = layer
            self.norm = RMSNorm(hidden, eps=config.rms_norm_eps)
            self.lm_head = ParallelLMHead(self.draft_vocab_size, hidden)
            self.register_buffer("d2t", torch.zeros(self.draft_vocab_size, dtype=torch.int64))
            self.register_buffer("t2d", torch.ones(self.vocab_size, dtype=torch.bool))
        else:
            self.layers = nn.ModuleList([layer])
        self.has_own_embedding = False

    @property
    def layer(self) -> EagleLayer:
        return self.midlayer if self.eagle3 else self.layers[0]

    def combine(self, target_hidden: torch.Tensor) -> torch.Tensor:
        """EAGLE-3: the target's concatenated layers → the head's ``h`` (EAGLE-1: as they are)."""
        return self.fc(target_hidden) if self.eagle3 else target_hidden

    def forward(self, input_ids: torch.Tensor, positions: torch.Tensor, hidden: torch.Tensor) -> torch.Tensor:
        """Tokens, positions and ``h`` (one per token) → the layer's output, the next step's ``h``."""
        return self.layer(positions, *self._layer_inputs(input_ids, hidden))

    def write_kv(self, input_ids: torch.Tensor, positions: torch.Tensor, hidden: torch.Tensor) -> None:
        """:meth:`forward`'s K/V cache entries alone: what a catch-up pass that drafts nothing needs (the
        entries depend on each token's own inputs only, not on the attention over the others)."""
        self.layer.write_kv(positions, *self._layer_inputs(input_ids, hidden))

    def _layer_inputs(self, input_ids: torch.Tensor, hidden: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """The layer's ``(embeds, hidden)``: EAGLE-3's token embeddings and ``h``; EAGLE-1's
        ``fc(cat(embed, h))`` twice."""
        embeds = self.embed_tokens(input_ids)
        if self.eagle3:
            return embeds, hidden
        x = self.fc(torch.cat([embeds, hidden], dim=-1))
        return x, x

    def draft_tokens(self, hidden: torch.Tensor, target_logits: nn.Module | None = None) -> torch.Tensor:
        """Target token ids of the head's argmax at each row of ``hidden``."""
        if not self.eagle3:
            assert target_logits is not None
            return target_logits(hidden).argmax(dim=-1)
        best = self.lm_head.compute_logits(self.norm(hidden))[:, : self.draft_vocab_size].argmax(dim=-1)
        return best + self.d2t.index_select(0, best)

    def load_weights(self, weights: Iterable[tuple[str, torch.Tensor]]) -> None:
        """Load a checkpoint in the public layouts; ``d2t``/``t2d`` are buffers, ``embed_tokens`` optional
        (the target's is shared when the checkpoint has none: :attr:`has_own_embedding` says)."""
        head = self

        class _Extra:
            def owns(self, param_name: str) -> bool:
                return param_name.startswith("embed_tokens.")

            def load(self, name: str, tensor: torch.Tensor) -> bool:
                if name in ("d2t", "t2d"):
                    buffer = getattr(head, name)
                    buffer.copy_(tensor.to(buffer.dtype))
                    return True
                if name == "embed_tokens.weight":
                    param = head.embed_tokens.weight
                    getattr(param, "weight_loader", lambda p, t: p.data.copy_(t))(param, tensor)
                    head.has_own_embedding = True
                    return True
                return False

            def missing(self) -> list[str]:
                return []

        renamed = ((name.removeprefix("model."), tensor) for name, tensor in weights)
        load_checkpoint_weights(self, renamed, STACKED_PARAMS, ignore_prefixes=("layers.0.input_layernorm",),
                                extra=_Extra())
