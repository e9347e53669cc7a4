"""One-launch LoRA for decode-sized steps: shrink and expand of a wrapped linear in a single kernel.

Program ``(t, j)`` takes token ``t`` and output columns ``[j * BLOCK_N, (j + 1) * BLOCK_N)``. For each output
slice those columns touch (one, when ``BLOCK_N`` divides the slice widths) it computes
``xa = x[t] @ A[slot(t), slice]^T`` over the whole hidden dimension, then adds ``xa @ B[slot(t), cols]^T``
to ``out[t, cols]`` in place. Every output block recomputes its slice's shrink: a slice's A (``R x K``,
32 KB at rank 16 over 1024 inputs) is read from L2 by each of the token's programs, traded for the second
launch and the float32 scratch of the two-kernel path (``lora_bgmv``). A token without a slot (-1) returns
at once; the slot is data, read on the device, so a captured graph replays any mix of adapters.

Launch settings (:func:`fused_settings`) depend on the shapes only: the default rule below, or the entry of a
measured table (``benchmarks/lora_fused.py --table-out`` writes one) that the environment variable
:data:`TABLE_ENV` names::

    {"choices": [{"m": 1, "k": 1024, "rank": 16, "width": 4096, "fused": true,
                  "block_n": 128, "block_k": 1024, "num_warps": 8, "unroll": true, "pdl": false}, ...]}

``m`` is the next power of two of the step's tokens (a bucket not measured takes the largest smaller one
measured at that shape), ``rank`` the slot width rounded up to a power of two (at least 16);
``"fused": false`` keeps the two-kernel path at that shape.

With ``"pdl": true`` the kernel is launched as a programmatic dependent launch (PDL, sm_90+): it may start
while the kernel before it (the base GEMM that writes ``out``) still runs, reading only what that kernel
cannot write (the slot, B, A's first chunk) before ``gdc_wait``, which waits for the kernel before it to
finish; ``x`` (which a copy just before could write) and ``out`` are read after it. Every program waits,
a token without a slot's too, so the kernel never finishes before the one it overlaps (the kernels after it
wait for this one only).
"""

from __future__ import annotations

import functools
import json
import os
import warnings
from dataclasses import dataclass
from typing import Any

import triton
import triton.language as tl

#: Environment variable naming a measured JSON launch table (see the module's docstring).
TABLE_ENV = "INFERCORE_LORA_FUSED_TABLE"
#: Without a table entry, the fused kernel runs while one slice's A (slot width x hidden) has at most this
#: many elements: each program reads it whole, so a long shrink (8B's down projection, or rank 64 over
#: 2048 inputs or more) splits better over the two-kernel path's hidden-dimension chunks.
FUSED_MAX_A_ELEMENTS = 64 * 1024
#: Without a table entry, the fused kernel runs for steps of at most this many tokens.
FUSED_MAX_TOKENS = 16
#: Programs per token the default rule aims for (output blocks of a power-of-two width).
_TARGET_BLOCKS = 32
#: Elements of the A tile one shrink iteration multiplies (``BLOCK_R x BLOCK_K``), by the default rule.
_TILE_ELEMENTS = 16 * 1024
#: Without a table entry, the shrink's loop over the hidden dimension is unrolled up to this many chunks
#: (every chunk's loads issued at once rather than one round trip to memory a chunk).
_MAX_UNROLL = 8


@dataclass(frozen=True)
class FusedSettings:
    """Launch settings of :func:`bgmv_fused_kernel`: output columns and hidden-dimension chunk per program,
    and whether the shrink's loop over the chunks is unrolled."""

    block_n: int
    block_k: int
    num_warps: int
    unroll: bool = False
    #: Launched as a programmatic dependent of the kernel before it (sm_90+): the slot, B and A's first chunk
    #: are read while the base GEMM finishes, x and ``out`` after ``gdc_wait``.
    pdl: bool = False

    def k_iters(self, k: int) -> int:
        """The kernel's ``K_ITERS``: the chunk count when unrolled, else 0 (a loop)."""
        return triton.cdiv(k, self.block_k) if self.unroll else 0


