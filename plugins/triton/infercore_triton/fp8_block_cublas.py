"""Block-scaled FP8 GEMMs through cuBLASLt: activations scaled per row and 128 columns (1x128), weights per
128 x 128 block, as ``fp8_block_linear`` takes them, in one ``torch.nn.functional.scaled_mm`` call (Hopper,
CUDA 12.9+; older torch releases through ``torch._scaled_mm``, which reads the recipes from the scales' shapes).

cuBLASLt wants the scales in its own layouts, which the checkpoint's are one view away from:

* the activation's [M, K/128] scales outer-dim-major (stride (1, M)): one small copy a call;
* M a multiple of 4 (:data:`ROW_ALIGN`: cuBLASLt finds no algorithm for other row counts, the scales' leading
  dimension being M); other row counts are padded with zero rows, whose products are dropped;
* the weight's ``weight_scale_inv`` [N/128, K/128], row-major, read as its transpose [K/128, N/128] (stride
  (1, K/128)): no copy, where K/128 is a multiple of 4 (cuBLASLt pads that dimension to 4 otherwise; such weights
  stay on the Triton kernel).

Where it runs: from :data:`MIN_M_ENV` rows up (unset: :data:`DEFAULT_MIN_M`; ``0``: never, the Triton kernel
serves every size), on a GPU of compute capability 9.0 whose torch passed a probe: small GEMMs against core's
reference, once per device and outside graph capture. A refused or wrong probe logs one INFO line and leaves the Triton kernel in charge.
"""

from __future__ import annotations

import logging
import os

import torch

from infercore.plugin_api import fp8_reference
from infercore_triton.fp8_support import has_block_scaled_mm

logger = logging.getLogger(__name__)

#: ``INFERCORE_FP8_BLOCK_CUBLAS_MIN_M=N``: block-scaled FP8 linears of at least N rows run through cuBLASLt (0: none).
MIN_M_ENV = "INFERCORE_FP8_BLOCK_CUBLAS_MIN_M"
#: The threshold when :data:`MIN_M_ENV` is unset. Measured on an H100 80GB HBM3 (torch 2.11, Qwen3-8B's
#: projections, ``benchmarks/fp8_gemm.py``): summed over the four projections cuBLASLt takes 1.14x the Triton
#: kernel's speed at 256 rows and 1.39x at 512, but 0.94x at 128 and 0.75-0.85x below; W-GPU-8B in FP8 then runs
#: at 9,093 and 9,088 output tok/s against 8,190 and 8,196 with the Triton kernel alone (bf16: 7,787 and 7,786).
DEFAULT_MIN_M = 256
#: The scale blocks cuBLASLt's block scaling takes (1x128 activations, 128x128 weights).
BLOCK = 128
#: The row counts cuBLASLt's block scaling takes are multiples of this (torch 2.11, CUDA 13, H100: 4, 8, 36, 68 and
#: 136 rows ran; 1, 2, 33, 65, 66 and 67 got ``CUBLAS_STATUS_NOT_SUPPORTED`` from the algorithm heuristic).
ROW_ALIGN = 4
#: Largest relative error the probe accepts against the reference (both accumulate in float32).
PROBE_TOLERANCE = 1e-2

_probed: dict[int, bool] = {}


def min_m() -> int | None:
    """The row count from which block-scaled FP8 linears go through cuBLASLt (:data:`MIN_M_ENV`, else
    :data:`DEFAULT_MIN_M`); None: never."""
    raw = os.environ.get(MIN_M_ENV, "").strip()
    if not raw:
        return DEFAULT_MIN_M
    try:
        value = int(raw)
    except ValueError:
        raise ValueError(f"{MIN_M_ENV}={raw!r}: give a row count (a whole number; 0 turns cuBLASLt off), or leave it "
                         f"unset for {DEFAULT_MIN_M}") from None
    return value if value > 0 else None


