"""Captured device graphs of whole forward passes: one per batch size of pure-decode steps and, when the
attention backend launches from padded counts (``captures_mixed_steps``), one per token count of steps
with prompt tokens."""

from __future__ import annotations

import logging
import time
from collections.abc import Callable, Container
from typing import Any

import torch

from infercore.forward_context import ForwardContext, set_forward_context

logger = logging.getLogger(__name__)


def capture_sizes(max_num_seqs: int) -> list[int]:
    """Batch sizes to capture: 1, 2, 4, 8, then every 16 up to ``max_num_seqs``."""
    sizes = [s for s in (1, 2, 4, 8) if s <= max_num_seqs]
    sizes += list(range(16, max_num_seqs + 1, 16))
    if sizes[-1] != max_num_seqs:
        sizes.append(max_num_seqs)
    return sizes


def run_each_size(sizes: list[int], run: Callable[[int], torch.Tensor],
                  context: Callable[[int], ForwardContext]) -> None:
    """``run(size)`` once for each size, largest first, under ``context(size)``: a capture's passes, uncaptured
    (for building their kernels ahead: see :meth:`~infercore.platforms.interface.Platform.kernel_builds_ahead`)."""
    for size in sorted(sizes, reverse=True):
        with set_forward_context(context(size)):
            run(size)


def smallest_captured(sizes: list[int], captured: Container[int], wanted: int) -> int | None:
    """The smallest of ``sizes`` (ascending) that holds ``wanted``, if it was captured; else None."""
    for size in sizes:
        if size >= wanted:
            return size if size in captured else None
    return None


class WholeGraphs:
    """One captured forward pass per size; a step replays the smallest size that fits it.

    Capturing reads the step buffers and the attention metadata through their persistent device
    tensors, so a replay after the runner refills them computes the new step. ``kind`` names the
    steps in the log ("decode": sizes are batch sizes; "prefill/mixed": token counts).
    """

    def __init__(self, platform: Any, sizes: list[int], kind: str = "decode") -> None:
        self.platform = platform
        self.sizes = sorted(sizes)
        self.kind = kind
        self.graphs: dict[int, tuple[Any, torch.Tensor]] = {}

    def capture(self, run: Callable[[int], torch.Tensor], context: Callable[[int], ForwardContext],
                pool: Any = None) -> None:
        """Capture ``run(size)`` for every size, largest first so smaller ones reuse its memory pool
        (``pool``, shared with other graphs, or a new one)."""
        started = time.perf_counter()
        pool = pool if pool is not None else self.platform.graph_pool_handle()
        for size in reversed(self.sizes):
            ctx = context(size)
            with set_forward_context(ctx):
                run(size)  # warm-up outside the graph: lazy kernel compilation, workspace allocation
                graph = self.platform.new_graph()
                with self.platform.capture_graph(graph, pool):
                    out = run(size)
            self.graphs[size] = (graph, out)
        self.platform.synchronize()
        unit = "batch sizes" if self.kind == "decode" else "tokens"
        logger.info("captured %d whole %s graphs (%s %d..%d) in %.1f s", len(self.graphs), self.kind, unit,
                    self.sizes[0], self.sizes[-1], time.perf_counter() - started)

    def padded_size(self, wanted: int) -> int | None:
        """The captured size a step of ``wanted`` decodes (or tokens) pads to, or None if none fits."""
        return smallest_captured(self.sizes, self.graphs, wanted)

    def replay(self, size: int) -> torch.Tensor:
        graph, out = self.graphs[size]
        graph.replay()
        return out
