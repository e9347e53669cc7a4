"""The ViT towers of CLIP and SigLIP, as vision-language models use them: patch embeddings, then
pre-norm encoder layers of bidirectional attention (every image one sequence, no KV cache) and an MLP.

A tower runs only the layers its caller reads (LLaVA reads the penultimate layer's hidden states), and never
the pooling head; the post-norm only for a caller that reads the last layer through it (Gemma 3, as HF's
``last_hidden_state``). Linears and norms come from the layer
catalogue (so they shard under tensor parallelism); attention is :class:`EncoderAttention`, through the
platform's ``encoder_attention`` op.
"""

from __future__ import annotations

import torch
from torch import nn
from transformers import PretrainedConfig

from infercore.attention.encoder_attention import EncoderAttention
from infercore.layers import GELU, ColumnParallelLinear, LayerNorm, QKVParallelLinear, RowParallelLinear
from infercore.models.weight_loading import StackedParam

STACKED_PARAMS = [
    StackedParam("qkv_proj", "q_proj", "q"),
    StackedParam("qkv_proj", "k_proj", "k"),
    StackedParam("qkv_proj", "v_proj", "v"),
]


class QuickGELU(nn.Module):
    """CLIP's ``x * sigmoid(1.702 x)``."""

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return x * torch.sigmoid(1.702 * x)


def vision_activation(name: str) -> nn.Module:
    """The tower's MLP activation by its HF name."""
    if name == "quick_gelu":
        return QuickGELU()
    if name in ("gelu_pytorch_tanh", "gelu_new", "gelu_fast"):
        return GELU("tanh")
    if name == "gelu":
        return GELU("none")
    raise ValueError(f"vision tower activation {name!r} is not supported (quick_gelu, gelu, gelu_pytorch_tanh)")


class VisionAttention(nn.Module):
    """Fused q/k/v with biases, bidirectional attention within each image, output projection."""

    def __init__(self, config: PretrainedConfig) -> None:
        super().__init__()
        heads = config.num_attention_heads
        head_dim = config.hidden_size // heads
        self.qkv_proj = QKVParallelLinear(config.hidden_size, head_dim, heads, heads, bias=True)
        self.q_size = self.qkv_proj.num_heads * head_dim
        self.attn = EncoderAttention(self.qkv_proj.num_heads, head_dim, scale=head_dim**-0.5)
        self.out_proj = RowParallelLinear(heads * head_dim, config.hidden_size, bias=True)

    def forward(self, hidden: torch.Tensor, cu_seqlens_cpu: torch.Tensor) -> torch.Tensor:
        q, k, v = self.qkv_proj(hidden).split([self.q_size] * 3, dim=-1)
        return self.out_proj(self.attn(q, k, v, cu_seqlens_cpu))


class VisionMLP(nn.Module):
    def __init__(self, config: PretrainedConfig) -> None:
        super().__init__()
        self.fc1 = ColumnParallelLinear(config.hidden_size, config.intermediate_size, bias=True)
        self.act = vision_activation(config.hidden_act)
        self.fc2 = RowParallelLinear(config.intermediate_size, config.hidden_size, bias=True)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.fc2(self.act(self.fc1(x)))


class VisionEncoderLayer(nn.Module):
    """``x + attn(norm1(x))``, then ``x + mlp(norm2(x))``."""

    def __init__(self, config: PretrainedConfig) -> None:
        super().__init__()
        self.layer_norm1 = LayerNorm(config.hidden_size, eps=config.layer_norm_eps)
        self.self_attn = VisionAttention(config)
        self.layer_norm2 = LayerNorm(config.hidden_size, eps=config.layer_norm_eps)
        self.mlp = VisionMLP(config)

    def forward(self, hidden: torch.Tensor, cu_seqlens_cpu: torch.Tensor) -> torch.Tensor:
        hidden = hidden + self.self_attn(self.layer_norm1(hidden), cu_seqlens_cpu)
        return hidden + self.mlp(self.layer_norm2(hidden))


class VisionEncoder(nn.Module):
    """The encoder layers (only the first ``num_layers`` are built)."""

    def __init__(self, config: PretrainedConfig, num_layers: int) -> None:
        super().__init__()
        self.layers = nn.ModuleList(VisionEncoderLayer(config) for _ in range(num_layers))


