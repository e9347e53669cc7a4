"""Skinny GEMM for decode batches: ``out[M, N] = x[M, K] @ w[N, K]^T (+ bias)`` for M of 1 to 16.

At decode a linear layer reads its whole weight to multiply a handful of rows, so the GEMM is a
matrix-vector product bound by weight bandwidth; cuBLAS picks tiles built for large M there and reaches
a quarter of the bandwidth on some shapes. Each program here streams ``BLOCK_N`` rows of the weight
through ``BLOCK_K``-wide vector loads. Up to 4 rows of ``x`` it multiplies elementwise and sums over K
once at the end (no tensor-core tile to fill); above that it pads ``x`` to 16 rows and uses ``tl.dot``.
Shapes with few weight rows split K over several programs, whose float32 partials a second kernel sums.

Launch settings come from :data:`TUNED`, else from the measured launch table
(:mod:`infercore_triton.skinny_table`, written by ``benchmarks/skinny_gemm.py --sweep --write-table``), which
also decides per shape whether ``linear`` takes the kernel or cuBLAS, else from :func:`default_config`. Nothing here syncs with the host or compiles per batch size: M is a
runtime argument and only the rows it is padded to (the next power of two, 16 for ``tl.dot``) are a
compile-time constant; the only allocations are the output and, with split K, its float32 partials,
both through the caching allocator. So the op is safe to capture in CUDA graphs.

With ``INFERCORE_PDL=1`` (sm_90+) the kernel launches as a programmatic dependent of the kernel in front
(:mod:`infercore_triton.pdl`): each program loads its first weight chunk, then waits for that kernel's output.

Tried and measured on an H100 (0.6B shape, batch 1), neither faster than the default launches: a SwiGLU's activation
computed inside the down projection's GEMM (1.169 against 1.163 ms/token), and a LoRA adapter term added inside the
GEMM (one rank-16 adapter: 1.630 against 1.629 ms/token for the base op, then the fused ``lora_apply`` kernel).
"""

from __future__ import annotations

import functools
from dataclasses import dataclass

import torch
import torch.nn.functional as F
import triton
import triton.language as tl

from infercore_triton import skinny_table
from infercore_triton.pdl import launch_options, pdl_enabled

#: The most rows of ``x`` and output features the ``linear`` op sends to the kernel where the measured launch
#: table (:mod:`infercore_triton.skinny_table`) does not list the shape; larger products go to ``F.linear``.
#: From an H200, in a CUDA graph of 28 calls: at 1-4 rows the kernel takes o_proj
#: (1024 x 2048) in 4.1-4.3 us against cuBLAS's 8.3-12.7, down_proj (1024 x 3072) in 5.3-5.5 against
#: 7.5; cuBLAS wins at 8 rows and on wider weights (gate_up 6144 x 1024: 5.9 against 7.8; the LM head).
SKINNY_MAX_M = 4
SKINNY_MAX_N = 2048
#: The most rows the kernel takes at all.
KERNEL_MAX_M = 16
#: Up to this many rows the kernel multiplies elementwise; above it, with ``tl.dot`` on 16 padded rows.
ELEMENTWISE_MAX_M = 4
_DOT_ROWS = 16
#: Products ``M_PAD * BLOCK_N * BLOCK_K`` per step of the elementwise path in the default settings
#: (64 float32 registers a thread at 4 warps).
_ELEMENTWISE_TILE = 8192
#: Device types :func:`linear` sends to the kernel.
_KERNEL_DEVICES = ("cuda",)
_HALF_DTYPES = (torch.bfloat16, torch.float16)
_KERNEL_DTYPES = (torch.bfloat16, torch.float16, torch.float32)


