"""Small host→device copies that never wait for the device."""

from __future__ import annotations

from collections.abc import Sequence

import torch


def to_device(values: Sequence[float] | Sequence[int] | Sequence[bool], dtype: torch.dtype,
              device: torch.device) -> torch.Tensor:
    """A device tensor of ``values``. The copy is queued without blocking: a blocking copy would
    wait for the step already running on the device and undo the overlap of async scheduling."""
    return torch.tensor(values, dtype=dtype).to(device, non_blocking=True)
