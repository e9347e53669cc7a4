"""PooledTensor: a pooled result as it crosses from the engine to the front end (msgpack, no pickle).

Imports neither torch nor the engine: the wire messages that carry it are read by every process.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

import msgspec
import numpy as np

if TYPE_CHECKING:
    import torch


class PooledTensor(msgspec.Struct, array_like=True):
    """A float32 tensor of ``shape`` as little-endian bytes: an embedding [H], class scores [labels],
    or one row per token [L, H] (``ALL`` / ``STEP`` pooling)."""

    shape: list[int]
    data: bytes

    @classmethod
    def from_array(cls, array: np.ndarray) -> PooledTensor:
        return cls(list(array.shape), np.ascontiguousarray(array, dtype="<f4").tobytes())

    def to_numpy(self) -> np.ndarray:
        return np.frombuffer(self.data, dtype="<f4").reshape(self.shape)

    def to_tensor(self) -> torch.Tensor:
        import torch

        return torch.from_numpy(self.to_numpy().copy())

    def tolist(self) -> list:
        return self.to_numpy().tolist()


def results_to_host(results: dict[str, torch.Tensor]) -> dict[str, PooledTensor]:
    """Device results to wire tensors, with one device-to-host copy when they share a shape (embeddings)."""
    if not results:
        return {}
    import torch

    tensors = list(results.values())
    if len({tuple(t.shape) for t in tensors}) == 1:
        host = torch.stack(tensors).float().cpu().numpy()
        return {rid: PooledTensor.from_array(host[i]) for i, rid in enumerate(results)}
    return {rid: PooledTensor.from_array(t.float().cpu().numpy()) for rid, t in results.items()}
