"""Per-row LoRA kernels (BGMV) for decode-sized steps: each program takes one token and its slot.

``bgmv_shrink`` splits the hidden dimension: program ``(t, s)`` multiplies token ``t``'s ``BLOCK_K``
inputs of chunk ``s`` by its slot's A, writing float32 partial sums ``partial[s, t, :N*R]`` (a batch of
one token still spreads the A read over ``K / BLOCK_K`` programs). ``bgmv_expand`` sums a token's
partials and adds ``xa @ B[slot]^T`` for its slice into ``BLOCK_N`` output columns in place. A token
without a slot (-1) returns at once in both; the slot is data, read on the device.
"""

from __future__ import annotations

import triton
import triton.language as tl


@triton.jit
def bgmv_shrink_kernel(x_ptr, a_ptr, part_ptr, slots_ptr, K, NR, stride_xm, stride_as, stride_an, stride_ps,
                       stride_pm, BLOCK_N: tl.constexpr, BLOCK_K: tl.constexpr):
    """``partial[s, t, n] = sum over chunk s of x[t, k] * A[slot(t), n, k]``; grid (tokens, chunks, N blocks)."""
    row, split, pid_n = tl.program_id(0), tl.program_id(1), tl.program_id(2)
    slot = tl.load(slots_ptr + row)
    if slot < 0:
        return
    ks = split * BLOCK_K + tl.arange(0, BLOCK_K)
    k_ok = ks < K
    ns = pid_n * BLOCK_N + tl.arange(0, BLOCK_N)
    n_ok = ns < NR
    x = tl.load(x_ptr + row.to(tl.int64) * stride_xm + ks, mask=k_ok, other=0.0).to(tl.float32)
    a = tl.load(a_ptr + slot.to(tl.int64) * stride_as + ns[:, None] * stride_an + ks[None, :],
                mask=n_ok[:, None] & k_ok[None, :], other=0.0).to(tl.float32)
    acc = tl.sum(a * x[None, :], axis=1)
    tl.store(part_ptr + split * stride_ps + row * stride_pm + ns, acc, mask=n_ok)


@triton.jit
def bgmv_expand_kernel(out_ptr, part_ptr, b_ptr, slots_ptr, width, R, off1, off2, num_splits, stride_om,
                       stride_ps, stride_pm, stride_bs, stride_bn, NUM_SLICES: tl.constexpr,
                       BLOCK_N: tl.constexpr, BLOCK_R: tl.constexpr, SPLITS: tl.constexpr):
    """``out[t, cols] += xa[t, slice(col)] @ B[slot(t), cols]^T``, ``xa`` the sum of the partials;
    grid (tokens, output blocks). ``off1`` / ``off2`` are the second and third slices' first columns."""
    row, pid_n = tl.program_id(0), tl.program_id(1)
    slot = tl.load(slots_ptr + row)
    if slot < 0:
        return
    cols = pid_n * BLOCK_N + tl.arange(0, BLOCK_N)
    col_ok = cols < width
    rs = tl.arange(0, BLOCK_R)
    r_ok = rs < R
    ss = tl.arange(0, SPLITS)
    s_ok = ss < num_splits
    b = tl.load(b_ptr + slot.to(tl.int64) * stride_bs + cols[:, None] * stride_bn + rs[None, :],
                mask=col_ok[:, None] & r_ok[None, :], other=0.0).to(tl.float32)
    slice_of = (cols >= off1).to(tl.int32) + (cols >= off2).to(tl.int32)
    acc = tl.zeros((BLOCK_N,), dtype=tl.float32)
    for i in tl.static_range(NUM_SLICES):
        parts = tl.load(part_ptr + ss[:, None] * stride_ps + row * stride_pm + i * R + rs[None, :],
                        mask=s_ok[:, None] & r_ok[None, :], other=0.0)
        xa = tl.sum(parts, axis=0)
        acc += tl.where(slice_of == i, tl.sum(b * xa[None, :], axis=1), 0.0)
    ptrs = out_ptr + row.to(tl.int64) * stride_om + cols
    current = tl.load(ptrs, mask=col_ok, other=0.0)
    tl.store(ptrs, (current.to(tl.float32) + acc).to(current.dtype), mask=col_ok)
