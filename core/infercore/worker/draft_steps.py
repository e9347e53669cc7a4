"""The draft's one-token steps: ``k - 1`` pure-decode passes of the drafting rows, from static buffers.

Every step of one call runs the same rows in the same order (the block-table rows are uploaded once);
a row that has drafted all it may keeps running with its KV write masked (slot -1) and its context at
its last settled position, and its outputs are dropped. Where the platform captures, one graph per
batch size holds the whole chain of ``max_steps`` steps: from each row's last settled position (on the
device), its step offsets and its draft count (one upload, with the block tables) it computes every
step's positions, slots and context lengths, runs the steps, each fed the previous one's tokens and
hidden states, and writes the drafts, ``PAD_TOKEN_ID`` past each row's count, into one output. A call
is then a few copies and one replay, whatever ``k`` (padding rows read nothing and write nowhere; a call
needing fewer steps runs the extra ones masked). Without graphs the steps run eagerly, their metadata
computed on the host. Nothing waits for the device.
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
from infercore.spec_decode.proposer import PAD_TOKEN_ID
from infercore.worker.whole_graphs import capture_sizes

if TYPE_CHECKING:
    from infercore.worker.draft_runner import DraftRunner

logger = logging.getLogger(__name__)

#: ``(input_ids [n], positions [n], hidden [n, H]) -> (hidden [n, H], draft token ids [n])``.
StepFn = Callable[[torch.Tensor, torch.Tensor, torch.Tensor], tuple[torch.Tensor, torch.Tensor]]


class DraftSteps:
    """Static buffers (and, where the platform captures, graphs per batch size) of a draft's decode steps."""

    def __init__(self, runner: DraftRunner, step: StepFn, hidden_size: int, hidden_dtype: torch.dtype,
                 max_rows: int, max_steps: int) -> None:
        self.runner = runner
        self.step = step
        device = runner.device
        target = runner.target
        self.max_rows, self.max_steps = max_rows, max(max_steps, 1)
        self.width = target.max_blocks_per_req
        groups = len(runner.group_of)
        i64, i32 = torch.int64, torch.int32
        self.ids = torch.zeros(max_rows, dtype=i64, device=device)
        self.positions = torch.zeros(max_rows, dtype=i64, device=device)
        self.hidden = torch.zeros((max_rows, hidden_size), dtype=hidden_dtype, device=device)
        self.query_start_loc = torch.arange(max_rows + 1, dtype=i32, device=device)
        self.seq_lens = torch.zeros(max_rows, dtype=i32, device=device)
        self.tables = torch.zeros((groups, max_rows, self.width), dtype=i32, device=device)
        self.slots = torch.full((groups, max_rows), -1, dtype=i64, device=device)
        self.query_start_loc_cpu = torch.arange(max_rows + 1, dtype=i32)
        self.seq_lens_cpu = torch.ones(max_rows, dtype=i32)
        # The chain's inputs: per row its draft count (0: a padding row), its last settled position, then its
        # offset at each step (0 once it has drafted all it may); the first drafts and their hidden states.
        self.chain_meta = torch.zeros((2 + self.max_steps, max_rows), dtype=i64, device=device)
        self.first_ids = torch.zeros(max_rows, dtype=i64, device=device)
        self.first_hidden = torch.zeros((max_rows, hidden_size), dtype=hidden_dtype, device=device)
        pin = target.platform.capabilities.pin_memory and device.type != "cpu"
        # Host staging of one call's steps: positions, then each group's slots (int64); context lengths (int32).
        self._host_i64 = torch.zeros(((1 + groups) * self.max_steps, max_rows), dtype=i64, pin_memory=pin)
        self._host_i32 = torch.zeros((self.max_steps, max_rows), dtype=i32, pin_memory=pin)
        self._host_tables = torch.zeros((groups, max_rows, self.width), dtype=i32, pin_memory=pin)
        self._host_meta = torch.zeros((2 + self.max_steps, max_rows), dtype=i64, pin_memory=pin)
        self.sizes = capture_sizes(max_rows)
        #: Per batch size: the graph of the whole chain and its output, drafts [size, 1 + max_steps].
        self.graphs: dict[int, tuple[Any, torch.Tensor]] = {}

    def _context(self, size: int, max_seq_len: int) -> ForwardContext:
        metas = [CommonAttentionMetadata(
            num_reqs=size, num_actual_tokens=size, max_query_len=1, max_seq_len=max_seq_len,
            query_start_loc=self.query_start_loc[: size + 1], seq_lens=self.seq_lens[:size],
            block_table=self.tables[g, :size], slot_mapping=self.slots[g, :size],
            query_start_loc_cpu=self.query_start_loc_cpu[: size + 1], seq_lens_cpu=self.seq_lens_cpu[:size])
            for g in range(len(self.runner.group_of))]
        built = [builder.build(meta) for builder, meta in zip(self.runner.builders, metas, strict=True)]
        return ForwardContext(built[0], size, group_attn_metadata=tuple(built[1:]))

    def _run(self, size: int) -> tuple[torch.Tensor, torch.Tensor]:
        return self.step(self.ids[:size], self.positions[:size], self.hidden[:size])

    def _chain(self, size: int) -> torch.Tensor:
        """The whole chain on the first ``size`` rows, from :attr:`chain_meta`, :attr:`first_ids`,
        :attr:`first_hidden` and the block tables alone (what a graph captures): drafts [size, 1 + max_steps],
        ``PAD_TOKEN_ID`` past each row's count."""
        block = self.runner.block_size
        meta = self.chain_meta[:, :size]
        counts, last_pos, offsets = meta[0], meta[1], meta[2:]  # [size], [size], [max_steps, size]
        row_live = counts > 0
        positions = torch.where(row_live, last_pos, 0).unsqueeze(0) + offsets  # [S, size]
        seq_lens = torch.where(row_live, positions + 1, 0).to(torch.int32)
        writes = offsets > 0
        columns = (positions // block).t()  # [size, S]
        slots = torch.stack([torch.where(writes, self.tables[g, :size].gather(1, columns).t().long() * block
                                         + positions % block, -1) for g in range(len(self.runner.group_of))])
        out = [self.first_ids[:size]]
        self.ids[:size].copy_(self.first_ids[:size])
        self.hidden[:size].copy_(self.first_hidden[:size])
        for j in range(self.max_steps):
            self.positions[:size].copy_(positions[j])
            self.seq_lens[:size].copy_(seq_lens[j])
            self.slots[:, :size].copy_(slots[:, j])
            hidden, tokens = self._run(size)
            out.append(tokens.long())
            if j + 1 < self.max_steps:
                self.ids[:size].copy_(tokens)
                self.hidden[:size].copy_(hidden)
        drafts = torch.stack(out, 1)
        columns_of = torch.arange(1 + self.max_steps, device=drafts.device)
        return torch.where(columns_of.unsqueeze(0) < counts.unsqueeze(1), drafts, PAD_TOKEN_ID)

    @torch.inference_mode()
    def capture(self, pool: Any = None) -> None:
        """Capture one graph of the whole chain per batch size (largest first; ``pool`` shared or a new
        one), on rows that read one position and write nowhere."""
        platform = self.runner.target.platform
        started = time.perf_counter()
        pool = pool if pool is not None else platform.graph_pool_handle()
        self.chain_meta.zero_()
        self.chain_meta[0].fill_(1)
        with tensor_parallel_size(self.runner.draft_tp):
            for size in reversed(self.sizes):
                with set_forward_context(self._context(size, 1)):
                    self._chain(size)  # warm-up outside the graph
                    graph = platform.new_graph()
                    with platform.capture_graph(graph, pool):
                        out = self._chain(size)
                self.graphs[size] = (graph, out)
        platform.synchronize()
        logger.info("captured %d draft decode graphs (batch sizes %d..%d, %d steps each) in %.1f s", len(self.graphs),
                    self.sizes[0], self.sizes[-1], self.max_steps, time.perf_counter() - started)

    def graph_size(self, n: int) -> int | None:
        """The captured batch size whose graph runs a chain of ``n`` rows (None: the chain runs eagerly)."""
        size = next((s for s in self.sizes if s >= n), self.max_rows)
        return size if size in self.graphs else None

    def run(self, rows: np.ndarray, last_pos: np.ndarray | torch.Tensor, counts: np.ndarray, tokens: torch.Tensor,
            hidden: torch.Tensor) -> torch.Tensor:
        """Steps ``1 .. max(counts) - 1`` of batch rows ``rows`` whose settled tokens end at ``last_pos``
        (their first drafts ``tokens`` and states ``hidden``); row ``i`` drafts ``counts[i]`` (≥ 1) tokens
        in all. Returns every row's drafts, int64 [n, w] on the device with ``w >= max(counts)``, the first
        ``counts[i]`` of row ``i`` then ``PAD_TOKEN_ID``.

        ``last_pos`` on the device (not yet known to the host) keeps the steps on the device where graphs
        replay them: positions and slots are computed there, from the rows' block tables."""
        n, num_steps = len(rows), int(counts.max()) - 1
        if num_steps <= 0:
            return tokens.long().unsqueeze(1)
        if n > self.max_rows or num_steps > self.max_steps:
            raise ValueError(f"{n} drafting rows or {num_steps} steps exceed the buffers ({self.max_rows}, "
                             f"{self.max_steps})")
        size = self.graph_size(n)
        graph = self.graphs[size] if size is not None else None
        runner = self.runner
        stride = runner.stride
        table = runner.target.input_batch.block_table
        tables = self._host_tables.numpy()
        for gi, g in enumerate(runner.group_of):
            tables[gi, :n] = table[rows, : self.width * stride][:, g::stride]
        if graph is not None:
            return self._replay(graph, size, n, last_pos, counts, tokens, hidden)
        if isinstance(last_pos, torch.Tensor):  # eager steps build their metadata on the host
            last_pos = last_pos.cpu().numpy()
        steps = np.arange(1, num_steps + 1)[:, None]
        alive = steps < counts[None, :]  # [S, n]
        positions, seq_lens, slots = self._inputs_from_host(rows, n, num_steps, last_pos, alive)
        out_tokens = [tokens.long()]
        for j in range(num_steps):
            self.positions[:n].copy_(positions[j])
            self.seq_lens[:n].copy_(seq_lens[j])
            self.slots[:, :n].copy_(slots[:, j])
            self.ids[:n].copy_(tokens)
            self.hidden[:n].copy_(hidden)
            step_lens = np.where(alive[j], last_pos + j + 1, last_pos) + 1
            self.seq_lens_cpu[:n] = torch.from_numpy(step_lens.astype(np.int32))
            with tensor_parallel_size(runner.draft_tp), set_forward_context(self._context(n, int(step_lens.max()))):
                hidden, tokens = self._run(n)
            out_tokens.append(tokens.long())
        drafts = torch.stack(out_tokens, 1)
        keep = torch.from_numpy(np.arange(1 + num_steps)[None, :] < counts[:, None]).to(drafts.device)
        return torch.where(keep, drafts, PAD_TOKEN_ID)

    def _replay(self, graph: tuple[Any, torch.Tensor], size: int, n: int, last_pos: np.ndarray | torch.Tensor,
                counts: np.ndarray, tokens: torch.Tensor, hidden: torch.Tensor) -> torch.Tensor:
        """One replay of the chain's graph for ``size`` rows: its inputs in one upload (and the tables')."""
        meta = self._host_meta.numpy()
        meta[0, :n] = counts
        meta[0, n:size] = 0
        if not isinstance(last_pos, torch.Tensor):
            meta[1, :n] = last_pos
        offsets = np.arange(1, self.max_steps + 1)[:, None]
        meta[2:, :n] = np.where(offsets < counts[None, :], offsets, 0)
        meta[2:, n:size] = 0
        self.chain_meta[:, :size].copy_(self._host_meta[:, :size], non_blocking=True)
        self.tables[:, :size].copy_(self._host_tables[:, :size], non_blocking=True)
        if isinstance(last_pos, torch.Tensor):
            self.chain_meta[1, :n].copy_(last_pos)
        self.first_ids[:n].copy_(tokens)
        self.first_hidden[:n].copy_(hidden)
        graph[0].replay()
        return graph[1][:n]

    def _inputs_from_host(self, rows: np.ndarray, n: int, num_steps: int, last_pos: np.ndarray,
                          alive: np.ndarray) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
        """Positions, context lengths [S, n] and slots [G, S, n] of every step, computed here and uploaded
        in one copy (with the block tables)."""
        runner = self.runner
        block, stride = runner.block_size, runner.stride
        table = runner.target.input_batch.block_table
        steps = np.arange(1, num_steps + 1)[:, None]
        positions = np.where(alive, last_pos[None, :] + steps, last_pos[None, :])
        host64, host32 = self._host_i64.numpy(), self._host_i32.numpy()
        host64[:num_steps, :n] = positions
        host32[:num_steps, :n] = positions + 1
        for gi, g in enumerate(runner.group_of):
            blocks = table[rows[None, :], (positions // block) * stride + g].astype(np.int64)
            host64[(1 + gi) * num_steps:(2 + gi) * num_steps, :n] = np.where(alive, blocks * block + positions % block,
                                                                            -1)
        device = runner.device
        groups = len(runner.group_of)
        staged64 = self._host_i64[: (1 + groups) * num_steps].to(device, non_blocking=True)
        staged32 = self._host_i32[:num_steps].to(device, non_blocking=True)
        self.tables.copy_(self._host_tables, non_blocking=True)
        slots = staged64[num_steps:].view(groups, num_steps, -1)[:, :, :n]
        return staged64[:num_steps, :n], staged32[:, :n], slots
