"""W4A16 in plain torch: the layout every INT4 checkpoint is repacked into, and the reference GEMM.

Whatever the checkpoint (AWQ, GPTQ with or without act-order), a loaded layer holds one
:class:`Int4Weight`: codes packed eight to an int32 along the input features ([K/8, N], so a kernel
reads each tile's words contiguously along N; loaded layers interleave each word's rows so that one mask
of ``word >> 4r`` gives rows ``2r`` and ``2r + 1`` as a pair of 16-bit halves), one scale and one
zero-point per group of input rows and output column, and the weight
``W[k, n] = (q[k, n] - zero[group(k), n]) * scale[group(k), n]``.

Act-order (GPTQ ``desc_act``) checkpoints give each input row its group through ``g_idx``. Rows are
sorted by group when loading, so that groups are runs of consecutive rows again, and the activations'
columns are gathered in the same order (``perm``) before the product, as Marlin does. When the sorted
groups are not runs of exactly ``group_size`` rows (a row-parallel shard of an act-order layer), each
row keeps its group number in ``row_groups``.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch

from infercore.ops.int4_packing import (
    PACK,
    pack_interleaved,
    pack_sequential,
    unpack_interleaved,
    unpack_sequential,
)


@dataclass(frozen=True)
class Int4Weight:
    """A 4-bit weight as the ``int4_linear`` op takes it.

    ``qweight`` int32 [K/8, N] (sequential nibbles along K); ``scales`` [G, N] in the activations'
    dtype; ``zeros`` uint8 [G, N] (1..16 for GPTQ v1 checkpoints, 0..15 for AWQ); ``group_size``
    rows share a group (row ``k`` is in group ``k // group_size`` unless ``row_groups`` int32 [K]
    says otherwise); ``perm`` int64 [K], when set, is the order of the activations' columns the rows
    of ``qweight`` follow. ``interleaved``: nibble ``i`` of a word holds row ``AWQ_ORDER[i]`` of its eight
    (:func:`~infercore.ops.int4_packing.pack_interleaved`), else row ``i``.
    """

    qweight: torch.Tensor
    scales: torch.Tensor
    zeros: torch.Tensor
    group_size: int
    perm: torch.Tensor | None = None
    row_groups: torch.Tensor | None = None
    interleaved: bool = False

    @property
    def in_features(self) -> int:
        return self.qweight.shape[0] * PACK

    @property
    def out_features(self) -> int:
        return self.qweight.shape[1]


def _groups_of_rows(k: int, group_size: int, device: torch.device) -> torch.Tensor:
    return torch.arange(k, device=device) // group_size


def make_int4_weight(codes: torch.Tensor, scales: torch.Tensor, zeros: torch.Tensor, group_size: int,
                     g_idx: torch.Tensor | None = None, interleaved: bool = False) -> Int4Weight:
    """The kernel layout of codes [K, N] with ``scales`` and ``zeros`` [G, N]; ``g_idx`` [K] (act-order)
    gives each row's group, else row ``k`` is in group ``k // group_size``; ``interleaved`` packs each word's
    rows in :data:`~infercore.ops.int4_packing.AWQ_ORDER`."""
    k = codes.shape[0]
    if group_size < 1:
        raise ValueError(f"group_size must be a positive number of rows, got {group_size}")
    perm = row_groups = None
    if g_idx is not None:
        g_idx = g_idx.to(torch.int64)
        if int(g_idx.min()) < 0 or int(g_idx.max()) >= scales.shape[0]:
            raise ValueError(f"g_idx names groups {int(g_idx.min())}..{int(g_idx.max())} but the layer has "
                             f"{scales.shape[0]} groups of scales; the checkpoint is inconsistent")
        if not torch.equal(g_idx, _groups_of_rows(k, group_size, g_idx.device)):
            perm = torch.argsort(g_idx, stable=True)
            codes, g_sorted = codes.index_select(0, perm), g_idx.index_select(0, perm)
            if not torch.equal(g_sorted, _groups_of_rows(k, group_size, g_idx.device)):
                row_groups = g_sorted.to(torch.int32).contiguous()
    packed = pack_interleaved(codes) if interleaved else pack_sequential(codes, dim=0)
    return Int4Weight(qweight=packed.contiguous(), scales=scales.contiguous(),
                      zeros=zeros.to(torch.uint8).contiguous(), group_size=group_size, perm=perm,
                      row_groups=row_groups, interleaved=interleaved)


def row_group_index(weight: Int4Weight) -> torch.Tensor:
    """The group of each row of ``weight.qweight`` (after ``perm``), int64 [K]."""
    if weight.row_groups is not None:
        return weight.row_groups.to(torch.int64)
    return _groups_of_rows(weight.in_features, weight.group_size, weight.qweight.device)


def dequantize(weight: Int4Weight) -> torch.Tensor:
    """The float32 weight [K, N] in the row order of ``qweight`` (``perm``'s order when it is set)."""
    packed = weight.qweight
    codes = unpack_interleaved(packed) if weight.interleaved else unpack_sequential(packed, dim=0)
    codes = codes.to(torch.float32)
    groups = row_group_index(weight)
    zeros = weight.zeros.to(torch.float32).index_select(0, groups)
    return (codes - zeros) * weight.scales.to(torch.float32).index_select(0, groups)


def int4_linear(x: torch.Tensor, weight: Int4Weight, bias: torch.Tensor | None = None) -> torch.Tensor:
    """``x @ W + bias`` for ``x`` [..., K] and the 4-bit ``weight`` (W [K, N]), dequantized to float32 and
    accumulated in float32; output in ``x``'s dtype."""
    x2 = x.reshape(-1, x.shape[-1])
    if weight.perm is not None:
        x2 = x2.index_select(1, weight.perm)
    out = x2.float() @ dequantize(weight)
    if bias is not None:
        out = out + bias.float()
    return out.to(x.dtype).reshape(*x.shape[:-1], weight.out_features)
