"""Batched LoRA (SGMV): the ``lora_shrink`` / ``lora_expand`` custom ops over tokens grouped by adapter slot.

The runner lists the step's tokens that have an adapter grouped by slot (``sorted_tokens``, with slot
``s``'s run at ``slot_starts[s]:slot_starts[s + 1]``), so a program multiplies ``BLOCK_M`` tokens of one
slot by that slot's matrices: one adapter per tile, as in Punica's SGMV, and no token computed twice.
The grid covers every slot and every possible tile; a program past its slot's run returns at once. The
runs are data, not launch parameters: a captured graph replays any mix of adapters, and nothing here
waits on the host.

``lora_shrink``: ``xa[t] = x[t] @ A[slot(t)]^T`` in float32 ([T, N*R]; zero for tokens without a slot).
``lora_expand``: ``out[t, slice i] += xa[t, i*R:(i+1)*R] @ B[slot(t), slice i]^T`` in place.
"""

from __future__ import annotations

import torch
import triton
import triton.language as tl


@triton.jit
def _shrink_kernel(x_ptr, a_ptr, out_ptr, sorted_ptr, starts_ptr, K, NR, stride_xm, stride_as, stride_an,
                   stride_om, BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr, BLOCK_K: tl.constexpr,
                   IEEE: tl.constexpr):
    pid_m, slot, pid_n = tl.program_id(0), tl.program_id(1), tl.program_id(2)
    start = tl.load(starts_ptr + slot)
    end = tl.load(starts_ptr + slot + 1)
    first = start + pid_m * BLOCK_M
    if first >= end:
        return
    rows = first + tl.arange(0, BLOCK_M)
    row_ok = rows < end
    tokens = tl.load(sorted_ptr + rows, mask=row_ok, other=0).to(tl.int64)
    cols = pid_n * BLOCK_N + tl.arange(0, BLOCK_N)
    col_ok = cols < NR
    acc = tl.zeros((BLOCK_M, BLOCK_N), dtype=tl.float32)
    a_base = a_ptr + slot.to(tl.int64) * stride_as
    for k in range(0, K, BLOCK_K):
        ks = k + tl.arange(0, BLOCK_K)
        k_ok = ks < K
        x = tl.load(x_ptr + tokens[:, None] * stride_xm + ks[None, :], mask=row_ok[:, None] & k_ok[None, :],
                    other=0.0)
        a = tl.load(a_base + cols[None, :] * stride_an + ks[:, None], mask=k_ok[:, None] & col_ok[None, :],
                    other=0.0)
        if IEEE:
            acc += tl.dot(x, a.to(x.dtype), input_precision="ieee")
        else:
            acc += tl.dot(x, a.to(x.dtype))
    tl.store(out_ptr + tokens[:, None] * stride_om + cols[None, :], acc, mask=row_ok[:, None] & col_ok[None, :])


@triton.jit
def _expand_kernel(out_ptr, xa_ptr, b_ptr, sorted_ptr, starts_ptr, width, R, off1, off2, stride_om, stride_xm,
                   stride_bs, stride_bn, NUM_SLICES: tl.constexpr, BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr,
                   BLOCK_R: tl.constexpr, IEEE: tl.constexpr):
    pid_m, slot, pid_n = tl.program_id(0), tl.program_id(1), tl.program_id(2)
    start = tl.load(starts_ptr + slot)
    end = tl.load(starts_ptr + slot + 1)
    first = start + pid_m * BLOCK_M
    if first >= end:
        return
    rows = first + tl.arange(0, BLOCK_M)
    row_ok = rows < end
    tokens = tl.load(sorted_ptr + rows, mask=row_ok, other=0).to(tl.int64)
    cols = pid_n * BLOCK_N + tl.arange(0, BLOCK_N)
    col_ok = cols < width
    rs = tl.arange(0, BLOCK_R)
    r_ok = rs < R
    b = tl.load(b_ptr + slot.to(tl.int64) * stride_bs + cols[None, :] * stride_bn + rs[:, None],
                mask=r_ok[:, None] & col_ok[None, :], other=0.0).to(tl.float32)
    # Each output column belongs to one slice, whose R columns of xa it multiplies.
    slice_of = (cols >= off1).to(tl.int32) + (cols >= off2).to(tl.int32)
    acc = tl.zeros((BLOCK_M, BLOCK_N), dtype=tl.float32)
    for i in tl.static_range(NUM_SLICES):
        xa = tl.load(xa_ptr + tokens[:, None] * stride_xm + i * R + rs[None, :], mask=row_ok[:, None] & r_ok[None, :],
                     other=0.0)
        if IEEE:
            part = tl.dot(xa, b, input_precision="ieee")
        else:
            part = tl.dot(xa, b)
        acc += tl.where((slice_of == i)[None, :], part, 0.0)
    mask = row_ok[:, None] & col_ok[None, :]
    ptrs = out_ptr + tokens[:, None] * stride_om + cols[None, :]
    current = tl.load(ptrs, mask=mask, other=0.0)
    tl.store(ptrs, (current.to(tl.float32) + acc).to(current.dtype), mask=mask)


