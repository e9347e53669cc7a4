"""The grammar bitmask: bit ``j`` of word ``w`` set means token ``32 * w + j`` is allowed."""

from __future__ import annotations

import importlib
from collections.abc import Callable

import torch

_BITS = 32


def apply_grammar_bitmask(logits: torch.Tensor, bitmask: torch.Tensor) -> torch.Tensor:
    """Set the logits of forbidden tokens to -inf; returns the masked logits.

    Uses ``infercore.structured_output.apply_token_bitmask`` when that module provides it (it may
    mask in place and return None), else a plain torch implementation.
    """
    bitmask = bitmask.to(logits.device, non_blocking=True)
    backend = _structured_output_kernel()
    if backend is None:
        return _mask_with_torch(logits, bitmask)
    masked = backend(logits, bitmask)
    return logits if masked is None else masked


def _structured_output_kernel() -> Callable[[torch.Tensor, torch.Tensor], torch.Tensor | None] | None:
    try:
        module = importlib.import_module("infercore.structured_output")
    except ImportError:
        return None
    return getattr(module, "apply_token_bitmask", None)


def _mask_with_torch(logits: torch.Tensor, bitmask: torch.Tensor) -> torch.Tensor:
    vocab_size = logits.shape[1]
    shifts = torch.arange(_BITS, device=logits.device, dtype=torch.int32)
    allowed = ((bitmask.unsqueeze(-1) >> shifts) & 1).bool().flatten(1)[:, :vocab_size]
    return logits.masked_fill_(~allowed, float("-inf"))
