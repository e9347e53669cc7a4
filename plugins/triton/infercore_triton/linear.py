"""Custom op ``linear`` on NVIDIA GPUs: each decode-sized product goes to the kernel measured fastest for it.

Up to :data:`~infercore_triton.skinny_gemm.SKINNY_MAX_M` rows (and narrow enough weights) the skinny GEMM;
17 to 256 rows of a shape listed in :data:`~infercore_triton.tile_gemm.TUNED`, the tile GEMM; everything
else ``F.linear`` (cuBLAS), which is also the reference the kernels are tested against.
"""

from __future__ import annotations

import torch
import torch.nn.functional as F

from infercore_triton import skinny_gemm, tile_gemm


def linear(x: torch.Tensor, weight: torch.Tensor, bias: torch.Tensor | None = None) -> torch.Tensor:
    """``x @ weight.T + bias`` through the skinny GEMM, the tile GEMM or ``F.linear``."""
    if skinny_gemm.uses_kernel(x, weight, bias):
        return skinny_gemm.skinny_gemm(x, weight, bias)
    config = tile_gemm.tuned_config(x, weight, bias)
    if config is not None:
        return tile_gemm.tile_gemm(x, weight, config)
    return F.linear(x, weight, bias)
