"""Multimodal inputs as they cross from the front end to the engine and its workers (msgpack, no pickle).

A prompt with images carries one :class:`MultiModalFeature` per image: the image's content hash, where
its placeholder tokens sit in the prompt, and the tensors the model's processor made of it
(:class:`WireTensor`). Imports neither torch nor the engine at module level.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

import msgspec
import numpy as np

if TYPE_CHECKING:
    import torch

#: Wire dtype names → numpy dtypes (little-endian). bfloat16 travels as its raw 16-bit patterns.
_NUMPY_DTYPES: dict[str, str] = {
    "float32": "<f4", "float16": "<f2", "bfloat16": "<u2", "int64": "<i8", "int32": "<i4", "bool": "|b1",
}


class WireTensor(msgspec.Struct, array_like=True):
    """A dense tensor as ``dtype`` (a name of :data:`_NUMPY_DTYPES`), ``shape`` and little-endian bytes."""

    dtype: str
    shape: list[int]
    data: bytes

    @classmethod
    def from_numpy(cls, array: np.ndarray) -> WireTensor:
        """Any float array travels as float32, any integer one as int64 (bool as bool)."""
        if array.dtype == np.bool_:
            name = "bool"
        elif np.issubdtype(array.dtype, np.integer):
            name = "int64"
        elif array.dtype == np.float16:
            name = "float16"
        else:
            name = "float32"
        data = np.ascontiguousarray(array, dtype=_NUMPY_DTYPES[name]).tobytes()
        return cls(name, [int(s) for s in array.shape], data)

    @classmethod
    def from_tensor(cls, tensor: torch.Tensor) -> WireTensor:
        """A CPU copy of ``tensor`` (bfloat16 kept as such)."""
        import torch

        t = tensor.detach().cpu().contiguous()
        if t.dtype == torch.bfloat16:
            return cls("bfloat16", list(t.shape), t.view(torch.int16).numpy().tobytes())
        return cls.from_numpy(t.numpy())

    def to_numpy(self) -> np.ndarray:
        """The values (bfloat16 comes back as float32)."""
        if self.dtype not in _NUMPY_DTYPES:
            raise ValueError(f"unknown wire tensor dtype {self.dtype!r}; expected one of {sorted(_NUMPY_DTYPES)}")
        array = np.frombuffer(self.data, dtype=_NUMPY_DTYPES[self.dtype]).reshape(self.shape)
        if self.dtype == "bfloat16":
            return (array.astype(np.uint32) << 16).view(np.float32)
        return array

    def to_tensor(self, device: Any = None) -> torch.Tensor:
        """A torch tensor (bfloat16 as bfloat16), on ``device`` when given."""
        import torch

        if self.dtype == "bfloat16":
            raw = np.frombuffer(self.data, dtype="<i2").reshape(self.shape).copy()
            out = torch.from_numpy(raw).view(torch.bfloat16)
        else:
            out = torch.from_numpy(self.to_numpy().copy())
        return out if device is None else out.to(device)

    @property
    def nbytes(self) -> int:
        return len(self.data)

    def __repr__(self) -> str:  # never the bytes (an image is megabytes)
        return f"WireTensor({self.dtype}, {self.shape})"


class MultiModalFeature(msgspec.Struct, array_like=True, omit_defaults=True):
    """One image (or other media item) of a prompt.

    ``identifier`` is the content hash of the item (hex SHA-256 of its decoded pixels and the processor's
    settings): equal identifiers mean equal embeddings, so it keys the processed-input cache and joins
    the prefix-cache hashes of the blocks its placeholders fill. The item's embeddings replace the prompt
    tokens ``offset .. offset + length - 1`` (its placeholder tokens, already expanded to the item's
    token count). ``data`` holds the processed tensors the model's ``embed_multimodal`` reads
    (``pixel_values``, and e.g. ``image_grid_thw`` for the Qwen2-VL family).
    """

    modality: str
    identifier: str
    offset: int
    length: int
    data: dict[str, WireTensor] = {}

    @property
    def end(self) -> int:
        """One past the last placeholder token."""
        return self.offset + self.length

    def overlaps(self, start: int, stop: int) -> bool:
        """Whether the placeholders meet tokens ``start .. stop - 1``."""
        return self.offset < stop and self.offset + self.length > start
