"""GPT-2 (learned positions, LayerNorm with bias, tanh GELU, tied LM head) from infercore's layers."""

from __future__ import annotations

from collections.abc import Iterable

import torch
from torch import nn

from infercore.plugin_api import (
    GELU,
    Attention,
    ColumnParallelLinear,
    LayerNorm,
    LearnedPositionEmbedding,
    MergedColumnParallelLinear,
    ModelSpec,
    ParallelLMHead,
    RowParallelLinear,
    VocabParallelEmbedding,
)

#: GPT-2 checkpoints store these projections as Conv1D, [in, out]: transposed relative to a linear.
_CONV1D = ("attn.c_attn.weight", "attn.c_proj.weight", "mlp.c_fc.weight", "mlp.c_proj.weight")


class GPT2Attention(nn.Module):
    """Fused QKV projection (this rank's heads of each of q, k and v), paged attention, output projection."""

    def __init__(self, hidden: int, heads: int, layer_index: int, tp_size: int) -> None:
        super().__init__()
        self.head_dim = hidden // heads
        self.local_width = hidden // tp_size
        self.c_attn = MergedColumnParallelLinear(hidden, [hidden] * 3, bias=True)
        self.c_proj = RowParallelLinear(hidden, hidden, bias=True)
        local_heads = heads // tp_size
        self.attn = Attention(local_heads, self.head_dim, num_kv_heads=local_heads, scale=self.head_dim**-0.5,
                              layer_index=layer_index)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        q, k, v = self.c_attn(x).split(self.local_width, dim=-1)
        return self.c_proj(self.attn(q, k, v))


class GPT2MLP(nn.Module):
    """hidden → 4·hidden → GELU (tanh) → hidden."""

    def __init__(self, hidden: int, inner: int, approximate: str) -> None:
        super().__init__()
        self.c_fc = ColumnParallelLinear(hidden, inner, bias=True)
        self.act = GELU(approximate)
        self.c_proj = RowParallelLinear(inner, hidden, bias=True)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.c_proj(self.act(self.c_fc(x)))


class GPT2Block(nn.Module):
    """Pre-norm block: x + attn(ln_1(x)), then x + mlp(ln_2(x))."""

    def __init__(self, config: object, layer_index: int, tp_size: int) -> None:
        super().__init__()
        hidden, eps = config.n_embd, config.layer_norm_epsilon
        approximate = "none" if config.activation_function == "gelu" else "tanh"
        self.ln_1 = LayerNorm(hidden, eps)
        self.attn = GPT2Attention(hidden, config.n_head, layer_index, tp_size)
        self.ln_2 = LayerNorm(hidden, eps)
        self.mlp = GPT2MLP(hidden, config.n_inner or 4 * hidden, approximate)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x = x + self.attn(self.ln_1(x))
        return x + self.mlp(self.ln_2(x))


class GPT2Model(nn.Module):
    """Token and position embeddings, the blocks, a final LayerNorm."""

    def __init__(self, config: object, tp_size: int) -> None:
        super().__init__()
        self.wte = VocabParallelEmbedding(config.vocab_size, config.n_embd)
        self.wpe = LearnedPositionEmbedding(config.n_positions, config.n_embd)
        self.h = nn.ModuleList(GPT2Block(config, i, tp_size) for i in range(config.n_layer))
        self.ln_f = LayerNorm(config.n_embd, config.layer_norm_epsilon)

    def forward(self, input_ids: torch.Tensor, positions: torch.Tensor) -> torch.Tensor:
        x = self.wte(input_ids) + self.wpe(positions)
        for block in self.h:
            x = block(x)
        return self.ln_f(x)


class GPT2LMHeadModel(nn.Module):
    """GPT-2 for causal LM; the LM head is the token embedding (tied, absent from checkpoints)."""

    def __init__(self, spec: ModelSpec) -> None:
        super().__init__()
        self.config = spec.hf_config
        self.transformer = GPT2Model(spec.hf_config, spec.tp_size)
        self.lm_head = ParallelLMHead(spec.hf_config.vocab_size, spec.hf_config.n_embd)
        self.lm_head.weight = self.transformer.wte.weight

    @classmethod
    def from_spec(cls, spec: ModelSpec) -> GPT2LMHeadModel:
        return cls(spec)

    def forward(self, input_ids: torch.Tensor, positions: torch.Tensor) -> torch.Tensor:
        return self.transformer(input_ids, positions)

    def compute_logits(self, hidden: torch.Tensor) -> torch.Tensor:
        return self.lm_head.compute_logits(hidden)

    def load_weights(self, weights: Iterable[tuple[str, torch.Tensor]]) -> set[str]:
        """Checkpoint names are the parameter names (``transformer.…``); Conv1D weights are transposed.
        Returns the parameters filled, so the loader reports any the checkpoint lacks."""
        params = dict(self.named_parameters())
        loaded: set[str] = set()
        for name, tensor in weights:
            if name == "lm_head.weight" or name.endswith((".attn.bias", ".attn.masked_bias")):
                continue  # the tied head, and causal-mask buffers of old checkpoints
            if name not in params:
                raise ValueError(f"checkpoint tensor {name!r} matches no parameter of GPT2LMHeadModel")
            if name.endswith(_CONV1D):
                tensor = tensor.t()
            param = params[name]
            with torch.no_grad():
                if ".attn.c_attn." in name:  # q, k and v one after the other: each rank takes its heads of each
                    for index, part in enumerate(tensor.chunk(3, dim=0)):
                        param.weight_loader(param, part, index)
                else:
                    getattr(param, "weight_loader", lambda p, t: p.copy_(t))(param, tensor)
            loaded.add(name)
        return loaded
