"""FP8 (e4m3) quantization in plain torch: the definitions the FP8 kernels are checked against.

Weights are stored as ``float8_e4m3fn`` with float32 scales (``w ≈ q * scale``); activations are
quantized on the fly, per token (one scale per row) or per group of ``group`` columns (block-scaled
checkpoints), and the product accumulates in float32.
"""

from __future__ import annotations

import torch

FP8_DTYPE = torch.float8_e4m3fn
FP8_MAX = float(torch.finfo(FP8_DTYPE).max)
#: Smallest scale used, so an all-zero row or block quantizes to zeros instead of NaN.
MIN_SCALE = 1e-12


def _scale_of(amax: torch.Tensor) -> torch.Tensor:
    """``amax / FP8_MAX`` correctly rounded, floored at MIN_SCALE. Dividing by a tensor, not the Python
    float: torch on CUDA multiplies by the float's reciprocal instead, one ulp away from the kernels'
    (and the CPU's) division."""
    amax = amax.float()
    return (amax / torch.full_like(amax, FP8_MAX)).clamp(min=MIN_SCALE)


def _to_fp8(x: torch.Tensor, scale: torch.Tensor) -> torch.Tensor:
    return (x.float() / scale).clamp(-FP8_MAX, FP8_MAX).to(FP8_DTYPE)


def quantize_per_tensor(x: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """``x`` as fp8 and its one float32 scale (shape [1])."""
    scale = _scale_of(x.abs().amax()).reshape(1)
    return _to_fp8(x, scale), scale


def quantize_per_token(x: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """Rows of ``x`` [M, K] as fp8, and one float32 scale per row [M, 1]."""
    scale = _scale_of(x.abs().amax(dim=-1, keepdim=True))
    return _to_fp8(x, scale), scale


def quantize_per_group(x: torch.Tensor, group: int) -> tuple[torch.Tensor, torch.Tensor]:
    """``x`` [M, K] as fp8 with one scale per ``group`` consecutive columns of a row: [M, ceil(K/group)]."""
    m, k = x.shape
    groups = -(-k // group)
    padded = torch.nn.functional.pad(x.float(), (0, groups * group - k)).view(m, groups, group)
    scale = _scale_of(padded.abs().amax(dim=-1))
    q = _to_fp8(padded, scale.unsqueeze(-1)).view(m, groups * group)[:, :k]
    return q, scale


def expand_blocks(scale: torch.Tensor, rows: int, cols: int, block_n: int, block_k: int) -> torch.Tensor:
    """Per-block ``scale`` [..., ceil(rows/block_n), ceil(cols/block_k)] as one entry per element [..., rows, cols]
    (leading dimensions, experts stacked say, are kept)."""
    return scale.repeat_interleave(block_n, dim=-2)[..., :rows, :].repeat_interleave(block_k, dim=-1)[..., :cols]


def quantize_blockwise(w: torch.Tensor, block_n: int, block_k: int) -> tuple[torch.Tensor, torch.Tensor]:
    """``w`` [..., N, K] as fp8 with one float32 scale per ``block_n`` x ``block_k`` block of each matrix (HF
    ``weight_scale_inv``): [..., ceil(N/block_n), ceil(K/block_k)]."""
    *lead, n, k = w.shape
    bn, bk = -(-n // block_n), -(-k // block_k)
    padded = torch.nn.functional.pad(w.float(), (0, bk * block_k - k, 0, bn * block_n - n))
    blocks = padded.view(*lead, bn, block_n, bk, block_k)
    scale = _scale_of(blocks.abs().amax(dim=(-3, -1)))
    return _to_fp8(w, expand_blocks(scale, n, k, block_n, block_k)), scale


def dequantize_blockwise(q: torch.Tensor, scale: torch.Tensor, block_n: int, block_k: int) -> torch.Tensor:
    """float32 ``q * scale`` with ``scale`` given per block (``q`` [..., N, K])."""
    n, k = q.shape[-2:]
    return q.float() * expand_blocks(scale.float(), n, k, block_n, block_k)


def fp8_linear(x: torch.Tensor, weight: torch.Tensor, weight_scale: torch.Tensor,
               bias: torch.Tensor | None = None, input_scale: torch.Tensor | None = None) -> torch.Tensor:
    """W8A8 GEMM with per-output-channel weight scales: ``x`` [..., K] quantized per token (or with the
    static per-tensor ``input_scale``), ``weight`` fp8 [N, K], ``weight_scale`` float32 [N]; float32
    accumulation, output in ``x``'s dtype."""
    x2 = x.reshape(-1, x.shape[-1])
    if input_scale is None:
        xq, xs = quantize_per_token(x2)
    else:
        xs = input_scale.float().reshape(1, 1)
        xq = _to_fp8(x2, xs)
    out = (xq.float() @ weight.float().t()) * xs * weight_scale.float().reshape(1, -1)
    if bias is not None:
        out = out + bias.float()
    return out.to(x.dtype).reshape(*x.shape[:-1], weight.shape[0])


def fp8_block_linear(x: torch.Tensor, weight: torch.Tensor, weight_scale_inv: torch.Tensor, block_n: int,
                     block_k: int, bias: torch.Tensor | None = None) -> torch.Tensor:
    """W8A8 GEMM with block-scaled weights: ``x`` [..., K] quantized per token and group of ``block_k``
    columns, ``weight`` fp8 [N, K] with ``weight_scale_inv`` float32 per ``block_n`` x ``block_k``
    block; float32 accumulation, output in ``x``'s dtype."""
    x2 = x.reshape(-1, x.shape[-1])
    xq, xs = quantize_per_group(x2, block_k)
    k = x2.shape[1]
    x_deq = xq.float() * xs.repeat_interleave(block_k, dim=1)[:, :k]
    out = x_deq @ dequantize_blockwise(weight, weight_scale_inv, block_n, block_k).t()
    if bias is not None:
        out = out + bias.float()
    return out.to(x.dtype).reshape(*x.shape[:-1], weight.shape[0])
