"""A stand-in for the runner's decode graphs on machines without device graphs."""

from __future__ import annotations

from typing import Any

import torch

from infercore.forward_context import set_forward_context
from infercore.worker.whole_graphs import capture_sizes, smallest_captured


class DecodeGraphStandIn:
    """Pads decode steps to capture sizes and runs them eagerly on the bound decode layout's views,
    reading them as a replayed graph does (its attention metadata built from those views), and ends
    with the LM head as the runner's decode graphs do."""

    def __init__(self, runner: Any) -> None:
        self.runner = runner
        self.sizes = capture_sizes(runner.max_num_reqs)
        self.replayed: list[int] = []

    def padded_size(self, num_reqs: int) -> int | None:
        return smallest_captured(self.sizes, self.sizes, num_reqs)

    def replay(self, size: int) -> torch.Tensor:
        runner, buf = self.runner, self.runner.buffers
        assert buf.decode_shape == (size, runner.max_blocks_per_req)
        self.replayed.append(size)
        common = runner._metadata(size, size, 1, int(buf.np_seq_lens[:size].max()), runner.max_blocks_per_req)
        with set_forward_context(runner._context(common, size)):
            hidden = runner.model(buf.input_ids[:size], buf.positions[:size])
        return runner.model.compute_logits(hidden) if runner.logits_in_decode_graphs else hidden


def install(llm: Any) -> DecodeGraphStandIn:
    """Put a stand-in in place of the decode graphs of ``llm``'s (in-process) runner."""
    runner = llm.llm_engine.engine_core.executor.runner
    runner.graphs = DecodeGraphStandIn(runner)
    return runner.graphs
