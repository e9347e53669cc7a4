"""A checkpoint tensor not yet read: a tensor-parallel rank narrows it to its shard, then reads only that.

``narrow`` and ``shape`` stay lazy; anything else (``param.copy_(t)``, ``t.float()``, indexing…)
reads the selected region and acts on the real tensor, so model code written for plain tensors
works unchanged.
"""

from __future__ import annotations

from typing import Any

import torch


class CheckpointSlice:
    """A region (a box of index ranges) of one tensor in an open safetensors file."""

    def __init__(self, source: Any, bounds: tuple[tuple[int, int], ...] | None = None) -> None:
        self._source = source
        self._bounds = bounds if bounds is not None else tuple((0, n) for n in source.get_shape())

    @property
    def shape(self) -> torch.Size:
        return torch.Size(stop - start for start, stop in self._bounds)

    def size(self, dim: int | None = None) -> Any:
        return self.shape if dim is None else self.shape[dim]

    def dim(self) -> int:
        return len(self._bounds)

    def narrow(self, dim: int, start: int, length: int) -> CheckpointSlice:
        """The sub-region ``[start, start + length)`` along ``dim`` (nothing is read)."""
        dim = dim % self.dim()
        lo, hi = self._bounds[dim]
        if start < 0 or length < 0 or lo + start + length > hi:
            raise ValueError(f"cannot narrow dimension {dim} of a checkpoint tensor of shape {tuple(self.shape)} "
                             f"to [{start}, {start + length})")
        bounds = list(self._bounds)
        bounds[dim] = (lo + start, lo + start + length)
        return CheckpointSlice(self._source, tuple(bounds))

    def materialize(self) -> torch.Tensor:
        """Read the region from the file."""
        return self._source[tuple(slice(start, stop) for start, stop in self._bounds)]

    def __getitem__(self, index: Any) -> torch.Tensor:
        return self.materialize()[index]

    def __getattr__(self, name: str) -> Any:
        return getattr(self.materialize(), name)

    @classmethod
    def __torch_function__(cls, func: Any, types: Any, args: tuple[Any, ...] = (), kwargs: Any = None) -> Any:
        def real(x: Any) -> Any:
            if isinstance(x, CheckpointSlice):
                return x.materialize()
            if isinstance(x, list | tuple):
                return type(x)(real(v) for v in x)
            return x

        return func(*real(args), **{k: real(v) for k, v in (kwargs or {}).items()})


def materialize(tensor: torch.Tensor | CheckpointSlice) -> torch.Tensor:
    """A real tensor for either kind."""
    return tensor.materialize() if isinstance(tensor, CheckpointSlice) else tensor
