"""The dummy step: one forward pass of a single throw-away token, for a data-parallel engine with no
work of its own while the others step.

With experts spread over every data-parallel engine's ranks, each MoE layer's token exchange is
collective over all engines, so every engine must run a forward pass on every step; an engine with
nothing scheduled runs this one. Its token is a one-token request at position 0 that reads the null
block and writes nowhere (slot -1), so no request's KV cache changes; nothing is sampled.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

import numpy as np
import torch

from infercore.forward_context import set_forward_context
from infercore.worker.batch_layout import make_layout

if TYPE_CHECKING:
    from infercore.worker.model_runner import ModelRunner


@torch.inference_mode()
def run_dummy_step(runner: ModelRunner) -> None:
    """One forward pass of one token through ``runner``'s model (its hidden state is dropped)."""
    layout = make_layout(np.zeros(1, dtype=np.int64), np.ones(1, dtype=np.int64), np.zeros(1, dtype=np.int64))
    slots = np.full(1, -1, dtype=np.int64)
    table = np.zeros((1, 1), dtype=np.int32)  # the null block: read, never written
    extra = runner.buffers.extra_groups
    buffers = runner.buffers
    buffers.swap()
    buffers.bind_general()
    meta = runner._fill(layout, np.zeros(1, dtype=np.int64), slots, table,
                        group_slots=[slots] * extra, group_tables=[table] * extra)
    if runner.lora is not None:
        runner.lora.state.set_step(np.full(1, -1, dtype=np.int32), 1)
    buffers.flush()
    with set_forward_context(runner._context(meta, 1)):
        runner.model(buffers.input_ids[:1], buffers.positions[:1])
