"""Grouped LoRA kernels (SGMV) for prompt-sized steps: each program takes one tile of tokens of one slot.

The host lists the step's tiles (``infercore.lora.step_state.group_by_slot``: slot, first and end index
into ``sorted_tokens``), so a program multiplies up to ``BLOCK_M`` tokens by one slot's matrices with
``tl.dot``, as in Punica's SGMV; unused tiles (slot -1) return at once, so the grid depends on the token
count alone and a captured graph replays any mix of adapters.

``sgmv_shrink`` may split the hidden dimension into ``k_per_split`` chunks (when the tiles alone fill
few programs), writing float32 partials ``partial[s, t, :N*R]``; ``sgmv_expand`` sums them and adds
``xa @ B[slot]^T`` per output slice into ``out`` in place. The split count is a run-time argument (at
most ``MAX_SPLITS``), so a step of a new token count builds no new variant.
"""

from __future__ import annotations

import triton
import triton.language as tl


@triton.jit
def _tile_tokens(tiles_ptr, sorted_ptr, tile, BLOCK_M: tl.constexpr):
    """The token indices of tile ``tile`` (``BLOCK_M`` of them, from its first to its end index into
    ``sorted_tokens``) and which of them the tile holds."""
    first = tl.load(tiles_ptr + tile * 3 + 1)
    end = tl.load(tiles_ptr + tile * 3 + 2)
    rows = first + tl.arange(0, BLOCK_M)
    row_ok = rows < end
    tokens = tl.load(sorted_ptr + rows, mask=row_ok, other=0).to(tl.int64)
    return tokens, row_ok


@triton.jit
def sgmv_shrink_kernel(x_ptr, a_ptr, part_ptr, sorted_ptr, tiles_ptr, K, NR, k_per_split, stride_xm, stride_as,
                       stride_an, stride_ps, stride_pm, BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr,
                       BLOCK_K: tl.constexpr, IEEE: tl.constexpr):
    """``partial[s, t, n] = sum over chunk s of x[t, k] * A[slot, n, k]``; grid (tiles, chunks, N blocks)."""
    tile, split, pid_n = tl.program_id(0), tl.program_id(1), tl.program_id(2)
    slot = tl.load(tiles_ptr + tile * 3)
    if slot < 0:
        return
    tokens, row_ok = _tile_tokens(tiles_ptr, sorted_ptr, tile, BLOCK_M)
    cols = pid_n * BLOCK_N + tl.arange(0, BLOCK_N)
    col_ok = cols < NR
    acc = tl.zeros((BLOCK_M, BLOCK_N), dtype=tl.float32)
    a_base = a_ptr + slot.to(tl.int64) * stride_as
    k_start = split * k_per_split
    k_end = tl.minimum(k_start + k_per_split, K)
    for k in range(k_start, k_end, BLOCK_K):
        ks = k + tl.arange(0, BLOCK_K)
        k_ok = ks < k_end
        x = tl.load(x_ptr + tokens[:, None] * stride_xm + ks[None, :], mask=row_ok[:, None] & k_ok[None, :],
                    other=0.0)
        a = tl.load(a_base + cols[None, :] * stride_an + ks[:, None], mask=k_ok[:, None] & col_ok[None, :],
                    other=0.0)
        if IEEE:
            acc += tl.dot(x, a.to(x.dtype), input_precision="ieee")
        else:
            acc += tl.dot(x, a.to(x.dtype))
    tl.store(part_ptr + split * stride_ps + tokens[:, None] * stride_pm + cols[None, :], acc,
             mask=row_ok[:, None] & col_ok[None, :])


@triton.jit
def sgmv_expand_kernel(out_ptr, part_ptr, b_ptr, sorted_ptr, tiles_ptr, width, R, off1, off2, num_splits,
                       stride_om, stride_ps, stride_pm, stride_bs, stride_bn, NUM_SLICES: tl.constexpr,
                       MAX_SPLITS: tl.constexpr,
                       BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr, BLOCK_R: tl.constexpr, IEEE: tl.constexpr):
    """``out[t, cols] += xa[t, slice(col)] @ B[slot, cols]^T`` for a tile's tokens; grid (tiles, N blocks)."""
    tile, pid_n = tl.program_id(0), tl.program_id(1)
    slot = tl.load(tiles_ptr + tile * 3)
    if slot < 0:
        return
    tokens, row_ok = _tile_tokens(tiles_ptr, sorted_ptr, tile, BLOCK_M)
    cols = pid_n * BLOCK_N + tl.arange(0, BLOCK_N)
    col_ok = cols < width
    rs = tl.arange(0, BLOCK_R)
    r_ok = rs < R
    b = tl.load(b_ptr + slot.to(tl.int64) * stride_bs + cols[None, :] * stride_bn + rs[:, None],
                mask=r_ok[:, None] & col_ok[None, :], other=0.0).to(tl.float32)
    # Each output column belongs to one slice, whose R columns of xa it multiplies.
    slice_of = (cols >= off1).to(tl.int32) + (cols >= off2).to(tl.int32)
    acc = tl.zeros((BLOCK_M, BLOCK_N), dtype=tl.float32)
    xa_mask = row_ok[:, None] & r_ok[None, :]
    for i in tl.static_range(NUM_SLICES):
        xa_ptrs = part_ptr + tokens[:, None] * stride_pm + i * R + rs[None, :]
        xa = tl.load(xa_ptrs, mask=xa_mask, other=0.0)
        for s in tl.static_range(1, MAX_SPLITS):  # unrolled, predicated: the loads are issued together
            xa += tl.load(xa_ptrs + s * stride_ps, mask=xa_mask & (rs[None, :] * 0 + s < num_splits), other=0.0)
        if IEEE:
            part = tl.dot(xa, b, input_precision="ieee")
        else:
            part = tl.dot(xa, b)
        acc += tl.where((slice_of == i)[None, :], part, 0.0)
    mask = row_ok[:, None] & col_ok[None, :]
    ptrs = out_ptr + tokens[:, None] * stride_om + cols[None, :]
    current = tl.load(ptrs, mask=mask, other=0.0)
    tl.store(ptrs, (current.to(tl.float32) + acc).to(current.dtype), mask=mask)
