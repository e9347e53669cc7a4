"""KV cache memory that starts as zeros without being written.

``torch.zeros`` writes every byte: on a GPU that is a fast memset, but on the CPU it touches every page
of a cache of gigabytes (seconds of start-up, and all of it resident at once). An anonymous memory map
is zero by definition and is backed by memory only where it is written, so the CPU cache is made from
one; other devices keep ``torch.zeros``.
"""

from __future__ import annotations

import math
import mmap

import torch


def zeroed(shape: tuple[int, ...] | list[int], dtype: torch.dtype, device: torch.device) -> torch.Tensor:
    """A tensor of zeros of ``shape``; on the CPU, pages are committed only when first written."""
    nbytes = math.prod(shape) * dtype.itemsize
    if device.type != "cpu" or nbytes < mmap.PAGESIZE:
        return torch.zeros(shape, dtype=dtype, device=device)
    # frombuffer holds a reference to the map, so it lives as long as the tensor.
    raw = torch.frombuffer(mmap.mmap(-1, nbytes), dtype=torch.uint8)
    return raw.view(dtype).view(shape)
