"""Whether a GPU has the FP8 tensor-core paths the FP8 GEMMs use (checked once per device)."""

from __future__ import annotations

import functools

import torch

#: Ada (8.9) and Hopper (9.0) have FP8 tensor cores; row-wise scaled ``torch._scaled_mm`` needs 9.0.
FP8_DOT_CAPABILITY = (8, 9)
ROWWISE_SCALED_MM_CAPABILITY = (9, 0)
#: cuBLASLt's block scaling (1x128 activations, 128x128 weights) is a Hopper feature: 9.0 exactly.
BLOCK_SCALED_MM_CAPABILITY = (9, 0)


@functools.cache
def _capability(index: int) -> tuple[int, int]:
    return torch.cuda.get_device_capability(index)


def has_fp8_dot(device: torch.device) -> bool:
    """Whether Triton's FP8 ``tl.dot`` runs natively on ``device`` (an NVIDIA GPU of compute capability 8.9+)."""
    return device.type == "cuda" and torch.version.hip is None and _capability(device.index or 0) >= FP8_DOT_CAPABILITY


def has_rowwise_scaled_mm(device: torch.device) -> bool:
    """Whether ``torch._scaled_mm`` takes per-row and per-column scales on ``device`` (capability 9.0+)."""
    return (device.type == "cuda" and torch.version.hip is None
            and _capability(device.index or 0) >= ROWWISE_SCALED_MM_CAPABILITY)


def has_block_scaled_mm(device: torch.device) -> bool:
    """Whether cuBLASLt's block-scaled FP8 GEMM exists on ``device`` (capability 9.0; whether this torch drives it
    right is :func:`infercore_triton.fp8_block_cublas.available`'s probe)."""
    return (device.type == "cuda" and torch.version.hip is None
            and _capability(device.index or 0) == BLOCK_SCALED_MM_CAPABILITY)
