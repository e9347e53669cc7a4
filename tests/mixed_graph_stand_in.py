"""A stand-in for :class:`infercore.worker.mixed_graphs.MixedGraphs` on machines without device graphs.

It pads every step with prompt tokens to the next multiple of 16 tokens and runs the model eagerly on
the padded inputs, handing each attention call through the forward context's ``split_at_attention``
hook as a piecewise capture does. Install it with :func:`install`.
"""

from __future__ import annotations

import dataclasses
from typing import Any

import torch

from infercore.forward_context import get_forward_context, set_forward_context


class PaddingStandIn:
    """Pads steps to multiples of 16 tokens and runs attention through the split hook, eagerly."""

    def __init__(self, model: Any, buffers: Any) -> None:
        self.model = model
        self.buffers = buffers
        self.replayed: list[int] = []
        self.split_calls = 0

    def padded_size(self, num_tokens: int) -> int | None:
        return -(-num_tokens // 16) * 16

    def _split(self, call: Any, tensors: tuple[torch.Tensor, ...]) -> None:
        self.split_calls += 1
        call(get_forward_context().attn_metadata, *tensors)

    def replay(self, size: int) -> torch.Tensor:
        self.replayed.append(size)
        ctx = dataclasses.replace(get_forward_context(), split_at_attention=self._split)
        with set_forward_context(ctx):
            return self.model(self.buffers.input_ids[:size], self.buffers.positions[:size])


def install(llm: Any) -> PaddingStandIn:
    """Put a stand-in in place of the mixed graphs of ``llm``'s (in-process) runner."""
    runner = llm.llm_engine.engine_core.executor.runner
    stand_in = PaddingStandIn(runner.model, runner.buffers)
    runner.mixed_graphs = stand_in
    return stand_in
