"""Torch references of the batched LoRA ops: each token multiplies by the A and B of its adapter slot.
The layers run ``lora_apply`` (shrink and expand in one op); ``lora_shrink`` / ``lora_expand`` are its halves.

``token_slots[t]`` is token ``t``'s slot (-1: none). ``sorted_tokens`` / ``slot_starts`` list the same
tokens grouped by slot (slot ``s``'s are ``sorted_tokens[slot_starts[s]:slot_starts[s + 1]]``); the
references ignore them, grouped kernels (SGMV) read them instead of ``token_slots``. Every input is a
device tensor of fixed address, so a captured graph replays any mix of adapters.
"""

from __future__ import annotations

import torch


def lora_shrink(x: torch.Tensor, lora_a: torch.Tensor, token_slots: torch.Tensor, sorted_tokens: torch.Tensor,
                slot_starts: torch.Tensor) -> torch.Tensor:
    """``x`` [T, in] → ``x @ lora_a[slot]^T`` [T, N*R] in float32 (zero for tokens without a slot);
    ``lora_a`` is [slots, N*R, in]: the A of each of N output slices, rank-padded to R."""
    xf = x.float()
    out = torch.zeros(x.shape[0], lora_a.shape[1], dtype=torch.float32, device=x.device)
    for slot in range(lora_a.shape[0]):
        mine = (token_slots == slot).unsqueeze(1)
        out += torch.where(mine, xf @ lora_a[slot].float().t(), 0.0)
    return out


def lora_expand(out: torch.Tensor, xa: torch.Tensor, lora_b: torch.Tensor, token_slots: torch.Tensor,
                sorted_tokens: torch.Tensor, slot_starts: torch.Tensor, slice_offsets: tuple[int, ...]) -> None:
    """``out[:, slice i] += xa[:, i*R:(i+1)*R] @ lora_b[slot, slice i]^T`` in place, for every token with a
    slot; ``lora_b`` is [slots, out, R] (the scaling folded in), ``slice_offsets`` the N+1 slice bounds."""
    rank = lora_b.shape[2]
    delta = torch.zeros(out.shape, dtype=torch.float32, device=out.device)
    for slot in range(lora_b.shape[0]):
        mine = (token_slots == slot).unsqueeze(1)
        for i in range(len(slice_offsets) - 1):
            lo, hi = slice_offsets[i], slice_offsets[i + 1]
            part = xa[:, i * rank:(i + 1) * rank] @ lora_b[slot, lo:hi].float().t()
            delta[:, lo:hi] += torch.where(mine, part, 0.0)
    out.copy_((out.float() + delta).to(out.dtype))


def lora_apply(out: torch.Tensor, x: torch.Tensor, lora_a: torch.Tensor, lora_b: torch.Tensor,
               token_slots: torch.Tensor, sorted_tokens: torch.Tensor, tiles: torch.Tensor, tile_rows: int,
               slice_offsets: tuple[int, ...]) -> torch.Tensor:
    """``out[t, slice i] += (x[t] @ lora_a[slot, i*R:(i+1)*R]^T) @ lora_b[slot, slice i]^T`` in place for
    every token ``t`` with a slot (``x @ A^T`` kept in float32); returns ``out``.

    ``sorted_tokens`` / ``tiles`` / ``tile_rows`` are the same tokens grouped by slot
    (``infercore.lora.step_state.group_by_slot``: tile ``j`` is slot ``tiles[j, 0]``'s tokens
    ``sorted_tokens[tiles[j, 1]:tiles[j, 2]]``, at most ``tile_rows`` of them; slot -1: no tile), for
    grouped kernels; the reference reads ``token_slots`` alone.
    """
    rank, slots = lora_b.shape[2], token_slots.long()
    for slot in torch.unique(slots[slots >= 0]).tolist():  # only the slots the step's tokens use
        rows = torch.nonzero(slots == slot).squeeze(1)
        xa = x.index_select(0, rows).float() @ lora_a[slot].float().t()
        delta = torch.zeros(len(rows), out.shape[1], dtype=torch.float32, device=out.device)
        for i in range(len(slice_offsets) - 1):
            lo, hi = slice_offsets[i], slice_offsets[i + 1]
            delta[:, lo:hi] = xa[:, i * rank:(i + 1) * rank] @ lora_b[slot, lo:hi].float().t()
        out.index_copy_(0, rows, (out.index_select(0, rows).float() + delta).to(out.dtype))
    return out


def lora_linear(x: torch.Tensor, weight: torch.Tensor, bias: torch.Tensor | None, lora_a: torch.Tensor,
                lora_b: torch.Tensor, token_slots: torch.Tensor, sorted_tokens: torch.Tensor, tiles: torch.Tensor,
                tile_rows: int, slice_offsets: tuple[int, ...], gated: bool = False) -> torch.Tensor:
    """A LoRA-wrapped linear whole: ``y = act @ weight^T + bias``, then ``lora_apply(y, act, ...)``, where
    ``act`` is ``x`` or, with ``gated``, ``silu(gate) * up`` of ``x = cat(gate, up)`` (a SwiGLU's down
    projection, as ``silu_and_mul_linear`` takes it); returns ``y``. A platform may run the product and the
    adapter term in one kernel (rounding once, not after the product and again after the term)."""
    if gated:
        gate, up = x.chunk(2, dim=-1)
        act = torch.nn.functional.silu(gate) * up
    else:
        act = x
    out = torch.nn.functional.linear(act, weight, bias)
    return lora_apply(out, act, lora_a, lora_b, token_slots, sorted_tokens, tiles, tile_rows, slice_offsets)