def bucket(tokens: int) -> int:
    """The table's bucket of a step of ``tokens`` tokens: the next power of two."""
    return 1 << max(0, tokens - 1).bit_length()


def rank_block(rank: int) -> int:
    """The rank tile of a slot width: its next power of two, at least 16."""
    return max(16, triton.next_power_of_2(rank))


def default_settings(k: int, rank: int, width: int) -> FusedSettings:
    """The rule without measurements: about :data:`_TARGET_BLOCKS` output blocks of 32 to 256 columns, an A
    tile of :data:`_TILE_ELEMENTS` (the whole slice at rank 16 over 1024 inputs), the chunks unrolled up to
    :data:`_MAX_UNROLL` of them."""
    block_r = rank_block(rank)
    block_n = min(256, max(32, triton.next_power_of_2(triton.cdiv(width, _TARGET_BLOCKS))))
    block_k = min(triton.next_power_of_2(k), max(64, _TILE_ELEMENTS // block_r))
    num_warps = 8 if block_r * block_k >= 8192 or block_n * block_r >= 8192 else 4
    return FusedSettings(block_n, block_k, num_warps, unroll=triton.cdiv(k, block_k) <= _MAX_UNROLL)


@functools.cache
def _table(path: str) -> dict[tuple[int, int, int, int], dict[str, Any]]:
    """The entries of the table at ``path`` by (bucket, K, rank block, width); a file that does not parse
    gives none (with a warning): the rule decides."""
    try:
        with open(path) as f:
            data = json.load(f)
        return {(int(e["m"]), int(e["k"]), int(e["rank"]), int(e["width"])): e for e in data.get("choices", [])}
    except (OSError, ValueError, KeyError, TypeError) as err:
        warnings.warn(f"{TABLE_ENV}={path}: not a LoRA launch table ({err}); using the shape rule", stacklevel=2)
        return {}


def table_entry(tokens: int, k: int, rank: int, width: int) -> dict[str, Any] | None:
    """The entry of the table :data:`TABLE_ENV` names for this step's bucket and shape, else that of the
    largest smaller bucket measured at this shape, if any."""
    path = os.environ.get(TABLE_ENV)
    if not path or not os.path.exists(path):
        return None
    table, b = _table(path), bucket(tokens)
    while b >= 1:
        if (b, k, rank_block(rank), width) in table:
            return table[(b, k, rank_block(rank), width)]
        b //= 2
    return None


@functools.cache
def fused_settings(tokens: int, k: int, rank: int, width: int) -> FusedSettings | None:
    """The fused kernel's settings for a step of ``tokens`` tokens at this shape, or ``None`` where the
    two-kernel path runs: the table's entry if it has one, else :func:`default_settings` while ``tokens`` is
    at most :data:`FUSED_MAX_TOKENS` and one slice's A at most :data:`FUSED_MAX_A_ELEMENTS` elements."""
    entry = table_entry(tokens, k, rank, width)
    if entry is not None:
        if not entry.get("fused", True):
            return None
        return FusedSettings(int(entry["block_n"]), int(entry["block_k"]), int(entry["num_warps"]),
                             bool(entry.get("unroll", False)), bool(entry.get("pdl", False)))
    if tokens > FUSED_MAX_TOKENS or rank_block(rank) * k > FUSED_MAX_A_ELEMENTS:
        return None
    return default_settings(k, rank, width)


@triton.jit
def _a_chunk(a_rows, r_ok, k, K, BLOCK_K: tl.constexpr):
    """Chunk ``[k, k + BLOCK_K)`` of a slice's A rows, as stored."""
    ks = k + tl.arange(0, BLOCK_K)
    return tl.load(a_rows + ks[None, :], mask=r_ok[:, None] & (ks < K)[None, :], other=0.0)


@triton.jit
def _times_x(av, x_row, k, K, BLOCK_K: tl.constexpr):
    """``sum over ks of A[r, ks] * x[ks]`` for the chunk ``av`` of A starting at ``k``, in float32."""
    ks = k + tl.arange(0, BLOCK_K)
    xv = tl.load(x_row + ks, mask=ks < K, other=0.0).to(tl.float32)
    return tl.sum(av.to(tl.float32) * xv[None, :], axis=1)


@triton.jit
def bgmv_fused_kernel(out_ptr, x_ptr, a_ptr, b_ptr, slots_ptr, K, width, R, off1, off2, stride_om, stride_xm,
                      stride_as, stride_an, stride_bs, stride_bn, NUM_SLICES: tl.constexpr,
                      BLOCK_N: tl.constexpr, BLOCK_K: tl.constexpr, BLOCK_R: tl.constexpr, K_ITERS: tl.constexpr,
                      USE_PDL: tl.constexpr):
    """``out[t, cols] += (x[t] @ A[slot(t), slice]^T) @ B[slot(t), cols]^T`` for each slice the block's
    columns touch; grid (tokens, output blocks). ``off1`` / ``off2`` are the second and third slices' first
    columns (``width`` when there are fewer slices); ``K_ITERS`` > 0 unrolls the shrink over that many
    chunks (``K_ITERS * BLOCK_K >= K``), 0 loops. ``USE_PDL``: launched as a programmatic dependent (see
    the module's docstring)."""
    row, pid_n = tl.program_id(0), tl.program_id(1)
    slot = tl.load(slots_ptr + row)
    if slot < 0:
        if USE_PDL:  # every program waits: this kernel must not finish before the one it overlaps
            tl.extra.cuda.gdc_wait()
        return
    first = pid_n * BLOCK_N
    cols = first + tl.arange(0, BLOCK_N)
    col_ok = cols < width
    last = tl.minimum(first + BLOCK_N, width) - 1
    rs = tl.arange(0, BLOCK_R)
    r_ok = rs < R
    b = tl.load(b_ptr + slot.to(tl.int64) * stride_bs + cols[:, None] * stride_bn + rs[None, :],
                mask=col_ok[:, None] & r_ok[None, :], other=0.0)  # widened after the shrink: fewer registers
    slice_of = (cols >= off1).to(tl.int32) + (cols >= off2).to(tl.int32)
    x_row = x_ptr + row.to(tl.int64) * stride_xm
    acc = tl.zeros((BLOCK_N,), dtype=tl.float32)
    for i in tl.static_range(NUM_SLICES):
        lo = 0 if i == 0 else (off1 if i == 1 else off2)
        hi = width if i == NUM_SLICES - 1 else (off1 if i == 0 else off2)
        if (first < hi) & (last >= lo):  # only the slices of this block's columns
            a_rows = a_ptr + slot.to(tl.int64) * stride_as + (i * R + rs)[:, None] * stride_an
            xa = tl.zeros((BLOCK_R,), dtype=tl.float32)
            if K_ITERS > 0:
                for it in tl.static_range(K_ITERS):
                    av = _a_chunk(a_rows, r_ok, it * BLOCK_K, K, BLOCK_K)
                    if USE_PDL:  # noqa: SIM102 (constexpr conditions, nested)
                        if it == 0:
                            tl.extra.cuda.gdc_wait()
                    xa += _times_x(av, x_row, it * BLOCK_K, K, BLOCK_K)
            else:
                if USE_PDL:
                    tl.extra.cuda.gdc_wait()
                for k in range(0, K, BLOCK_K):
                    xa += _times_x(_a_chunk(a_rows, r_ok, k, K, BLOCK_K), x_row, k, K, BLOCK_K)
            acc += tl.where(slice_of == i, tl.sum(b.to(tl.float32) * xa[None, :], axis=1), 0.0)
    if USE_PDL:
        tl.extra.cuda.gdc_wait()  # (again: waits once; ``out`` is the kernel before's output)
    out_ptrs = out_ptr + row.to(tl.int64) * stride_om + cols
    current = tl.load(out_ptrs, mask=col_ok, other=0.0)
    tl.store(out_ptrs, (current.to(tl.float32) + acc).to(current.dtype), mask=col_ok)
