"""Tile GEMM for mid-sized decode batches: ``out[M, N] = x[M, K] @ w[N, K]^T`` for M of 17 to 256.

At these batch sizes a decode step's projections are small products (a few GFLOP over a few MB of weight)
that cuBLAS runs with tiles sized for a handful of programs: on an H200, at 256 rows, o_proj (1024 x 2048)
and down_proj (1024 x 3072) of the W-GPU model launch 16-32 programs on 132 multiprocessors. Here each
program computes a ``block_m`` x ``block_n`` tile of the output with ``tl.dot`` over ``block_k`` steps;
programs are grouped along N so neighbours share their rows of ``x`` in L2.

Launch settings come from :data:`TUNED`, keyed by (row bucket, N, K) and measured on an H200 with
``benchmarks/tile_gemm.py``; only listed shapes use the kernel (:func:`uses_kernel`), the rest go to
``F.linear``. M is a runtime argument, so one compiled kernel serves every batch of a bucket, and the op
neither syncs with the host nor allocates beyond its output: it is safe to capture in CUDA graphs.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch
import triton
import triton.language as tl

#: The fewest and most rows the kernel takes (fewer go to the skinny GEMM or cuBLAS, more to cuBLAS).
MIN_M = 17
MAX_M = 256
_GROUP_N = 8


@dataclass(frozen=True)
class TileConfig:
    """Launch settings of one product: the output tile a program computes (``block_m`` x ``block_n``),
    the K step (``block_k``) and Triton's ``num_warps`` / ``num_stages``."""

    block_m: int
    block_n: int
    block_k: int
    num_warps: int = 4
    num_stages: int = 4

    def __post_init__(self) -> None:
        for name in ("block_m", "block_n", "block_k", "num_warps"):
            value = getattr(self, name)
            if value < 1 or value & (value - 1):
                raise ValueError(f"TileConfig.{name} must be a power of two, got {value}")
        if min(self.block_m, self.block_n, self.block_k) < 16 or self.num_stages < 1:
            raise ValueError(f"TileConfig needs tiles of at least 16 and num_stages >= 1, got {self}")


def m_bucket(m: int) -> int:
    """The tuning bucket of ``m`` rows: the next power of two (32, 64, 128 or 256)."""
    if not MIN_M <= m <= MAX_M:
        raise ValueError(f"the tile GEMM takes {MIN_M} to {MAX_M} rows, got {m}")
    return triton.next_power_of_2(m)


#: Measured settings by ``(m_bucket(M), N, K)``: only these shapes run the kernel.
TUNED: dict[tuple[int, int, int], TileConfig] = {}


@triton.jit(do_not_specialize=["M"])
def _tile_gemm_kernel(x_ptr, w_ptr, out_ptr, M, N, K, stride_xm, stride_om,
                      BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr, BLOCK_K: tl.constexpr, GROUP_N: tl.constexpr):
    pid = tl.program_id(0)
    grid_m = tl.cdiv(M, BLOCK_M)
    grid_n = tl.cdiv(N, BLOCK_N)
    # Programs run in groups of GROUP_N column tiles for every row tile, so a group reads each weight tile once.
    width = GROUP_N * grid_m
    first_n = (pid // width) * GROUP_N
    group_size = tl.minimum(grid_n - first_n, GROUP_N)
    pid_n = first_n + (pid % width) % group_size
    pid_m = (pid % width) // group_size
    rows = pid_m * BLOCK_M + tl.arange(0, BLOCK_M)
    cols = pid_n * BLOCK_N + tl.arange(0, BLOCK_N)
    ks = tl.arange(0, BLOCK_K)
    row_ok = rows < M
    col_ok = cols < N
    x_ptrs = x_ptr + rows[:, None] * stride_xm + ks[None, :]
    w_ptrs = w_ptr + cols[:, None] * K + ks[None, :]
    acc = tl.zeros((BLOCK_M, BLOCK_N), dtype=tl.float32)
    for k0 in range(0, K, BLOCK_K):
        k_ok = (k0 + ks) < K
        x = tl.load(x_ptrs, mask=row_ok[:, None] & k_ok[None, :], other=0.0)
        w = tl.load(w_ptrs, mask=col_ok[:, None] & k_ok[None, :], other=0.0)
        acc = tl.dot(x, tl.trans(w), acc)
        x_ptrs += BLOCK_K
        w_ptrs += BLOCK_K
    tl.store(out_ptr + rows[:, None] * stride_om + cols[None, :], acc.to(out_ptr.dtype.element_ty),
             mask=row_ok[:, None] & col_ok[None, :])


def tile_gemm(x: torch.Tensor, weight: torch.Tensor, config: TileConfig) -> torch.Tensor:
    """``x @ weight.T`` for ``x`` [M, K] (rows may be strided, the last dimension contiguous) and a contiguous
    ``weight`` [N, K] of the same half dtype, accumulated in float32."""
    if x.dim() != 2 or weight.dim() != 2 or x.shape[1] != weight.shape[1]:
        raise ValueError(f"tile_gemm multiplies x [M, K] by weight [N, K]; got {tuple(x.shape)} and "
                         f"{tuple(weight.shape)}")
    if x.dtype not in (torch.bfloat16, torch.float16) or weight.dtype != x.dtype:
        raise ValueError(f"tile_gemm needs x and weight of one dtype, bf16 or fp16; got {x.dtype} and {weight.dtype}")
    if x.stride(1) != 1 or not weight.is_contiguous():
        raise ValueError("tile_gemm needs x's last dimension contiguous and a contiguous weight")
    m, k = x.shape
    n = weight.shape[0]
    out = torch.empty((m, n), dtype=x.dtype, device=x.device)
    grid = (triton.cdiv(m, config.block_m) * triton.cdiv(n, config.block_n),)
    _tile_gemm_kernel[grid](x, weight, out, m, n, k, x.stride(0), out.stride(0),
                            BLOCK_M=config.block_m, BLOCK_N=config.block_n, BLOCK_K=config.block_k,
                            GROUP_N=_GROUP_N, num_warps=config.num_warps, num_stages=config.num_stages)
    return out


def tuned_config(x: torch.Tensor, weight: torch.Tensor, bias: torch.Tensor | None = None) -> TileConfig | None:
    """The measured settings for this product, or None where the kernel is not used (``F.linear`` is)."""
    if (bias is not None or x.dim() != 2 or weight.dim() != 2 or x.device.type != "cuda"
            or not MIN_M <= x.shape[0] <= MAX_M or x.dtype not in (torch.bfloat16, torch.float16)
            or weight.dtype != x.dtype or x.stride(1) != 1 or not weight.is_contiguous()):
        return None
    return TUNED.get((m_bucket(x.shape[0]), weight.shape[0], weight.shape[1]))
