"""Activations quantized by the kernel that produces them, for a linear whose method asks for it.

A linear's :class:`~infercore.quantization.base.QuantizationMethod` may say how it quantizes its input
(:meth:`~infercore.quantization.base.QuantizationMethod.input_quantization`); the norm or activation in
front of it then emits the quantized values and scales in the same pass (no launch of its own per
linear), and the method's ``apply`` takes the :class:`QuantizedActivation` instead of the tensor.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch
from torch import nn


@dataclass(frozen=True)
class ActivationQuant:
    """Dynamic FP8 (e4m3) quantization of an activation: one float32 scale per token and ``group``
    consecutive columns (``amax / 448``), as :func:`infercore.ops.fp8_math.quantize_per_group` defines it."""

    group: int


@dataclass(frozen=True)
class QuantizedActivation:
    """An activation [..., K] as fp8 ``values`` [..., K] and float32 ``scales`` [..., ceil(K / group)];
    ``dtype`` is the unquantized activation's (the dtype the linear returns)."""

    values: torch.Tensor
    scales: torch.Tensor
    dtype: torch.dtype

    @property
    def shape(self) -> torch.Size:
        """The activation's shape."""
        return self.values.shape

    def rows(self) -> tuple[torch.Tensor, torch.Tensor]:
        """``values`` [M, K] and ``scales`` [M, groups] with the leading dimensions flattened."""
        return self.values.reshape(-1, self.values.shape[-1]), self.scales.reshape(-1, self.scales.shape[-1])


def input_quant_of(module: nn.Module) -> ActivationQuant | None:
    """How ``module`` (a linear layer, or a block whose first layer is one) wants its input quantized by
    the kernel in front of it; None when it takes the plain activation (unquantized methods, a LoRA
    wrapper, which reads the activation itself, a mixture-of-experts block)."""
    ask = getattr(module, "input_quant", None)
    return ask() if callable(ask) else None
