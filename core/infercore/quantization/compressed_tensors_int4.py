"""compressed-tensors W4A16 (``format: pack-quantized``): 4-bit integer weights per group or channel,
activations unquantized, as llm-compressor saves them.

Tensors, for a layer of N output and K input features and G groups: ``weight_packed`` int32 [N, K/8]
(eight input columns per word, nibble ``i`` holding column ``8j + i``), ``weight_scale`` [N, G],
``weight_zero_point`` int32 [N/8, G] (eight output rows per word; asymmetric schemes only) and
``weight_shape`` [2] (llm-compressor's act-order keeps groups contiguous: no ``g_idx``). Codes and
zero-points are stored as the signed value plus 8, so ``W = (code - zero) * scale`` with symmetric
schemes' zero 8.
"""

from __future__ import annotations

from typing import Any

import torch
from torch import nn

from infercore.ops.int4_packing import PACK, unpack_sequential
from infercore.quantization.base import LinearWeightSpec
from infercore.quantization.int4_methods import DUMMY_SCALE, Int4LinearMethod
from infercore.quantization.params import ParamLayout, register_param

#: The stored value of a signed zero: codes and zero-points are kept offset by 8.
SIGNED_OFFSET = 8


class CompressedTensorsW4A16Method(Int4LinearMethod):
    """4-bit weights of a compressed-tensors ``pack-quantized`` checkpoint, ``group_size`` input columns per
    scale (-1: one per output channel), with zero-points unless ``symmetric``."""

    format_name = "compressed-tensors W4A16"

    def __init__(self, group_size: int, symmetric: bool) -> None:
        super().__init__(group_size)
        self.symmetric = symmetric

    def create_checkpoint_params(self, layer: nn.Module, spec: LinearWeightSpec) -> None:
        k, n = spec.input_size, spec.output_size
        whole = self.group_size == -1
        groups = k // self._group(k)
        register_param(layer, "weight_packed", torch.empty(n, k // PACK, dtype=torch.int32),
               ParamLayout(output_dim=0, input_dim=1, cols_per_entry=PACK))
        register_param(layer, "weight_scale", torch.empty(n, groups, dtype=spec.params_dtype),
               ParamLayout(output_dim=0, input_dim=None if whole else 1, dummy_value=DUMMY_SCALE))
        register_param(layer, "weight_shape", torch.empty(2, dtype=torch.int64), ParamLayout(output_dim=None, input_dim=None))
        if not self.symmetric:
            register_param(layer, "weight_zero_point", torch.empty(n // PACK, groups, dtype=torch.int32),
                   ParamLayout(output_dim=0, input_dim=None if whole else 1, rows_per_entry=PACK))

    def checkpoint_scales(self, layer: nn.Module) -> torch.Tensor:
        return layer.weight_scale.data.t()

    def checkpoint_codes(self, layer: nn.Module) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor | None]:
        codes = unpack_sequential(layer.weight_packed.data, dim=1).t()
        if self.symmetric:
            zeros = torch.full((layer.weight_scale.shape[1], codes.shape[1]), SIGNED_OFFSET, dtype=torch.uint8,
                               device=codes.device)
        else:
            zeros = unpack_sequential(layer.weight_zero_point.data, dim=0).t()
        return codes, zeros, None


def w4a16_method(weights: Any) -> CompressedTensorsW4A16Method:
    """The method of a compressed-tensors scheme whose ``weights`` are integers and activations unquantized."""
    strategy = str(getattr(weights.strategy, "value", weights.strategy))
    if weights.num_bits != 4:
        raise ValueError(f"compressed-tensors integer weights of {weights.num_bits} bits are not supported; "
                         "infercore runs 4-bit weights (W4A16) only")
    if strategy not in ("group", "channel"):
        raise ValueError(f"compressed-tensors W4A16 strategy {strategy!r} is not supported; use group or channel")
    group = weights.group_size if strategy == "group" else -1
    return CompressedTensorsW4A16Method(group, symmetric=bool(weights.symmetric))
