"""The per-step LoRA inputs every wrapped linear reads, built once per step on the host: each token's
adapter slot (the per-row (BGMV) kernels read it), and the same tokens grouped by slot and cut into tiles
of at most ``tile_rows`` tokens of one slot (the grouped (SGMV) kernels read those). Device tensors of
fixed address, so captured graphs replay any mix of adapters; nothing here waits on the device."""

from __future__ import annotations

from typing import NamedTuple

import numpy as np
import torch


def tile_rows(num_tokens: int) -> int:
    """Tokens per grouped tile for a step of ``num_tokens`` (padded) tokens: small tiles for decode-sized
    steps, where few tokens share an adapter, larger ones for prompt-sized steps."""
    return 16 if num_tokens <= 128 else 32 if num_tokens <= 512 else 64


def max_tiles(num_tokens: int, max_loras: int) -> int:
    """The most tiles ``num_tokens`` tokens over ``max_loras`` slots can take (each slot's last tile may be
    partial): the grid a grouped kernel launches for the step, fixed by the token count alone."""
    return -(-num_tokens // tile_rows(num_tokens)) + min(max_loras, num_tokens)


def group_by_slot(slots: np.ndarray, max_loras: int, rows: int) -> tuple[np.ndarray, np.ndarray]:
    """``slots`` (a slot per token, -1: none) → (``sorted_tokens``: the tokens with a slot, by slot, in
    token order within a slot; ``tiles`` [n, 3]: slot, first and end index into ``sorted_tokens`` of each
    tile of at most ``rows`` tokens of one slot)."""
    slots = np.asarray(slots)
    n = len(slots)
    order = np.argsort(slots, kind="stable")
    counts = np.bincount(slots[slots >= 0], minlength=max_loras)[:max_loras]
    with_slot = int(counts.sum())
    starts = np.zeros(max_loras + 1, dtype=np.int64)
    np.cumsum(counts, out=starts[1:])
    per_slot = -(-counts // rows)
    tile_slot = np.repeat(np.arange(max_loras), per_slot)
    first_tile = np.repeat(np.cumsum(per_slot) - per_slot, per_slot)
    first = starts[tile_slot] + (np.arange(len(tile_slot)) - first_tile) * rows
    tiles = np.stack([tile_slot, first, np.minimum(first + rows, starts[tile_slot + 1])], axis=1)
    return order[n - with_slot:].astype(np.int32), tiles.astype(np.int32)


class LoRAStep(NamedTuple):
    """What a wrapped linear of a ``T``-token step hands to the ``lora_apply`` op (views made once per size)."""

    token_slots: torch.Tensor
    sorted_tokens: torch.Tensor
    tiles: torch.Tensor
    tile_rows: int


class LoRAStepState:
    """``token_slots[:T]`` (-1: no adapter), ``sorted_tokens`` and ``tiles`` (see :func:`group_by_slot`;
    tiles past the step's count have slot -1) for the step's ``T`` (padded) tokens.

    :meth:`set_step` computes them on the host and copies them without blocking; two host sets alternate,
    so a step is prepared while the previous step's copy is queued. ``active`` is whether any token of the
    step has an adapter: a step without one launches no LoRA kernel at all (when it runs eagerly). It is
    True until the first step, so the warm-up and graph capture run, and record, the kernels.
    """

    def __init__(self, max_tokens: int, max_loras: int, device: torch.device, pin: bool) -> None:
        self.max_loras = max_loras
        self.same = device.type == "cpu"
        self.active = True
        capacity = -(-max_tokens // 16) + min(max_loras, max_tokens)  # max_tiles' bound for any count
        pin = pin and not self.same

        def make() -> list[torch.Tensor]:
            return [torch.full((max_tokens,), -1, dtype=torch.int32, pin_memory=pin),
                    torch.zeros(max_tokens, dtype=torch.int32, pin_memory=pin),
                    torch.full((capacity, 3), -1, dtype=torch.int32, pin_memory=pin)]

        self._hosts = [make()] if self.same else [make(), make()]
        device_set = self._hosts[0] if self.same else [t.to(device) for t in self._hosts[0]]
        self.token_slots, self.sorted_tokens, self.tiles = device_set
        self._views: dict[int, LoRAStep] = {}
        self._active = 0

    def step_for(self, num_tokens: int) -> LoRAStep | None:
        """The op inputs of a ``num_tokens``-token step, or None when no token of the step has an adapter."""
        if not self.active:
            return None
        step = self._views.get(num_tokens)
        if step is None:
            step = LoRAStep(self.token_slots[:num_tokens], self.sorted_tokens[:num_tokens],
                            self.tiles[: max_tiles(num_tokens, self.max_loras)], tile_rows(num_tokens))
            self._views[num_tokens] = step
        return step

    def set_step(self, slots: np.ndarray, padded: int) -> None:
        """Take the step's per-token ``slots`` (batch order); tokens ``len(slots):padded`` are padding."""
        self._active = (self._active + 1) % len(self._hosts)
        token_slots, sorted_tokens, tiles = self._hosts[self._active]
        n = len(slots)
        np_slots = token_slots.numpy()
        np_slots[:n] = slots
        np_slots[n:padded] = -1
        self.active = bool((slots >= 0).any())
        sorted_np, tiles_np = group_by_slot(slots, self.max_loras, tile_rows(padded))
        bound = max_tiles(padded, self.max_loras)
        with_slot, count = len(sorted_np), len(tiles_np)
        sorted_tokens.numpy()[:with_slot] = sorted_np
        host_tiles = tiles.numpy()
        host_tiles[:count] = tiles_np
        host_tiles[count:bound] = -1
        if self.same:
            return
        self.token_slots[:padded].copy_(token_slots[:padded], non_blocking=True)
        if with_slot:
            self.sorted_tokens[:with_slot].copy_(sorted_tokens[:with_slot], non_blocking=True)
        self.tiles[:bound].copy_(tiles[:bound], non_blocking=True)
