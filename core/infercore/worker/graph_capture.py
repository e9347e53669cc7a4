"""Capturing the runner's device graphs: decode steps whole, steps with prompt tokens whole or in pieces."""

from __future__ import annotations

import math
from typing import TYPE_CHECKING, Any

import numpy as np
import torch

from infercore.forward_context import ForwardContext
from infercore.worker.batch_layout import make_layout
from infercore.worker.lora_graphs import LoRAGraphs
from infercore.worker.mixed_graphs import MixedGraphs, mixed_capture_sizes
from infercore.worker.whole_graphs import WholeGraphs, capture_sizes, run_each_size

if TYPE_CHECKING:
    from infercore.worker.model_runner import ModelRunner


@torch.inference_mode()
def capture_mixed_graphs(runner: ModelRunner, pool: Any, eager_only: bool = False
                         ) -> WholeGraphs | MixedGraphs | None:
    """Graphs of steps with prompt tokens, for token counts up to ``max_mixed_graph_tokens``: whole
    when the attention backend allows it, else in pieces around attention (None: no size fits). With
    ``eager_only``, each size's pass runs once, uncaptured, and nothing is kept (None)."""
    prompt_len = runner.max_model_len
    sizes = [s for s in mixed_capture_sizes(runner.config.model.max_mixed_graph_tokens, runner.max_num_tokens)
             if math.ceil(s / prompt_len) <= runner.max_num_reqs]
    if not sizes:
        return None
    whole = runner.mixed_graphs_whole
    graphs = WholeGraphs(runner.platform, sizes, "prefill/mixed") if whole else MixedGraphs(runner.platform, sizes)

    def context(size: int) -> ForwardContext:
        # Prompts that write nowhere (slot -1) and read the null block: the warm-up pass runs attention.
        lengths = np.full(math.ceil(size / prompt_len), prompt_len, dtype=np.int64)
        lengths[-1] = size - prompt_len * (len(lengths) - 1)
        layout = make_layout(np.arange(len(lengths)), lengths, np.zeros(len(lengths), dtype=np.int64))
        table = np.zeros((len(lengths), math.ceil(int(lengths.max()) / runner.block_size)), dtype=np.int32)
        common = runner._fill(layout, np.zeros(size, dtype=np.int64), np.full(size, -1, dtype=np.int64), table,
                              pad_reqs_to=runner.mixed_graph_reqs(size) if whole else None)
        return runner._context(common, size)

    buf = runner.buffers

    def run(size: int) -> torch.Tensor:
        return runner.model(buf.input_ids[:size], buf.positions[:size])

    if eager_only:
        run_each_size(sizes, run, context)
        return None
    graphs.capture(run, context, pool)
    return graphs


@torch.inference_mode()
def capture_decode_graphs(runner: ModelRunner, pool: Any, eager_only: bool = False
                          ) -> WholeGraphs | LoRAGraphs | None:
    """A whole graph per decode batch size, each on that size's arena views (ending with the LM head
    when ``runner.logits_in_decode_graphs``); serving LoRA, each size twice, with the LoRA kernels and
    without (:class:`LoRAGraphs`). With ``eager_only``, each pass runs once, uncaptured, and nothing is
    kept (None)."""
    graphs = WholeGraphs(runner.platform, capture_sizes(runner.max_num_reqs))
    buf, width = runner.buffers, runner.max_blocks_per_req

    def context(size: int) -> ForwardContext:
        # The graph of each size reads that size's decode layout, as its steps will fill it.
        buf.bind_decode(size, width)
        buf.pad(0, 0, size)
        buf.np_seq_lens[:size] = 1
        buf.upload(size, size, width)
        buf.flush()
        return runner._context(runner._metadata(size, size, 1, 1, width), size)

    def run(size: int) -> torch.Tensor:
        hidden = runner.model(buf.input_ids[:size], buf.positions[:size])
        return runner.model.compute_logits(hidden) if runner.logits_in_decode_graphs else hidden

    if eager_only:
        try:
            run_each_size(graphs.sizes, run, context)
            if runner.lora is not None:
                runner.lora.state.active = False
                run_each_size(graphs.sizes, run, context)
        finally:
            if runner.lora is not None:
                runner.lora.state.active = True
            buf.bind_general()
        return None
    graphs.capture(run, context, pool)
    if runner.lora is not None:
        without = WholeGraphs(runner.platform, capture_sizes(runner.max_num_reqs), "decode (no adapter)")
        state = runner.lora.state
        state.active = False  # the wrapped linears launch nothing while it is captured
        without.capture(run, context, pool)
        state.active = True
        buf.bind_general()
        return LoRAGraphs(graphs, without, state)
    buf.bind_general()
    return graphs
