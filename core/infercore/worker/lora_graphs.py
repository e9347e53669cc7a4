"""Decode graphs of an engine serving LoRA: each size captured with the LoRA kernels and without them."""

from __future__ import annotations

import torch

from infercore.lora.step_state import LoRAStepState
from infercore.worker.whole_graphs import WholeGraphs


class LoRAGraphs:
    """A :class:`WholeGraphs` pair behind WholeGraphs' step interface: a step where a token has an adapter
    replays ``with_lora`` (the slots are data in the step's buffers), one where none has replays
    ``without_lora``, which holds no LoRA kernel at all, so base-model traffic pays nothing for LoRA."""

    def __init__(self, with_lora: WholeGraphs, without_lora: WholeGraphs, state: LoRAStepState) -> None:
        self.with_lora = with_lora
        self.without_lora = without_lora
        self.state = state

    def padded_size(self, wanted: int) -> int | None:
        """The captured size a step of ``wanted`` decodes pads to, or None if none fits."""
        return self.with_lora.padded_size(wanted)

    def replay(self, size: int) -> torch.Tensor:
        """Replay the graph of ``size`` that fits the step set last (``LoRAStepState.active``)."""
        return (self.with_lora if self.state.active else self.without_lora).replay(size)