def _block_m(num_tokens: int) -> int:
    """Tokens per tile: 16 for decode-sized steps (tl.dot's smallest), 64 for prompt-sized ones."""
    return 16 if num_tokens <= 256 else 64


def lora_shrink(x: torch.Tensor, lora_a: torch.Tensor, token_slots: torch.Tensor, sorted_tokens: torch.Tensor,
                slot_starts: torch.Tensor) -> torch.Tensor:
    """``x`` [T, in] → ``x @ lora_a[slot]^T`` [T, N*R] in float32 (zero without a slot); see the module."""
    x = x.contiguous()
    num_tokens, k = x.shape
    slots, nr = lora_a.shape[0], lora_a.shape[1]
    out = torch.zeros(num_tokens, nr, dtype=torch.float32, device=x.device)
    if num_tokens == 0:
        return out
    block_m = _block_m(num_tokens)
    block_n = max(16, min(64, triton.next_power_of_2(nr)))
    grid = (triton.cdiv(num_tokens, block_m), slots, triton.cdiv(nr, block_n))
    _shrink_kernel[grid](x, lora_a, out, sorted_tokens, slot_starts, k, nr, x.stride(0), lora_a.stride(0),
                         lora_a.stride(1), out.stride(0), BLOCK_M=block_m, BLOCK_N=block_n, BLOCK_K=64,
                         IEEE=x.dtype == torch.float32)
    return out


def lora_expand(out: torch.Tensor, xa: torch.Tensor, lora_b: torch.Tensor, token_slots: torch.Tensor,
                sorted_tokens: torch.Tensor, slot_starts: torch.Tensor, slice_offsets: tuple[int, ...]) -> None:
    """``out[:, slice i] += xa[:, i*R:(i+1)*R] @ lora_b[slot, slice i]^T`` in place; see the module."""
    num_slices = len(slice_offsets) - 1
    if num_slices > 3:
        raise ValueError(f"lora_expand takes at most 3 output slices (q/k/v), got {num_slices}")
    num_tokens, width = out.shape
    if num_tokens == 0:
        return
    if out.stride(1) != 1:
        raise ValueError("lora_expand writes into an output with contiguous rows")
    slots, rank = lora_b.shape[0], lora_b.shape[2]
    bounds = [*slice_offsets[1:num_slices], width, width][:2]
    block_m = _block_m(num_tokens)
    block_n = 64
    grid = (triton.cdiv(num_tokens, block_m), slots, triton.cdiv(width, block_n))
    _expand_kernel[grid](out, xa, lora_b, sorted_tokens, slot_starts, width, rank, bounds[0], bounds[1],
                         out.stride(0), xa.stride(0), lora_b.stride(0), lora_b.stride(1), NUM_SLICES=num_slices,
                         BLOCK_M=block_m, BLOCK_N=block_n, BLOCK_R=max(16, triton.next_power_of_2(rank)),
                         IEEE=out.dtype == torch.float32)
