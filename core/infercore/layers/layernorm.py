"""Norms: RMSNorm (optionally fused with the residual add) and LayerNorm (with bias)."""

from __future__ import annotations

import torch
from torch import nn

from infercore.ops import get_op
from infercore.quantization.activation import ActivationQuant, QuantizedActivation

#: The normed activation, or it quantized for the FP8 linear after the norm.
Normed = torch.Tensor | QuantizedActivation


class RMSNorm(nn.Module):
    """Root-mean-square norm over the last dimension with a learned scale.

    ``forward(x)`` returns the normed ``x``; ``forward(x, residual)`` adds ``x`` to ``residual``
    first and returns ``(normed, new_residual)``, the pattern of pre-norm decoder layers. Given
    ``quant`` (what the linear after the norm asks for), the normed activation comes quantized, in the
    same pass (the ``rms_norm_quant`` / ``fused_add_rms_norm_quant`` ops).
    """

    def __init__(self, hidden_size: int, eps: float = 1e-6) -> None:
        super().__init__()
        self.eps = eps
        self.weight = nn.Parameter(torch.ones(hidden_size))
        self._norm = get_op("rms_norm")
        self._add_norm = get_op("fused_add_rms_norm")
        self._norm_quant = get_op("rms_norm_quant")
        self._add_norm_quant = get_op("fused_add_rms_norm_quant")

    def forward(self, x: torch.Tensor, residual: torch.Tensor | None = None,
                quant: ActivationQuant | None = None) -> Normed | tuple[Normed, torch.Tensor]:
        if quant is not None:
            return self._forward_quantized(x, residual, quant)
        if residual is None:
            return self._norm(x, self.weight, self.eps)
        return self._add_norm(x, residual, self.weight, self.eps)

    def _forward_quantized(self, x: torch.Tensor, residual: torch.Tensor | None,
                           quant: ActivationQuant) -> QuantizedActivation | tuple[QuantizedActivation, torch.Tensor]:
        if residual is None:
            q, scale = self._norm_quant(x, self.weight, self.eps, quant.group)
            return QuantizedActivation(q, scale, x.dtype)
        q, scale, residual = self._add_norm_quant(x, residual, self.weight, self.eps, quant.group)
        return QuantizedActivation(q, scale, x.dtype), residual


class GemmaRMSNorm(RMSNorm):
    """Gemma's RMSNorm, which scales by ``1 + weight``: the checkpoint's weight is loaded plus one
    (computed in float32), so the forward pass is the plain RMSNorm op."""

    def __init__(self, hidden_size: int, eps: float = 1e-6) -> None:
        super().__init__(hidden_size, eps)
        self.weight.weight_loader = self.weight_loader

    @staticmethod
    def weight_loader(param: nn.Parameter, loaded: torch.Tensor) -> None:
        """Copy ``1 + loaded`` into ``param`` (the checkpoint stores the offset from one)."""
        if param.shape != loaded.shape:
            raise ValueError(f"checkpoint norm weight of shape {tuple(loaded.shape)} does not fit parameter of "
                             f"shape {tuple(param.shape)}; the config does not match the weights")
        param.data.copy_(loaded.float() + 1.0)


class LayerNorm(nn.Module):
    """Layer norm over the last dimension with a learned scale and (optionally) bias: the custom op
    ``layer_norm`` (a platform may replace its torch reference)."""

    def __init__(self, hidden_size: int, eps: float = 1e-5, bias: bool = True) -> None:
        super().__init__()
        self.eps = eps
        self.weight = nn.Parameter(torch.ones(hidden_size))
        self.bias = nn.Parameter(torch.zeros(hidden_size)) if bias else None
        self._norm = get_op("layer_norm")

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self._norm(x, self.weight, self.bias, self.eps)