@dataclass(frozen=True)
class SkinnyConfig:
    """Launch settings of one GEMM: the weight tile a program reads per step (``block_n`` rows by
    ``block_k`` columns), Triton's ``num_warps``/``num_stages``, how many programs share K
    (``split_k``), whether to use ``tl.dot`` (``None``: above :data:`ELEMENTWISE_MAX_M` rows), and
    whether the elementwise path loads the next tile before multiplying this one (``prefetch``;
    ``tl.dot``'s loads are pipelined by Triton over ``num_stages`` instead)."""

    block_n: int
    block_k: int
    num_warps: int = 4
    num_stages: int = 3
    split_k: int = 1
    dot: bool | None = None
    prefetch: bool = True

    def __post_init__(self) -> None:
        for name in ("block_n", "block_k", "num_warps"):
            value = getattr(self, name)
            if value < 1 or value & (value - 1):
                raise ValueError(f"SkinnyConfig.{name} must be a power of two, got {value}")
        if self.split_k < 1 or self.num_stages < 1:
            raise ValueError(f"SkinnyConfig needs split_k >= 1 and num_stages >= 1, got {self}")

    def uses_dot(self, m: int) -> bool:
        """Whether ``m`` rows run through ``tl.dot`` (which needs tiles of at least 16 in every dimension)."""
        return self.dot if self.dot is not None else m > ELEMENTWISE_MAX_M


def m_bucket(m: int) -> int:
    """The tuning bucket of ``m`` rows: the next power of two (1, 2, 4, 8 or 16)."""
    if not 1 <= m <= KERNEL_MAX_M:
        raise ValueError(f"the skinny GEMM takes 1 to {KERNEL_MAX_M} rows, got {m}; use F.linear for more")
    return triton.next_power_of_2(m)


#: Measured settings by ``(m_bucket(M), N, K)``; shapes not listed use :func:`default_config`.
TUNED: dict[tuple[int, int, int], SkinnyConfig] = {}


def split_to_fill(n: int, k: int, block_n: int, block_k: int, num_sms: int = 132) -> int:
    """The fewest ways (a power of two) to split K so that there are two programs per SM, without
    giving any split less than one ``block_k`` chunk."""
    split_k = 1
    while triton.cdiv(n, block_n) * split_k < 2 * num_sms and k >= 2 * split_k * block_k:
        split_k *= 2
    return split_k


