"""The default method: one weight in the model's dtype, applied with the platform's ``linear`` op."""

from __future__ import annotations

import torch
from torch import nn

from infercore.ops import get_op, reference
from infercore.quantization.base import LinearWeightSpec, QuantizationMethod
from infercore.quantization.params import WEIGHT, set_layout


class UnquantizedLinearMethod(QuantizationMethod):
    """``y = x W^T + b`` through custom op ``linear`` (``F.linear`` unless a plugin has a faster one)."""

    def __init__(self) -> None:
        self._linear = get_op("linear")
        self._silu_and_mul_linear = get_op("silu_and_mul_linear")
        # Fused only where the platform has a kernel for it: the reference runs the two ops it replaces.
        self.fuses_silu_and_mul = self._silu_and_mul_linear is not reference.silu_and_mul_linear

    def create_weights(self, layer: nn.Module, spec: LinearWeightSpec) -> None:
        weight = nn.Parameter(torch.empty(spec.output_size, spec.input_size, dtype=spec.params_dtype),
                              requires_grad=False)
        layer.register_parameter("weight", set_layout(weight, WEIGHT, layer.weight_loader))

    def apply(self, layer: nn.Module, x: torch.Tensor, bias: torch.Tensor | None = None) -> torch.Tensor:
        return self._linear(x, layer.weight, bias)

    def apply_silu_and_mul(self, layer: nn.Module, x: torch.Tensor, bias: torch.Tensor | None = None) -> torch.Tensor:
        return self._silu_and_mul_linear(x, layer.weight, bias)
