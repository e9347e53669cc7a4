"""Index arrays the host knows, on the device: several in one copy, and gathers that are prefixes taken as
slices. A speculative step makes many small index arrays (positions, rows, counts); each upload and each
gather is a launch of its own, and at batch 1 most gathers take rows ``0..n-1`` as they are."""

from __future__ import annotations

import numpy as np
import torch


def upload(device: torch.device, *parts: np.ndarray) -> list[torch.Tensor]:
    """``parts`` as int64 tensors on ``device``, from one copy that does not wait for the device."""
    joined = np.concatenate([np.asarray(part, dtype=np.int64).ravel() for part in parts])
    uploaded = torch.from_numpy(joined).to(device, non_blocking=True)
    return list(uploaded.split([np.asarray(part).size for part in parts]))


def is_prefix(index: np.ndarray) -> bool:
    """Whether ``index`` is ``0, 1, ..., n - 1`` (taking it is taking the first ``n``)."""
    return bool(np.array_equal(index, np.arange(len(index))))


def take(values: torch.Tensor, index: np.ndarray, index_dev: torch.Tensor) -> torch.Tensor:
    """``values[index]`` (``index_dev``: the same indices on the device): the first ``len(index)`` as they are
    where ``index`` is a prefix, else a gather."""
    return values[: len(index)] if is_prefix(index) else values.index_select(0, index_dev)
