"""Captured device graphs of prefill and mixed prefill+decode steps, split around attention.

A decode step's attention has one fixed shape per batch size, so :mod:`infercore.worker.whole_graphs`
captures the whole forward pass; so it does for steps with prompt tokens when the attention backend
launches from padded counts alone (``captures_mixed_steps``). For other backends such a step's
attention launches depend on which requests it holds, how long their queries are and where they
start. So here the forward pass of ``T`` tokens is captured in pieces: everything between two
attention calls (norms, projections, MLPs, the residual stream) is one graph, and each layer's
attention call is left out and run eagerly with the step's own metadata between two replays. A step of ``t <= T`` tokens pads
its inputs to ``T`` (padding tokens have slot ``-1`` and belong to no request), so the linear layers
see the captured shape while attention sees exactly the step's requests.

Memory: every size shares one pool. After a size is captured, the tensors its attention calls read
and write are kept as aliases that do not hold their memory, so the next size (captured next into
the same pool) can reuse it; replays are never interleaved, so each replay finds its tensors where
its own pieces put them.
"""

from __future__ import annotations

import contextlib
import dataclasses
import logging
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

import torch

from infercore.forward_context import ForwardContext, get_forward_context, set_forward_context
from infercore.worker.whole_graphs import smallest_captured

logger = logging.getLogger(__name__)

#: Token counts of the captured sizes: steps of more tokens than the largest run eagerly (their
#: device time dwarfs the launches a graph saves); ``ModelConfig.max_mixed_graph_tokens`` is at most the last.
_SIZES = (16, 32, 64, 128, 192, 256, 320, 384, 448, 512, 640, 768, 896, 1024, 1280, 1536, 1792, 2048)

#: An attention call left out of the graphs: ``call(metadata, *tensors)``.
AttentionCall = Callable[..., None]


def mixed_capture_sizes(max_tokens: int, max_num_batched_tokens: int) -> list[int]:
    """Token counts to capture: the fixed ladder up to ``max_tokens`` and the step budget."""
    limit = min(max_tokens, max_num_batched_tokens)
    return [s for s in _SIZES if s <= limit]


@dataclass
class _Piece:
    """One captured graph and the attention call that follows it (None after the last piece)."""

    graph: Any
    call: AttentionCall | None
    tensors: tuple[torch.Tensor, ...]


class _PieceRecorder:
    """Captures one forward pass as a chain of graphs, ending one at each attention call."""

    def __init__(self, platform: Any, pool: Any) -> None:
        self.platform = platform
        self.pool = pool
        self.pieces: list[_Piece] = []
        self._graph: Any = None
        self._capture: contextlib.AbstractContextManager[None] | None = None

    def begin(self) -> None:
        self._graph = self.platform.new_graph()
        self._capture = self.platform.capture_graph(self._graph, self.pool)
        self._capture.__enter__()

    def _end(self, call: AttentionCall | None, tensors: tuple[torch.Tensor, ...]) -> None:
        assert self._capture is not None
        capture, self._capture = self._capture, None
        capture.__exit__(None, None, None)
        self.pieces.append(_Piece(self._graph, call, tensors))

    def split(self, call: AttentionCall, tensors: tuple[torch.Tensor, ...]) -> None:
        """The forward context's hook: close the current graph at an attention call, open the next."""
        self._end(call, tensors)
        self.begin()

    def finish(self) -> None:
        self._end(None, ())

    def abort(self) -> None:
        """End a capture that raised, so the device is not left capturing."""
        if self._capture is not None:
            capture, self._capture = self._capture, None
            with contextlib.suppress(Exception):
                capture.__exit__(RuntimeError, RuntimeError("capture aborted"), None)


def _alias(tensor: torch.Tensor) -> torch.Tensor:
    """A tensor over ``tensor``'s memory that does not keep that memory allocated.

    Built through the CUDA array interface (an unsigned integer type of the same width, viewed back
    as the tensor's dtype), so the caching allocator may hand the memory to the next size's capture.
    """
    item = tensor.element_size()
    interface = {
        "shape": tuple(tensor.shape),
        "strides": tuple(s * item for s in tensor.stride()),
        "typestr": f"<u{item}",
        "data": (tensor.data_ptr(), False),
        "version": 3,
    }
    holder = type("_DeviceMemory", (), {"__cuda_array_interface__": interface})()
    return torch.as_tensor(holder, device=tensor.device).view(tensor.dtype)


class MixedGraphs:
    """Piecewise-captured forward passes, one per token count; a step replays the smallest that fits."""

    def __init__(self, platform: Any, sizes: Sequence[int]) -> None:
        self.platform = platform
        self.sizes = sorted(sizes)
        self._captured: dict[int, tuple[list[_Piece], torch.Tensor]] = {}
        self._aliases = True

    def capture(self, run: Callable[[int], torch.Tensor], context: Callable[[int], ForwardContext],
                pool: Any) -> None:
        """Capture ``run(size)`` (the model on the step buffers' first ``size`` tokens) for every size,
        largest first, under ``context(size)`` (metadata for a warm-up pass that runs attention)."""
        started = time.perf_counter()
        for size in reversed(self.sizes):
            ctx = context(size)
            with set_forward_context(ctx):
                run(size)  # warm-up outside any graph: kernels built, workspaces allocated
            recorder = _PieceRecorder(self.platform, pool)
            split_ctx = dataclasses.replace(ctx, split_at_attention=recorder.split)
            try:
                with set_forward_context(split_ctx):
                    recorder.begin()
                    out = run(size)
                    recorder.finish()
            except BaseException:
                recorder.abort()
                raise
            self._captured[size] = (self._release(recorder.pieces), out)
        self.platform.synchronize()
        pieces = len(self._captured[self.sizes[-1]][0]) if self.sizes else 0
        logger.info("captured %d prefill/mixed graph sets (%d pieces each, %d..%d tokens) in %.1f s",
                    len(self._captured), pieces, self.sizes[0] if self.sizes else 0,
                    self.sizes[-1] if self.sizes else 0, time.perf_counter() - started)

    def _release(self, pieces: list[_Piece]) -> list[_Piece]:
        """Swap the attention calls' tensors for aliases, so the memory goes back to the shared pool."""
        if not self._aliases:
            return pieces
        try:
            return [_Piece(p.graph, p.call, tuple(_alias(t) for t in p.tensors)) for p in pieces]
        except (TypeError, ValueError, RuntimeError) as exc:
            # Without aliases every size keeps its own attention tensors: correct, with more memory.
            logger.warning("prefill/mixed graphs keep their attention tensors (%s)", exc)
            self._aliases = False
            return pieces

    def padded_size(self, num_tokens: int) -> int | None:
        """The captured size a step of ``num_tokens`` tokens pads to, or None if none fits."""
        return smallest_captured(self.sizes, self._captured, num_tokens)

    def replay(self, size: int) -> torch.Tensor:
        """Run the captured pieces of ``size`` with the step's attention between them; the forward
        context must hold this step's metadata."""
        pieces, out = self._captured[size]
        metadata = get_forward_context().attn_metadata
        for piece in pieces:
            piece.graph.replay()
            if piece.call is not None:
                piece.call(metadata, *piece.tensors)
        return out