@functools.lru_cache(maxsize=256)
def default_config(m: int, n: int, k: int, num_sms: int = 132) -> SkinnyConfig:
    """Settings that keep two programs per SM busy. Elementwise: chunks of up to 1024 columns (a
    program keeps two in flight) and as many weight rows as :data:`_ELEMENTWISE_TILE` products allow,
    halved until there are enough programs. ``tl.dot``: 16 or 32 weight rows by 128 columns. K is
    split only when the tiles alone are too few, since the split's reduce is a second launch."""
    if m > ELEMENTWISE_MAX_M:
        block_n, block_k = 16 if n <= 8192 else 32, 128
    else:
        block_k = min(1024, max(16, triton.next_power_of_2(k)))
        block_n = min(16, max(1, _ELEMENTWISE_TILE // (block_k * triton.next_power_of_2(m))))
        while block_n > 1 and triton.cdiv(n, block_n) < 2 * num_sms:
            block_n //= 2
    return SkinnyConfig(block_n=block_n, block_k=block_k, split_k=split_to_fill(n, k, block_n, block_k, num_sms))


def config_for(m: int, n: int, k: int, num_sms: int = 132) -> SkinnyConfig:
    """The settings for an ``m`` x ``n`` x ``k`` product: :data:`TUNED`'s entry, the measured launch table's
    (:mod:`infercore_triton.skinny_table`), or the default."""
    tuned = TUNED.get((m_bucket(m), n, k))
    if tuned is not None:
        return tuned
    choice = skinny_table.TABLE.choice(m, n, k)
    if choice is not None and choice.kernel == "skinny" and choice.config:
        return SkinnyConfig(**choice.config)
    return default_config(m, n, k, num_sms)


@functools.cache
def _num_sms(device: torch.device) -> int:
    if device.type == "cuda":
        return torch.cuda.get_device_properties(device).multi_processor_count
    return 132


@triton.jit
def _elementwise_partial(x_ptr, w_ptr, M, N, K, stride_xm, k_lo, k_hi, pid_n,
                         M_PAD: tl.constexpr, BLOCK_N: tl.constexpr, BLOCK_K: tl.constexpr,
                         PREFETCH: tl.constexpr, USE_PDL: tl.constexpr):
    """``x[:, k_lo:k_hi] @ w[cols, k_lo:k_hi]^T`` [M_PAD, BLOCK_N] by multiply and sum. Everything lives in
    one [M_PAD, BLOCK_N, BLOCK_K] layout (x broadcast over the weight rows), and the products are
    summed over K once after the loop: no shuffles, barriers or layout changes inside it. ``USE_PDL``: the
    first weight chunk is loaded before waiting for the kernel in front (:mod:`infercore_triton.pdl`)."""
    rows = tl.arange(0, M_PAD)[:, None, None]
    cols = (pid_n * BLOCK_N + tl.arange(0, BLOCK_N))[None, :, None]
    ks = tl.arange(0, BLOCK_K)[None, None, :]
    row_ok = rows < M
    col_ok = cols < N
    w_rows = w_ptr + cols.to(tl.int64) * K
    # x's pointers span the weight rows too (the repeats hit L1): a load of the same shape as the
    # weight's gets the same layout, so neither is converted to the other's inside the loop.
    x_rows = x_ptr + rows * stride_xm + cols * 0
    acc = tl.zeros((M_PAD, BLOCK_N, BLOCK_K), dtype=tl.float32)
    if PREFETCH:
        # Plain loads are not software-pipelined (only those feeding tl.dot are): the next chunk is
        # loaded before this one is multiplied, so a program keeps two chunks of weight in flight.
        k = k_lo + ks
        w_next = tl.load(w_rows + k, mask=col_ok & (k < k_hi), other=0.0)
        if USE_PDL:
            tl.extra.cuda.gdc_wait()
        x_next = tl.load(x_rows + k, mask=row_ok & (k < k_hi), other=0.0)
        for k0 in range(k_lo, k_hi, BLOCK_K):
            w = w_next
            x = x_next
            k = k0 + BLOCK_K + ks
            w_next = tl.load(w_rows + k, mask=col_ok & (k < k_hi), other=0.0)
            x_next = tl.load(x_rows + k, mask=row_ok & (k < k_hi), other=0.0)
            acc += x.to(tl.float32) * w.to(tl.float32)
    else:
        if USE_PDL:
            tl.extra.cuda.gdc_wait()
        for k0 in range(k_lo, k_hi, BLOCK_K):
            k = k0 + ks
            w = tl.load(w_rows + k, mask=col_ok & (k < k_hi), other=0.0)
            x = tl.load(x_rows + k, mask=row_ok & (k < k_hi), other=0.0)
            acc += x.to(tl.float32) * w.to(tl.float32)
    return tl.sum(acc, axis=2)


@triton.jit
def _dot_partial(x_ptr, w_ptr, M, N, K, stride_xm, k_lo, k_hi, pid_n,
                 M_PAD: tl.constexpr, BLOCK_N: tl.constexpr, BLOCK_K: tl.constexpr, DOT_PRECISION: tl.constexpr):
    """The same product through ``tl.dot`` on ``x`` padded to M_PAD (16) rows; Triton pipelines its loads."""
    rows = tl.arange(0, M_PAD)
    cols = pid_n * BLOCK_N + tl.arange(0, BLOCK_N)
    ks = tl.arange(0, BLOCK_K)
    w_rows = w_ptr + cols.to(tl.int64)[:, None] * K
    x_rows = x_ptr + rows[:, None] * stride_xm
    acc = tl.zeros((M_PAD, BLOCK_N), dtype=tl.float32)
    for k0 in range(k_lo, k_hi, BLOCK_K):
        k = k0 + ks
        k_ok = (k < k_hi)[None, :]
        w = tl.load(w_rows + k[None, :], mask=(cols < N)[:, None] & k_ok, other=0.0)
        x = tl.load(x_rows + k[None, :], mask=(rows < M)[:, None] & k_ok, other=0.0)
        acc += tl.dot(x, tl.trans(w), input_precision=DOT_PRECISION)
    return acc


# M changes from step to step; it is not specialised on (Triton would compile a variant for M == 1).
@triton.jit(do_not_specialize=["M"])
def _skinny_gemm_kernel(x_ptr, w_ptr, bias_ptr, out_ptr, part_ptr, M, N, K, stride_xm, stride_om, k_per_split,
                        M_PAD: tl.constexpr, BLOCK_N: tl.constexpr, BLOCK_K: tl.constexpr,
                        SPLIT: tl.constexpr, USE_DOT: tl.constexpr, PREFETCH: tl.constexpr,
                        HAS_BIAS: tl.constexpr, DOT_PRECISION: tl.constexpr, USE_PDL: tl.constexpr):
    pid_n = tl.program_id(0)
    pid_k = tl.program_id(1)
    k_lo = pid_k * k_per_split
    k_hi = tl.minimum(k_lo + k_per_split, K)
    if USE_DOT:
        if USE_PDL:
            tl.extra.cuda.gdc_wait()
        acc = _dot_partial(x_ptr, w_ptr, M, N, K, stride_xm, k_lo, k_hi, pid_n, M_PAD, BLOCK_N, BLOCK_K,
                           DOT_PRECISION)
    else:
        acc = _elementwise_partial(x_ptr, w_ptr, M, N, K, stride_xm, k_lo, k_hi, pid_n, M_PAD, BLOCK_N, BLOCK_K,
                                   PREFETCH, USE_PDL)
    rows = tl.arange(0, M_PAD)
    cols = pid_n * BLOCK_N + tl.arange(0, BLOCK_N)
    row_ok = rows < M
    col_ok = cols < N
    mask = row_ok[:, None] & col_ok[None, :]
    if SPLIT:
        # Partials [SPLIT_K, M, N] in float32; the reduce kernel adds the bias and rounds once.
        tl.store(part_ptr + (pid_k * M + rows[:, None]) * N + cols[None, :], acc, mask=mask)
    else:
        if HAS_BIAS:
            acc += tl.load(bias_ptr + cols, mask=col_ok, other=0.0).to(tl.float32)[None, :]
        tl.store(out_ptr + rows[:, None] * stride_om + cols[None, :], acc.to(out_ptr.dtype.element_ty), mask=mask)


@triton.jit(do_not_specialize=["M"])
def _split_k_reduce_kernel(part_ptr, bias_ptr, out_ptr, M, N, stride_om,
                           SPLIT_K: tl.constexpr, BLOCK: tl.constexpr, HAS_BIAS: tl.constexpr):
    row = tl.program_id(1)
    cols = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    col_ok = cols < N
    acc = tl.zeros((BLOCK,), dtype=tl.float32)
    for split in tl.static_range(SPLIT_K):
        acc += tl.load(part_ptr + (split * M + row) * N + cols, mask=col_ok, other=0.0)
    if HAS_BIAS:
        acc += tl.load(bias_ptr + cols, mask=col_ok, other=0.0).to(tl.float32)
    tl.store(out_ptr + row * stride_om + cols, acc.to(out_ptr.dtype.element_ty), mask=col_ok)


def _check(x: torch.Tensor, weight: torch.Tensor, bias: torch.Tensor | None) -> None:
    if x.dim() != 2 or weight.dim() != 2 or x.shape[1] != weight.shape[1]:
        raise ValueError(f"skinny_gemm multiplies x [M, K] by weight [N, K]; got {tuple(x.shape)} and "
                         f"{tuple(weight.shape)}")
    if not 1 <= x.shape[0] <= KERNEL_MAX_M:
        raise ValueError(f"skinny_gemm takes 1 to {KERNEL_MAX_M} rows, got {x.shape[0]}; use F.linear for more")
    if x.dtype not in _KERNEL_DTYPES or weight.dtype != x.dtype:
        raise ValueError(f"skinny_gemm needs x and weight of one dtype among {_KERNEL_DTYPES}; got {x.dtype} "
                         f"and {weight.dtype}")
    if x.stride(1) != 1 or not weight.is_contiguous():
        raise ValueError("skinny_gemm needs x's last dimension contiguous and a contiguous weight")
    if bias is not None and (bias.shape != (weight.shape[0],) or not bias.is_contiguous()):
        raise ValueError(f"bias must be a contiguous [{weight.shape[0]}] vector, got {tuple(bias.shape)}")


def skinny_gemm(x: torch.Tensor, weight: torch.Tensor, bias: torch.Tensor | None = None,
                config: SkinnyConfig | None = None) -> torch.Tensor:
    """``x @ weight.T + bias`` for ``x`` [M, K] with 1 <= M <= 16 (rows may be strided) and ``weight``
    [N, K] contiguous, accumulated in float32, returned in ``x``'s dtype. ``config`` overrides the
    launch settings (:func:`config_for`)."""
    _check(x, weight, bias)
    m, k = x.shape[0], weight.shape[1]
    n = weight.shape[0]
    cfg = config or config_for(m, n, k, _num_sms(x.device))
    use_dot = cfg.uses_dot(m)
    if use_dot and min(cfg.block_n, cfg.block_k) < 16:
        raise ValueError(f"tl.dot needs block_n and block_k of at least 16, got {cfg}")
    out = torch.empty((m, n), dtype=x.dtype, device=x.device)
    # Each split covers whole BLOCK_K chunks so that no chunk straddles two splits.
    k_per_split = triton.cdiv(triton.cdiv(k, cfg.split_k), cfg.block_k) * cfg.block_k
    split_k = triton.cdiv(k, k_per_split)
    part = torch.empty((split_k, m, n), dtype=torch.float32, device=x.device) if split_k > 1 else out
    bias_arg = bias if bias is not None else out
    grid = (triton.cdiv(n, cfg.block_n), split_k)
    pdl = pdl_enabled(x.device)
    _skinny_gemm_kernel[grid](
        x, weight, bias_arg, out, part, m, n, k, x.stride(0), out.stride(0), k_per_split,
        M_PAD=_DOT_ROWS if use_dot else triton.next_power_of_2(m), BLOCK_N=cfg.block_n, BLOCK_K=cfg.block_k,
        SPLIT=split_k > 1, USE_DOT=use_dot, PREFETCH=cfg.prefetch, HAS_BIAS=bias is not None,
        DOT_PRECISION="ieee" if x.dtype == torch.float32 else "tf32", USE_PDL=pdl,
        num_warps=cfg.num_warps, num_stages=cfg.num_stages, **launch_options(pdl))
    if split_k > 1:
        split_k_reduce(part, bias, out)
    return out


def split_k_reduce(part: torch.Tensor, bias: torch.Tensor | None, out: torch.Tensor) -> None:
    """``out = part.sum(0) + bias`` for float32 partials [SPLIT_K, M, N], rounded once into ``out`` [M, N]."""
    split_k, m, n = part.shape
    block = min(1024, triton.next_power_of_2(n))
    _split_k_reduce_kernel[(triton.cdiv(n, block), m)](part, bias if bias is not None else out, out, m, n,
                                                       out.stride(0), SPLIT_K=split_k, BLOCK=block,
                                                       HAS_BIAS=bias is not None)


def uses_kernel(x: torch.Tensor, weight: torch.Tensor, bias: torch.Tensor | None = None) -> bool:
    """Whether :func:`linear` sends this product to the kernel rather than ``F.linear``: where the measured
    launch table lists the shape at this row bucket, as it says; elsewhere up to :data:`SKINNY_MAX_M` rows and
    :data:`SKINNY_MAX_N` output features."""
    if x.dim() != 2 or weight.dim() != 2 or x.device.type not in _KERNEL_DEVICES:
        return False
    bias_ok = bias is None or (bias.dtype == x.dtype and bias.shape == weight.shape[:1] and bias.is_contiguous())
    m, n = x.shape[0], weight.shape[0]
    if not (x.dtype in _HALF_DTYPES and weight.dtype == x.dtype and 1 <= m <= KERNEL_MAX_M
            and x.shape[1] == weight.shape[1] and x.stride(1) == 1 and weight.is_contiguous() and bias_ok):
        return False
    choice = skinny_table.TABLE.choice(m, n, weight.shape[1])
    if choice is not None:
        return choice.kernel == "skinny"
    return m <= SKINNY_MAX_M and n <= SKINNY_MAX_N


def linear(x: torch.Tensor, weight: torch.Tensor, bias: torch.Tensor | None = None) -> torch.Tensor:
    """Custom op ``linear`` on CUDA: the skinny GEMM for decode-sized bf16/fp16 batches, ``F.linear``
    (the reference) for everything else."""
    if uses_kernel(x, weight, bias):
        return skinny_gemm(x, weight, bias)
    return F.linear(x, weight, bias)

