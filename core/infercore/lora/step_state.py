"""The per-step LoRA inputs every wrapped linear reads: each token's adapter slot, and the same tokens
grouped by slot for the grouped (SGMV) kernels. Device tensors of fixed address, so graphs replay them."""

from __future__ import annotations

import numpy as np
import torch


class LoRAStepState:
    """``token_slots[:T]`` (-1: no adapter), ``sorted_tokens[:n]`` (the tokens that have a slot, by slot) and
    ``slot_starts`` (slot ``s``'s tokens are ``sorted_tokens[slot_starts[s]:slot_starts[s + 1]]``).

    :meth:`set_step` computes them on the host from the step's per-token slots and copies them without
    blocking; two host sets alternate, so a step is prepared while the previous step's copy is queued.
    """

    def __init__(self, max_tokens: int, max_loras: int, device: torch.device, pin: bool) -> None:
        self.max_loras = max_loras
        self.same = device.type == "cpu"

        def make() -> list[torch.Tensor]:
            return [torch.full((max_tokens,), -1, dtype=torch.int32, pin_memory=pin and not self.same),
                    torch.zeros(max_tokens, dtype=torch.int32, pin_memory=pin and not self.same),
                    torch.zeros(max_loras + 1, dtype=torch.int32, pin_memory=pin and not self.same)]

        self._hosts = [make()] if self.same else [make(), make()]
        device_set = self._hosts[0] if self.same else [t.to(device) for t in self._hosts[0]]
        self.token_slots, self.sorted_tokens, self.slot_starts = device_set
        self._active = 0

    def set_step(self, slots: np.ndarray, padded: int) -> None:
        """Take the step's per-token ``slots`` (batch order); tokens ``len(slots):padded`` are padding."""
        self._active = (self._active + 1) % len(self._hosts)
        token_slots, sorted_tokens, slot_starts = self._hosts[self._active]
        n = len(slots)
        np_slots = token_slots.numpy()
        np_slots[:n] = slots
        np_slots[n:padded] = -1
        order = np.argsort(slots, kind="stable")
        counts = np.bincount(slots[slots >= 0], minlength=self.max_loras)
        with_slot = int(counts.sum())
        sorted_tokens.numpy()[:with_slot] = order[n - with_slot:]
        starts = slot_starts.numpy()
        starts[0] = 0
        np.cumsum(counts, out=starts[1:])
        if self.same:
            return
        self.token_slots[:padded].copy_(token_slots[:padded], non_blocking=True)
        if with_slot:
            self.sorted_tokens[:with_slot].copy_(sorted_tokens[:with_slot], non_blocking=True)
        self.slot_starts.copy_(slot_starts, non_blocking=True)