def fits(weight: torch.Tensor, block_n: int, block_k: int, out_dtype: torch.dtype) -> bool:
    """Whether cuBLASLt's block scaling takes this weight as it is stored (128 x 128 blocks, K/128 a multiple of
    4, N a multiple of 16) with a bf16 output, on a device that has it (:func:`has_block_scaled_mm`)."""
    n, k = weight.shape
    return (block_n == BLOCK and block_k == BLOCK and out_dtype == torch.bfloat16 and k % BLOCK == 0
            and (k // BLOCK) % 4 == 0 and n % 16 == 0 and has_block_scaled_mm(weight.device))


def gemm(xq: torch.Tensor, xs: torch.Tensor, weight: torch.Tensor, weight_scale_inv: torch.Tensor,
         bias: torch.Tensor | None = None) -> torch.Tensor:
    """``(xq * xs) @ (weight * weight_scale_inv)^T`` in bf16: ``xq`` fp8 [M, K] with ``xs`` float32 [M, K/128],
    ``weight`` fp8 [N, K] with ``weight_scale_inv`` float32 [N/128, K/128] (see :func:`fits`)."""
    m = xq.shape[0]
    rows = -(-m // ROW_ALIGN) * ROW_ALIGN
    scale_a = torch.empty_strided((rows, xs.shape[1]), (1, rows), dtype=torch.float32, device=xs.device)
    if rows != m:  # zero rows up to the alignment; their products are dropped below
        padded = xq.new_zeros((rows, xq.shape[1]))
        padded[:m].copy_(xq)
        xq = padded
        scale_a.zero_()
    scale_a[:m].copy_(xs)
    scale_b = weight_scale_inv.float().contiguous().t()
    functional = torch.nn.functional
    if hasattr(functional, "scaled_mm") and hasattr(functional, "ScalingType"):
        recipe = functional.ScalingType
        out = functional.scaled_mm(xq, weight.t(), scale_a, recipe.BlockWise1x128, scale_b, recipe.BlockWise128x128,
                                   output_dtype=torch.bfloat16)
    else:
        out = torch._scaled_mm(xq, weight.t(), scale_a=scale_a, scale_b=scale_b, out_dtype=torch.bfloat16)
    out = out[:m]  # the caller's rows (all of them where none were padded)
    return out if bias is None else out + bias


#: The row counts the probe multiplies: an aligned one and an odd one (the activation scales' leading dimension is
#: the row count: the odd one goes through the padding to :data:`ROW_ALIGN`).
PROBE_ROWS = (64, 67)


def _probe(device: torch.device) -> bool:
    """Small GEMMs (:data:`PROBE_ROWS` rows) against core's reference: whether this torch and driver do
    block-scaled FP8 right at any row count."""
    generator = torch.Generator(device=device).manual_seed(0)
    n, k = 256, 512
    wq, ws = fp8_reference.quantize_blockwise(torch.randn(n, k, device=device, generator=generator) * 0.05,
                                              BLOCK, BLOCK)
    for m in PROBE_ROWS:
        x = torch.randn(m, k, device=device, generator=generator).bfloat16()
        xq, xs = fp8_reference.quantize_per_group(x, BLOCK)
        try:
            out = gemm(xq, xs, wq, ws).float()
        except Exception as exc:  # noqa: BLE001 - whatever this torch raises, the Triton kernel serves instead
            logger.info("cuBLASLt block-scaled FP8 GEMMs are not available here (%s: %s, at %d rows); the Triton "
                        "kernel serves every size", type(exc).__name__, str(exc).splitlines()[0] if str(exc) else "",
                        m)
            return False
        ref = fp8_reference.fp8_block_linear(x.float(), wq, ws, BLOCK, BLOCK)
        err = float((out - ref).norm() / ref.norm().clamp_min(1e-12))
        if err > PROBE_TOLERANCE:
            logger.info("cuBLASLt block-scaled FP8 GEMM disagrees with the reference (relative error %.3g at %d "
                        "rows); the Triton kernel serves every size", err, m)
            return False
    return True


def available(device: torch.device) -> bool:
    """Whether ``device`` passed the probe (run on first ask, outside graph capture; while a graph is being
    captured an unprobed device counts as unavailable, and is probed at the next ask outside one)."""
    index = device.index if device.index is not None else torch.cuda.current_device()
    if index not in _probed:
        if torch.cuda.is_current_stream_capturing():
            return False
        _probed[index] = _probe(torch.device("cuda", index))
    return _probed[index]


def serves(m: int, weight: torch.Tensor, block_n: int, block_k: int, out_dtype: torch.dtype) -> bool:
    """Whether a block-scaled FP8 linear of ``m`` rows goes through cuBLASLt (:data:`MIN_M_ENV`, :func:`fits`,
    :func:`available`); the row count is checked first, so steps below the threshold pay one comparison."""
    threshold = min_m()
    return (threshold is not None and m >= threshold and fits(weight, block_n, block_k, out_dtype)
            and available(weight.device))
