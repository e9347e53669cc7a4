"""acme's kernels for two custom ops, written from their definitions (not calling torch's versions)."""

from __future__ import annotations

import math

import torch


def gelu(x: torch.Tensor, approximate: str = "none") -> torch.Tensor:
    """GELU, exact (erf) or the tanh approximation."""
    xf = x.float()
    if approximate == "tanh":
        inner = math.sqrt(2.0 / math.pi) * (xf + 0.044715 * xf.pow(3))
        return (0.5 * xf * (1.0 + torch.tanh(inner))).to(x.dtype)
    return (0.5 * xf * (1.0 + torch.erf(xf / math.sqrt(2.0)))).to(x.dtype)


def layer_norm(x: torch.Tensor, weight: torch.Tensor, bias: torch.Tensor | None, eps: float) -> torch.Tensor:
    """Layer norm over the last dimension, in float32."""
    xf = x.float()
    mean = xf.mean(dim=-1, keepdim=True)
    var = (xf - mean).pow(2).mean(dim=-1, keepdim=True)
    out = (xf - mean) * torch.rsqrt(var + eps) * weight.float()
    if bias is not None:
        out = out + bias.float()
    return out.to(x.dtype)