class VisionEmbeddings(nn.Module):
    """Patch embedding (a strided convolution) plus learned positions; CLIP adds a class token first."""

    def __init__(self, config: PretrainedConfig, class_token: bool) -> None:
        super().__init__()
        self.patch_size = config.patch_size
        self.image_size = config.image_size
        num_patches = (config.image_size // config.patch_size) ** 2
        self.class_token = class_token
        if class_token:
            self.class_embedding = nn.Parameter(torch.zeros(config.hidden_size))
        self.patch_embedding = nn.Conv2d(config.num_channels, config.hidden_size, kernel_size=config.patch_size,
                                         stride=config.patch_size, bias=not class_token)
        self.position_embedding = nn.Embedding(num_patches + int(class_token), config.hidden_size)

    def forward(self, pixel_values: torch.Tensor) -> torch.Tensor:
        """[N, C, H, W] → [N, tokens, hidden]."""
        if pixel_values.shape[-2:] != (self.image_size, self.image_size):
            raise ValueError(f"the vision tower takes {self.image_size}x{self.image_size} images, got "
                             f"{tuple(pixel_values.shape[-2:])}; the processor and the model's config disagree")
        weight = self.patch_embedding.weight
        patches = self.patch_embedding(pixel_values.to(weight.dtype)).flatten(2).transpose(1, 2)
        if self.class_token:
            cls = self.class_embedding.expand(patches.shape[0], 1, -1)
            patches = torch.cat([cls, patches], dim=1)
        return patches + self.position_embedding.weight


class VisionTransformer(nn.Module):
    """CLIP's or SigLIP's ``vision_model``: embeddings, CLIP's pre-norm, the encoder. ``forward`` returns the
    hidden states after each of ``layers`` (0: the embeddings; ``i``: after layer ``i``), the last of them
    through the post-norm when ``post_norm``."""

    def __init__(self, config: PretrainedConfig, num_layers: int, post_norm: bool = False) -> None:
        super().__init__()
        clip = config.model_type.startswith("clip")
        self.embeddings = VisionEmbeddings(config, class_token=clip)
        self.pre_layrnorm = LayerNorm(config.hidden_size, eps=config.layer_norm_eps) if clip else None
        self.encoder = VisionEncoder(config, num_layers)
        self.post_layernorm = LayerNorm(config.hidden_size, eps=config.layer_norm_eps) if post_norm else None

    def forward(self, pixel_values: torch.Tensor, layers: list[int]) -> list[torch.Tensor]:
        hidden = self.embeddings(pixel_values)
        if self.pre_layrnorm is not None:
            hidden = self.pre_layrnorm(hidden)
        n, length, width = hidden.shape
        cu_seqlens = torch.arange(n + 1, dtype=torch.int32) * length
        flat = hidden.reshape(n * length, width)
        picked = {0: flat} if 0 in layers else {}
        for i, layer in enumerate(self.encoder.layers, start=1):
            flat = layer(flat, cu_seqlens)
            if i in layers:
                picked[i] = flat
        if self.post_layernorm is not None:
            picked[layers[-1]] = self.post_layernorm(picked[layers[-1]])
        return [picked[i].view(n, length, width) for i in layers]


class VisionTower(nn.Module):
    """HF's ``CLIPVisionModel`` / ``SiglipVisionModel`` (its ViT is ``vision_model``, whose checkpoint names
    are ``embeddings.…``, ``encoder.layers.…``), cut after the deepest layer read. ``feature_layers`` are HF ``hidden_states`` indices (negative from the end). ``post_norm``: the last feature layer goes through
    the post-norm (HF's ``last_hidden_state``, with ``feature_layers=[-1]``)."""

    def __init__(self, config: PretrainedConfig, feature_layers: list[int], post_norm: bool = False) -> None:
        super().__init__()
        total = config.num_hidden_layers
        self.feature_layers = [i if i >= 0 else total + 1 + i for i in feature_layers]
        if not all(0 <= i <= total for i in self.feature_layers):
            raise ValueError(f"vision_feature_layer {feature_layers} is outside the tower's {total} layers")
        self.num_layers = max(self.feature_layers)
        self.vision_model = VisionTransformer(config, self.num_layers, post_norm)

    def forward(self, pixel_values: torch.Tensor) -> list[torch.Tensor]:
        """The hidden states [N, tokens, hidden] of each feature layer."""
        return self.vision_model(pixel_values, self.feature_layers)

    def skips_weight(self, name: str) -> bool:
        """Checkpoint tensors of the tower that nothing built reads (later layers, post-norm, head)."""
        if name.startswith("post_layernorm."):
            return self.vision_model.post_layernorm is None
        if name.startswith("head.") or name.endswith("position_ids"):
            return True
        marker = "encoder.layers."
        if marker in name:
            index = int(name.split(marker, 1)[1].split(".", 1)[0])
            return index >= self.num_layers
        return False
