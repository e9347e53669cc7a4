"""The draft's catch-up pass as whole captured graphs, for attention backends that launch steps with
prompt tokens from padded counts alone (``AttentionBackend.captures_mixed_steps``).

A catch-up of ``t`` tokens over ``n`` requests pads to the smallest captured token count ``S >= t`` whose
request count ``min(S, max_rows)`` holds ``n``: padding tokens are token 0 at position 0 written nowhere
(slot -1), padding requests have no query tokens and no context, as the target's whole mixed graphs
(``CommonAttentionMetadata.padded_for_graph``). The inputs go up in two copies (per token, per request)
into static staging buffers, which the graph itself unpacks into the model's inputs, then one replay:
inputs the device holds (each request's last token, fed tokens) overwrite the staging first. Larger
catch-ups (a prompt chunk's) run eagerly.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

import numpy as np
import torch

from infercore.attention.backend import CommonAttentionMetadata
from infercore.forward_context import ForwardContext, set_forward_context
from infercore.spec_decode.draft_parallel import tensor_parallel_size

if TYPE_CHECKING:
    from infercore.worker.draft_runner import DraftRunner

logger = logging.getLogger(__name__)

#: ``(input_ids [T], positions [T], target_rows [T], last [N]) -> (hidden [N, H], draft token ids [N])``.
CatchUpFn = Callable[[torch.Tensor, torch.Tensor, torch.Tensor, torch.Tensor], tuple[torch.Tensor, torch.Tensor]]
#: ``write_kv(input_ids, positions, target_rows)``: a catch-up's K/V cache entries alone (``ModelProposer.write_kv``).
WriteKVFn = Callable[[torch.Tensor, torch.Tensor, torch.Tensor], None]

#: ``(flat token index, input id)`` pairs on the device that overwrite the host's inputs of a catch-up.
Feed = tuple[torch.Tensor, torch.Tensor]

#: Token counts captured: a decode step's catch-up is ``sum(accepted + 2)`` tokens.
SIZES = (8, 16, 32, 64, 128, 256)


class CatchUpGraphs:
    """Static buffers and one whole graph per token count of the draft's catch-up pass."""

    def __init__(self, runner: DraftRunner, fn: CatchUpFn, max_rows: int, max_tokens: int) -> None:
        self.runner, self.fn = runner, fn
        device, groups = runner.device, len(runner.group_of)
        self.sizes = [s for s in SIZES if s <= max_tokens] or [max_tokens]
        self.max_rows = max_rows
        top, width = self.sizes[-1], runner.target.max_blocks_per_req
        self.width = width
        i64, i32 = torch.int64, torch.int32
        self.ids = torch.zeros(top, dtype=i64, device=device)
        self.positions = torch.zeros(top, dtype=i64, device=device)
        self.target_rows = torch.zeros(top, dtype=i64, device=device)
        self.slots = torch.full((groups, top), -1, dtype=i64, device=device)
        reqs = min(top, max_rows)
        self.last = torch.zeros(reqs, dtype=i64, device=device)
        self.query_start_loc = torch.zeros(reqs + 1, dtype=i32, device=device)
        self.seq_lens = torch.zeros(reqs, dtype=i32, device=device)
        self.tables = torch.zeros((groups, reqs, width), dtype=i32, device=device)
        pin = runner.target.platform.capabilities.pin_memory and device.type != "cpu"
        # Staging, on the host and on the device: per token its id, position, target row and slot per group;
        # per request its query start (one more row), context length and last token (flat).
        self._host_tokens = torch.zeros((top, 3 + groups), dtype=i64, pin_memory=pin)
        self._host_reqs = torch.zeros((reqs + 1, 3), dtype=i32, pin_memory=pin)
        self.staged_tokens = torch.zeros((top, 3 + groups), dtype=i64, device=device)
        self.staged_reqs = torch.zeros((reqs + 1, 3), dtype=i32, device=device)
        self._host_tables = torch.zeros((groups, reqs, width), dtype=i32, pin_memory=pin)
        self.graphs: dict[int, tuple[Any, tuple[torch.Tensor, torch.Tensor]]] = {}

    def _requests(self, size: int) -> int:
        return min(size, self.max_rows)

    def _context(self, size: int) -> ForwardContext:
        reqs = self._requests(size)
        metas = [CommonAttentionMetadata(
            num_reqs=reqs, num_actual_tokens=size, max_query_len=size, max_seq_len=size,
            query_start_loc=self.query_start_loc[: reqs + 1], seq_lens=self.seq_lens[:reqs],
            block_table=self.tables[g, :reqs], slot_mapping=self.slots[g, :size],
            query_start_loc_cpu=torch.zeros(reqs + 1, dtype=torch.int32), seq_lens_cpu=torch.zeros(reqs, dtype=torch.int32),
            padded_for_graph=True, max_verify_len=self.runner.max_verify_len) for g in range(len(self.runner.group_of))]
        built = [builder.build(meta) for builder, meta in zip(self.runner.builders, metas, strict=True)]
        return ForwardContext(built[0], size, group_attn_metadata=tuple(built[1:]))

    def _run(self, size: int) -> tuple[torch.Tensor, torch.Tensor]:
        reqs = self._requests(size)
        return self.fn(self.ids[:size], self.positions[:size], self.target_rows[:size], self.last[:reqs])

    def _unpack_and_run(self, size: int) -> tuple[torch.Tensor, torch.Tensor]:
        """What a graph holds: the staged inputs copied into the model's, then the pass."""
        reqs = self._requests(size)
        tokens, requests = self.staged_tokens[:size], self.staged_reqs[: reqs + 1]
        self.ids[:size].copy_(tokens[:, 0])
        self.positions[:size].copy_(tokens[:, 1])
        self.target_rows[:size].copy_(tokens[:, 2])
        self.slots[:, :size].copy_(tokens[:, 3:].t())
        self.query_start_loc[: reqs + 1].copy_(requests[:, 0])
        self.seq_lens[:reqs].copy_(requests[:reqs, 1])
        self.last[:reqs].copy_(requests[:reqs, 2])
        return self._run(size)

    @torch.inference_mode()
    def capture(self, pool: Any = None) -> None:
        """One graph per size, largest first; captured on one request holding every token (reading the
        null block, writing nowhere) beside query-less ones."""
        platform = self.runner.target.platform
        started = time.perf_counter()
        pool = pool if pool is not None else platform.graph_pool_handle()
        with tensor_parallel_size(self.runner.draft_tp):
            for size in reversed(self.sizes):
                reqs = self._requests(size)
                self.staged_tokens.zero_()
                self.staged_tokens[:, 3:] = -1
                self.staged_reqs.zero_()
                self.staged_reqs[1: reqs + 1, 0] = size
                self.staged_reqs[0, 1] = size
                with set_forward_context(self._context(size)):
                    self._unpack_and_run(size)
                    graph = platform.new_graph()
                    with platform.capture_graph(graph, pool):
                        out = self._unpack_and_run(size)
                self.graphs[size] = (graph, out)
        platform.synchronize()
        logger.info("captured %d draft catch-up graphs (%d..%d tokens) in %.1f s", len(self.graphs),
                    self.sizes[0], self.sizes[-1], time.perf_counter() - started)

    def size_for(self, num_tokens: int, num_rows: int) -> int | None:
        """The captured size a catch-up of ``num_tokens`` tokens over ``num_rows`` requests replays."""
        for size in self.sizes:
            if size >= num_tokens and size in self.graphs:
                return size if self._requests(size) >= num_rows else None
        return None

    def replay(self, size: int, rows: np.ndarray, query_lens: np.ndarray, seq_lens: np.ndarray,
               positions: np.ndarray, input_ids: np.ndarray, target_rows: np.ndarray, ends: np.ndarray,
               ends_dev: torch.Tensor | None = None, feed: Feed | None = None) -> tuple[torch.Tensor, torch.Tensor]:
        """The catch-up of batch rows ``rows`` from the graph of ``size``: hidden states and draft tokens
        at each request's last token (``ends``, or ``ends_dev`` on the device), one per request in order;
        ``feed`` overwrites some tokens' inputs on the device."""
        runner = self.runner
        n, t, reqs = len(rows), len(positions), self._requests(size)
        tokens = self._host_tokens.numpy()  # token-major, so the first ``size`` rows are one copy
        tokens[t:size] = 0
        tokens[:t, 0], tokens[:t, 1], tokens[:t, 2] = input_ids, positions, target_rows
        table = runner.target.input_batch.block_table
        token_rows = np.repeat(rows, query_lens)
        tables = self._host_tables.numpy()
        for gi, g in enumerate(runner.group_of):
            blocks = table[token_rows, (positions // runner.block_size) * runner.stride + g].astype(np.int64)
            tokens[:t, 3 + gi] = blocks * runner.block_size + positions % runner.block_size
            tokens[t:size, 3 + gi] = -1
            tables[gi, :n] = table[rows, : self.width * runner.stride][:, g::runner.stride]
        req = self._host_reqs.numpy()
        req[0, 0] = 0
        req[1: n + 1, 0] = np.cumsum(query_lens)
        req[n + 1: reqs + 1, 0] = t
        req[:n, 1] = seq_lens
        req[n:reqs, 1] = 0
        req[:n, 2] = ends
        req[n:reqs, 2] = 0
        self.staged_tokens[:size].copy_(self._host_tokens[:size], non_blocking=True)
        self.staged_reqs[: reqs + 1].copy_(self._host_reqs[: reqs + 1], non_blocking=True)
        self.tables[:, :reqs].copy_(self._host_tables[:, :reqs], non_blocking=True)
        if ends_dev is not None:
            self.staged_reqs[:n, 2].copy_(ends_dev)
        if feed is not None:
            self.staged_tokens.select(1, 0).index_copy_(0, *feed)
        graph, (hidden, drafted) = self.graphs[size]
        graph.replay()
        return hidden[:n], drafted[:n]
