"""Activations: the gated SiLU of Llama-style MLPs, GELU (exact or tanh) and the gated GeGLU."""

from __future__ import annotations

import torch
from torch import nn

from infercore.ops import get_op
from infercore.quantization.activation import ActivationQuant, QuantizedActivation

#: GELU variants: exact (``x * Phi(x)``) and the tanh approximation (GPT-2's ``gelu_new``).
GELU_VARIANTS = ("none", "tanh")


def _check_variant(approximate: str) -> str:
    if approximate not in GELU_VARIANTS:
        raise ValueError(f"GELU approximate={approximate!r} is not one of {GELU_VARIANTS}; use 'none' for the "
                         "exact GELU or 'tanh' for the tanh approximation")
    return approximate


class SiluAndMul(nn.Module):
    """``silu(gate) * up`` where the input is ``cat(gate, up)`` on the last dimension; given ``quant`` (what
    the linear after it asks for), quantized in the same pass (the ``silu_and_mul_quant`` op)."""

    def __init__(self) -> None:
        super().__init__()
        self._op = get_op("silu_and_mul")
        self._op_quant = get_op("silu_and_mul_quant")

    def forward(self, x: torch.Tensor, quant: ActivationQuant | None = None) -> torch.Tensor | QuantizedActivation:
        if quant is None:
            return self._op(x)
        q, scale = self._op_quant(x, quant.group)
        return QuantizedActivation(q, scale, x.dtype)


class GELU(nn.Module):
    """GELU through the custom op ``gelu``; ``approximate`` is ``"none"`` (exact) or ``"tanh"``."""

    def __init__(self, approximate: str = "none") -> None:
        super().__init__()
        self.approximate = _check_variant(approximate)
        self._op = get_op("gelu")

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self._op(x, self.approximate)


class GeGLU(nn.Module):
    """``gelu(gate) * up`` where the input is ``cat(gate, up)``: the custom op ``gelu_and_mul``."""

    def __init__(self, approximate: str = "none") -> None:
        super().__init__()
        self.approximate = _check_variant(approximate)
        self._op = get_op("gelu_and_mul")

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self._op(x, self.approximate)
