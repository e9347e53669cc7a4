"""The gated activation of Llama-style MLPs."""

from __future__ import annotations

import torch
from torch import nn

from infercore.ops import get_op


class SiluAndMul(nn.Module):
    """``silu(gate) * up`` where the input is ``cat(gate, up)`` on the last dimension."""

    def __init__(self) -> None:
        super().__init__()
        self._op = get_op("silu_and_mul")

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self._op(x)
