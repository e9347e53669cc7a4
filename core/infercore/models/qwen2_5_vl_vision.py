"""The Qwen2.5-VL vision tower: patches → window-attention ViT → 2×2 patch merger → LLM-sized embeddings.

* Patch embedding: HF's Conv3d whose kernel equals its stride is a linear map of each flattened
  (C, T, P, P) patch, so it is one matmul here.
* 2D rotary: each head's first half rotates by the patch's row, its second half by its column. One
  cos/sin table per image batch, indexed by patch, goes through the platform's ``rotary_embedding`` op
  (one launch for q and k where a platform fuses it, in place) in every layer.
* Window attention: the patches of a merge block stay together, and merge blocks are grouped into windows
  of ``window_size`` pixels (``window_size / patch / merge`` blocks a side). Hidden states are permuted once
  so every window is contiguous; layers in ``fullatt_block_indexes`` attend over the whole image, the others
  within their window. Attention is bidirectional, with no KV cache: :class:`EncoderAttention`, the platform's
  ``encoder_attention`` op.
* RMSNorm, a SwiGLU MLP with biases (its hidden width padded with zeros to a multiple of 8 per rank: see
  :class:`VisionMLP`), and the merger (RMSNorm, then an MLP on the 4 patches of a merge block
  concatenated); the output is un-permuted back to the image's merge-block order.

Linears and norms come from the layer catalogue, so the tower shards over tensor-parallel ranks (heads and
MLP columns) like the decoder does.
"""

from __future__ import annotations

import functools
from collections.abc import Iterable, Sequence
from dataclasses import dataclass

import torch
from torch import nn
from transformers import PretrainedConfig

from infercore.attention.encoder_attention import EncoderAttention
from infercore.layers import (
    GELU,
    ColumnParallelLinear,
    MergedColumnParallelLinear,
    QKVParallelLinear,
    RMSNorm,
    RowParallelLinear,
    SiluAndMul,
)
from infercore.layers.tensor_parallel import divide, get_tp_state
from infercore.ops import get_op
from infercore.quantization.context import linear_method_for
from infercore.quantization.unquantized import UnquantizedLinearMethod

Grid = tuple[int, int, int]


@dataclass(frozen=True)
class VisionLayout:
    """Where each patch goes for one batch of images (computed on the CPU from their grids).

    ``block_order`` lists merge blocks window by window; ``window_cu``/``image_cu`` bound each window's and
    each frame's patches in that order; ``rows``/``cols`` are each patch's rotary coordinates, also in it.
    """

    block_order: torch.Tensor
    window_cu: torch.Tensor
    image_cu: torch.Tensor
    rows: torch.Tensor
    cols: torch.Tensor

    @classmethod
    def build(cls, grids: Sequence[Grid], merge: int, window_blocks: int) -> VisionLayout:
        orders: list[torch.Tensor] = []
        window_lengths: list[int] = []
        frame_lengths: list[int] = []
        rows: list[torch.Tensor] = []
        cols: list[torch.Tensor] = []
        first_block = 0
        for grid in grids:
            image = _image_layout(*grid, merge=merge, window_blocks=window_blocks)
            orders.append(image.block_order + first_block)
            window_lengths.extend(image.window_lengths)
            frame_lengths.extend(image.frame_lengths)
            rows.append(image.rows)
            cols.append(image.cols)
            first_block += len(image.block_order)
        return cls(block_order=torch.cat(orders), window_cu=_cumulative(window_lengths),
                   image_cu=_cumulative(frame_lengths), rows=torch.cat(rows), cols=torch.cat(cols))


@dataclass(frozen=True)
class _ImageLayout:
    block_order: torch.Tensor
    window_lengths: tuple[int, ...]
    frame_lengths: tuple[int, ...]
    rows: torch.Tensor
    cols: torch.Tensor


@functools.lru_cache(maxsize=256)
def _image_layout(t: int, h: int, w: int, merge: int, window_blocks: int) -> _ImageLayout:
    """One image's layout (block numbers from 0), cached by grid: a batch of same-size images reuses it."""
    bh, bw = h // merge, w // merge
    unit = merge * merge
    blocks = torch.arange(t * bh * bw).reshape(t, bh, bw)
    order: list[torch.Tensor] = []
    lengths: list[int] = []
    for frame in range(t):
        for wr in range(0, bh, window_blocks):
            for wc in range(0, bw, window_blocks):
                window = blocks[frame, wr:wr + window_blocks, wc:wc + window_blocks].reshape(-1)
                order.append(window)
                lengths.append(window.numel() * unit)
    block_order = torch.cat(order)
    # Patch coordinates in merge-block order: block (r, c), then (i, j) inside it.
    r = torch.arange(bh).view(bh, 1, 1, 1) * merge + torch.arange(merge).view(1, 1, merge, 1)
    c = torch.arange(bw).view(1, bw, 1, 1) * merge + torch.arange(merge).view(1, 1, 1, merge)
    patch_order = (block_order.view(-1, 1) * unit + torch.arange(unit)).reshape(-1)
    rows = r.expand(bh, bw, merge, merge).reshape(-1).repeat(t)[patch_order]
    cols = c.expand(bh, bw, merge, merge).reshape(-1).repeat(t)[patch_order]
    return _ImageLayout(block_order, tuple(lengths), (h * w,) * t, rows, cols)


