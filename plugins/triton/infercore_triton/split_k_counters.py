"""Arrival counters for split kernels whose last program to finish a tile sums the tile's partials (no
second launch): split-K GEMMs, and split-context decode attention. One int32 per output tile, zero between
launches (the last program puts it back).

One buffer per device, made outside CUDA-graph capture (a GEMM captured before any ran eagerly sums its
partials in a second launch instead). GEMMs on one device run one after another on the engine's stream;
two in flight at once on different streams would share the counters.
"""

from __future__ import annotations

import os

import torch

#: ``INFERCORE_FP8_SPLIT_REDUCE=launch`` sums every split-K GEMM's partials in a launch of its own (read at
#: each call; for comparing the two, or should a GPU misorder the counters).
REDUCE_ENV = "INFERCORE_FP8_SPLIT_REDUCE"
#: Tiles one GEMM may have (grid rows x columns) to sum in the kernel: 256 KiB of counters per device.
MAX_TILES = 1 << 16

_counters: dict[tuple[str, int | None], torch.Tensor] = {}


def tile_counters(device: torch.device, tiles: int, env: str = REDUCE_ENV) -> torch.Tensor | None:
    """Zeroed counters for ``tiles`` tiles on ``device``, or None (too many tiles, the first use falls inside
    a CUDA-graph capture, or the variable ``env`` is ``launch``): then the partials are summed by a launch of
    their own."""
    if tiles > MAX_TILES or os.environ.get(env) == "launch":
        return None
    key = (device.type, device.index)
    counters = _counters.get(key)
    if counters is None:
        if device.type == "cuda" and torch.cuda.is_current_stream_capturing():
            return None
        counters = _counters[key] = torch.zeros(MAX_TILES, dtype=torch.int32, device=device)
    return counters
