"""The per-step grammar bitmask: allocation and application to the logits before sampling.

Layout (shared with xgrammar and llguidance): int32 ``[batch, ceil(vocab / 32)]``; bit ``t % 32``
of word ``t // 32`` is set when token ``t`` is allowed. A row of all ones (-1) allows everything.
"""

from __future__ import annotations

import importlib.util

import torch

_BITS = 32
#: Devices on which xgrammar's own kernel is used; elsewhere the torch version runs.
_KERNEL_DEVICES = ("cpu", "cuda")


def bitmask_width(vocab_size: int) -> int:
    """Words per row for a vocabulary of ``vocab_size`` tokens."""
    return (vocab_size + _BITS - 1) // _BITS


def allocate_bitmask(batch_size: int, vocab_size: int) -> torch.Tensor:
    """A CPU bitmask that allows every token in every row."""
    return torch.full((batch_size, bitmask_width(vocab_size)), -1, dtype=torch.int32)


def apply_token_bitmask_torch(logits: torch.Tensor, bitmask: torch.Tensor) -> None:
    """Reference implementation of :func:`apply_token_bitmask`, pure torch on any device."""
    batch, vocab = logits.shape
    shifts = torch.arange(_BITS, device=logits.device, dtype=torch.int32)
    bits = (bitmask.to(logits.device).unsqueeze(-1) >> shifts) & 1
    allowed = bits.reshape(batch, -1).bool()
    if allowed.shape[1] < vocab:
        allowed = torch.nn.functional.pad(allowed, (0, vocab - allowed.shape[1]), value=False)
    logits.masked_fill_(~allowed[:, :vocab], float("-inf"))


def _xgrammar_kernel_usable(logits: torch.Tensor) -> bool:
    return logits.device.type in _KERNEL_DEVICES and importlib.util.find_spec("xgrammar") is not None


def apply_token_bitmask(logits: torch.Tensor, bitmask: torch.Tensor) -> None:
    """Set the logits of disallowed tokens to -inf, in place.

    ``logits`` is ``[B, V]`` on any device; ``bitmask`` is int32 ``[B, ceil(V / 32)]`` (moved to the
    logits' device here). Rows of all ones leave their logits untouched. Uses xgrammar's kernel
    where it is installed and the device is one it serves, the torch reference otherwise.
    """
    if logits.dim() != 2 or bitmask.dim() != 2 or logits.shape[0] != bitmask.shape[0]:
        raise ValueError(f"logits {tuple(logits.shape)} and bitmask {tuple(bitmask.shape)} must be 2-D "
                         "with one bitmask row per logits row")
    if bitmask.shape[1] != bitmask_width(logits.shape[1]):
        raise ValueError(f"bitmask has {bitmask.shape[1]} words per row but logits of width "
                         f"{logits.shape[1]} need {bitmask_width(logits.shape[1])}")
    if _xgrammar_kernel_usable(logits):
        import xgrammar

        xgrammar.apply_token_bitmask_inplace(logits, bitmask.to(logits.device, non_blocking=True),
                                             vocab_size=logits.shape[1])
        return
    apply_token_bitmask_torch(logits, bitmask)