def _cumulative(lengths: list[int]) -> torch.Tensor:
    return torch.tensor([0, *lengths], dtype=torch.int64).cumsum(0).to(torch.int32)


class VisionRotary(nn.Module):
    """Axial 2D rotary: a quarter of the head's frequencies each for rows and columns, doubled (NeoX)."""

    def __init__(self, head_dim: int, theta: float) -> None:
        super().__init__()
        quarter = head_dim // 2
        inv_freq = 1.0 / (theta ** (torch.arange(0, quarter, 2, dtype=torch.float32) / quarter))
        self.register_buffer("inv_freq", inv_freq, persistent=False)

    def forward(self, rows: torch.Tensor, cols: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """For patches at (rows, cols): a ``rotary_embedding`` cos/sin table [T, head_dim] float32, row ``i``
        = cat(cos, sin) of patch ``i``'s angles (the NeoX pairing repeats them over both halves), and the
        positions [T] that index it."""
        inv = self.inv_freq.float()
        angles = torch.cat((rows.float()[:, None] * inv, cols.float()[:, None] * inv), dim=-1)
        return torch.cat((angles.cos(), angles.sin()), dim=-1), torch.arange(len(rows), device=rows.device)


class VisionAttention(nn.Module):
    """Fused QKV with biases, 2D rotary, bidirectional attention within each segment, output projection."""

    def __init__(self, dim: int, num_heads: int) -> None:
        super().__init__()
        self.head_dim = dim // num_heads
        self.qkv = QKVParallelLinear(dim, self.head_dim, num_heads, num_heads, bias=True)
        self.num_heads = self.qkv.num_heads  # this rank's
        self.proj = RowParallelLinear(dim, dim, bias=True)
        self.attn = EncoderAttention(self.num_heads, self.head_dim, self.head_dim**-0.5)
        self._rotary = get_op("rotary_embedding")

    def forward(self, x: torch.Tensor, rotary: tuple[torch.Tensor, torch.Tensor], cu_cpu: torch.Tensor) -> torch.Tensor:
        """``rotary``: the tower's cos/sin table and positions (:meth:`VisionRotary.forward`)."""
        n = x.shape[0]
        q, k, v = self.qkv(x).view(n, 3, self.num_heads, self.head_dim).unbind(1)
        table, positions = rotary
        q, k = self._rotary(positions, q.flatten(1), k.flatten(1), table, self.head_dim, True)
        shape = (n, self.num_heads, self.head_dim)
        return self.proj(self.attn(q.view(shape), k.view(shape), v, cu_cpu))


#: The MLP's hidden width per rank is padded to a multiple of this many entries (16 bytes of bf16).
HIDDEN_ALIGN = 8


class VisionMLP(nn.Module):
    """SwiGLU with biases: ``down(silu(gate(x)) * up(x))``.

    Unquantized, each rank's share of the hidden width is padded with zero rows of gate and up (biases too) and
    zero columns of down to a multiple of :data:`HIDDEN_ALIGN`: Qwen2.5-VL-7B's 3420 otherwise gives down a
    reduction cuBLAS takes with slow unaligned kernels. The padding adds exactly nothing (``silu(0) * 0 = 0``).
    """

    def __init__(self, dim: int, hidden: int) -> None:
        super().__init__()
        tp_size = get_tp_state().size
        self.hidden_per_rank = divide(hidden, tp_size, "vision MLP width")
        padded = self.hidden_per_rank
        if isinstance(linear_method_for(), UnquantizedLinearMethod):
            padded = -(-padded // HIDDEN_ALIGN) * HIDDEN_ALIGN
        self.padded_per_rank = padded
        self.gate_up_proj = MergedColumnParallelLinear(dim, [padded * tp_size] * 2, bias=True)
        self.act_fn = SiluAndMul()
        self.down_proj = RowParallelLinear(padded * tp_size, dim, bias=True)

    def pad_checkpoint(self, tensor: torch.Tensor, dim: int) -> torch.Tensor:
        """A checkpoint tensor of gate, up (``dim`` 0) or down (``dim`` 1) with every rank's share of the hidden
        width zero-padded to the width this MLP holds."""
        extra = self.padded_per_rank - self.hidden_per_rank
        if extra == 0:
            return tensor
        shape = list(tensor.shape)
        shape[dim] = extra
        zeros = tensor.new_zeros(shape)
        pieces = [part for chunk in tensor.split(self.hidden_per_rank, dim=dim) for part in (chunk, zeros)]
        return torch.cat(pieces, dim=dim)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.down_proj(self.act_fn(self.gate_up_proj(x)))


class VisionBlock(nn.Module):
    """Pre-norm attention and MLP, each with its residual."""

    def __init__(self, config: PretrainedConfig) -> None:
        super().__init__()
        self.norm1 = RMSNorm(config.hidden_size, eps=1e-6)
        self.norm2 = RMSNorm(config.hidden_size, eps=1e-6)
        self.attn = VisionAttention(config.hidden_size, config.num_heads)
        self.mlp = VisionMLP(config.hidden_size, config.intermediate_size)

    def forward(self, x: torch.Tensor, rotary: tuple[torch.Tensor, torch.Tensor], cu_cpu: torch.Tensor) -> torch.Tensor:
        x = x + self.attn(self.norm1(x), rotary, cu_cpu)
        return x + self.mlp(self.norm2(x))


class PatchMerger(nn.Module):
    """RMSNorm each patch, concatenate a merge block's patches, then Linear → GELU → Linear to the LLM width."""

    def __init__(self, out_dim: int, dim: int, merge: int) -> None:
        super().__init__()
        self.merged = dim * merge * merge
        self.ln_q = RMSNorm(dim, eps=1e-6)
        self.fc1 = ColumnParallelLinear(self.merged, self.merged, bias=True)
        self.act = GELU()
        self.fc2 = RowParallelLinear(self.merged, out_dim, bias=True)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.fc2(self.act(self.fc1(self.ln_q(x).view(-1, self.merged))))


class Qwen2_5_VisionTransformer(nn.Module):
    """``forward(pixel_values [patches, C*T*P*P], grids)`` → image embeddings [patches / merge², out_hidden]."""

    def __init__(self, config: PretrainedConfig) -> None:
        super().__init__()
        self.config = config
        self.merge = int(config.spatial_merge_size)
        self.patch_dim = int(config.in_channels * config.temporal_patch_size * config.patch_size**2)
        self.window_blocks = int(config.window_size) // self.merge // int(config.patch_size)
        self.full_attention = frozenset(int(i) for i in config.fullatt_block_indexes)
        self.patch_embed = nn.Linear(self.patch_dim, config.hidden_size, bias=False)
        rope = getattr(config, "rope_parameters", None) or {}
        self.rotary = VisionRotary(config.hidden_size // config.num_heads, float(rope.get("rope_theta", 10000.0)))
        self.blocks = nn.ModuleList(VisionBlock(config) for _ in range(config.depth))
        self.merger = PatchMerger(config.out_hidden_size, config.hidden_size, self.merge)

    @property
    def dtype(self) -> torch.dtype:
        return self.patch_embed.weight.dtype

    def forward(self, pixel_values: torch.Tensor, grids: Sequence[Grid]) -> torch.Tensor:
        layout = VisionLayout.build([tuple(int(x) for x in g) for g in grids], self.merge, self.window_blocks)
        device = self.patch_embed.weight.device
        unit = self.merge * self.merge
        order = layout.block_order.to(device)
        x = self.patch_embed(pixel_values.to(device=device, dtype=self.dtype))
        x = x.view(-1, unit, x.shape[-1])[order].reshape(-1, x.shape[-1])
        rotary = self.rotary(layout.rows.to(device), layout.cols.to(device))
        for i, block in enumerate(self.blocks):
            x = block(x, rotary, layout.image_cu if i in self.full_attention else layout.window_cu)
        merged = self.merger(x)
        return merged[torch.argsort(order)]

    def load_weights(self, weights: Iterable[tuple[str, torch.Tensor]]) -> set[str]:
        """Tensors named as under HF's ``visual.`` (without that prefix); the names of the parameters filled."""
        params = dict(self.named_parameters())
        loaded: set[str] = set()
        for name, tensor in weights:
            target, shard = _target(name)
            if target == "patch_embed.weight":
                tensor = tensor.reshape(tensor.shape[0], -1)
            param = params[target]
            loader = getattr(param, "weight_loader", None)
            if ".mlp.gate_up_proj." in target or target.endswith(".mlp.down_proj.weight"):
                mlp = self.get_submodule(target.split(".mlp.")[0] + ".mlp")
                tensor = mlp.pad_checkpoint(tensor, 1 if ".down_proj." in target else 0)
            if target.endswith(".qkv.weight") or target.endswith(".qkv.bias"):
                for part, piece in zip("qkv", tensor.chunk(3, dim=0), strict=True):
                    loader(param, piece, part)
            elif shard is not None:
                loader(param, tensor, shard)
            elif loader is not None:
                loader(param, tensor)
            else:
                param.data.copy_(tensor)
            loaded.add(target)
        return loaded


_RENAMES = {"merger.mlp.0.": "merger.fc1.", "merger.mlp.2.": "merger.fc2.", "patch_embed.proj.": "patch_embed."}


def _target(name: str) -> tuple[str, int | None]:
    """The parameter a checkpoint tensor of the tower fills, and its shard of a fused projection."""
    for old, new in _RENAMES.items():
        if name.startswith(old):
            return new + name[len(old):], None
    for part, shard in (("mlp.gate_proj.", 0), ("mlp.up_proj.", 1)):
        if part in name:
            return name.replace(part, "mlp.gate_up_proj."), shard
    return name, None
