"""Runs a draft-side model (a draft model or an EAGLE head) in the target's block tables.

The draft-side model has a KV cache of its own with as many blocks as the target's primary group, and
token ``p`` of a request is stored in the same block and slot in both: the block tables the scheduler
gives the target serve the draft too, so a prefix-cache hit, a preemption or a freed block means the
same for both, and the memory budget pays for both (``KVCacheSetup.companion``). Each forward pass
builds its attention metadata from host arrays (positions, query lengths, the rows' block tables).

Each of the draft's KV groups uses the target's group of the same window (its column of the
interleaved block table); a draft with a window no target layer reads cannot share the tables and is
refused.
"""

from __future__ import annotations

import contextlib
import logging
from collections.abc import Iterator
from typing import TYPE_CHECKING, Any

import numpy as np
import torch
from torch import nn

from infercore.attention.backend import CommonAttentionMetadata
from infercore.forward_context import ForwardContext, set_forward_context
from infercore.spec_decode.device_index import is_prefix
from infercore.spec_decode.draft_parallel import tensor_parallel_size
from infercore.worker.draft_catch_up import CatchUpFn, CatchUpGraphs, Feed, WriteKVFn
from infercore.worker.draft_steps import DraftSteps, StepFn

if TYPE_CHECKING:
    from infercore.worker.model_runner import ModelRunner

logger = logging.getLogger(__name__)


class DraftRunner:
    """A draft-side ``model`` with its own KV cache in the target runner's block tables."""

    def __init__(self, target: ModelRunner, model: nn.Module, draft_tp: int | None = None) -> None:
        from infercore.worker.attention_choice import select_attention_backend
        from infercore.worker.kv_cache_setup import KVCacheSetup

        self.target = target
        self.model = model
        self.device = target.device
        self.draft_tp = draft_tp
        self.block_size = target.block_size
        self.max_tokens = target.max_num_tokens + target.max_num_reqs
        self.setup = KVCacheSetup(target.config, target.platform, target.device, model, target.dtype,
                                  target.max_num_reqs, self.max_tokens, target.max_model_len)
        ours = [g.window for g in self.setup.groups]
        theirs = [g.window for g in target.kv_setup.groups]
        if any(w not in theirs for w in ours):
            raise ValueError(f"the draft's KV cache groups (sliding windows {ours}) are not among the target's "
                             f"({theirs}); a draft shares the target's block tables, so each of its attention "
                             "layers must read a window (or the whole context) that some target layer reads")
        #: The target's group (a column of its interleaved block table) each of the draft's groups uses.
        self.group_of = [theirs.index(w) for w in ours]
        self.stride = len(theirs)
        self.backend = select_attention_backend(model, target.platform, self.setup.spec, target.dtype)
        self.caches: list[torch.Tensor] = []
        self.catch_up_graphs: CatchUpGraphs | None = None
        self.catch_up_fn: CatchUpFn | None = None
        #: Writes the draft's K/V entries of a catch-up's tokens alone (None: the method's model cannot).
        self.write_kv_fn: WriteKVFn | None = None
        self.builders: list[Any] = []
        # The target's budget pays for this cache too.
        target.kv_setup.companion = self.setup

    @property
    def max_verify_len(self) -> int:
        """The longest catch-up query of a verifying step: its 1 + k scheduled tokens and the target's token
        after them. Attention metadata tells backends (``max_verify_len``) so that such queries attend as
        decodes of their tokens, as the target's verification does, rather than through the prefill kernel."""
        return self.target.max_verify_len + 1

    def allocate(self, pool_sizes: list[int]) -> None:
        """Allocate and bind the cache for the target's pools of ``pool_sizes`` blocks (one per group)."""
        self.caches = self.setup.allocate(self.backend, [pool_sizes[g] for g in self.group_of])
        self.setup.bind(self.model, self.backend, self.caches, self.target.dtype)
        self.builders = [self.backend.get_builder_cls()(self.setup.spec, self.device, self.target.max_num_reqs,
                                                        self.max_tokens) for _ in self.setup.groups]

    def make_steps(self, step: StepFn, hidden_size: int, max_rows: int, max_steps: int) -> DraftSteps:
        """The buffers of the draft's one-token steps, with graphs captured where the platform can (a
        failed capture leaves them eager, with a warning)."""
        steps = DraftSteps(self, step, hidden_size, self.target.dtype, max_rows, max_steps)
        target = self.target
        if target.platform.capabilities.graph_capture and not target.config.model.enforce_eager:
            try:
                steps.capture()
            except Exception:  # noqa: BLE001 - graphs are an optimisation: eager steps give the same drafts
                logger.warning("capturing the draft's decode graphs failed; its steps run eagerly", exc_info=True)
                steps.graphs.clear()
        return steps

    def make_catch_up(self, fn: CatchUpFn, max_rows: int, write_kv: WriteKVFn | None = None) -> None:
        """Capture the catch-up pass (:mod:`infercore.worker.draft_catch_up`) where the backend launches
        padded steps from their counts alone and the platform captures; else it stays eager. ``write_kv``
        (a method whose K/V entries depend on each token's own inputs alone: EAGLE) serves the passes in which
        no row drafts."""
        target = self.target
        self.catch_up_fn = fn
        self.write_kv_fn = write_kv
        if not (self.backend.captures_mixed_steps and target.platform.capabilities.graph_capture
                and not target.config.model.enforce_eager):
            return
        graphs = CatchUpGraphs(self, fn, max_rows, self.max_tokens)
        try:
            graphs.capture()
        except Exception:  # noqa: BLE001 - graphs are an optimisation: the eager pass gives the same drafts
            logger.warning("capturing the draft's catch-up graphs failed; it runs eagerly", exc_info=True)
            return
        self.catch_up_graphs = graphs

    def catch_up(self, rows: np.ndarray, query_lens: np.ndarray, seq_lens: np.ndarray, positions: np.ndarray,
                 input_ids: np.ndarray, target_rows: np.ndarray, ends: np.ndarray, pick: np.ndarray,
                 graphs_allowed: bool, ends_dev: torch.Tensor | None = None,
                 feed: Feed | None = None) -> tuple[torch.Tensor, torch.Tensor]:
        """Run the catch-up pass over ``query_lens[i]`` tokens of batch row ``rows[i]`` (one-token queries
        first); returns the hidden states and draft tokens at the last tokens of requests ``pick``. A
        captured graph serves it when one fits (and ``graphs_allowed``: the call ends in a host sync).

        Inputs the host does not know yet come from the device: ``ends_dev`` replaces ``ends`` (each
        request's last token, flat), and ``feed`` = ``(index, ids)`` overwrites those flat tokens' inputs."""
        kv_only = not len(pick) and self.write_kv_fn is not None  # no row drafts: the cache entries are all it needs
        graphs = self.catch_up_graphs
        size = (graphs.size_for(len(positions), len(rows)) if graphs is not None and graphs_allowed and not kv_only
                else None)
        if size is not None:
            assert graphs is not None
            hidden, tokens = graphs.replay(size, rows, query_lens, seq_lens, positions, input_ids, target_rows, ends,
                                           ends_dev, feed)
            if is_prefix(pick):  # the first requests (every one, at batch 1)
                return hidden[: len(pick)], tokens[: len(pick)]
            index = self._dev(pick, torch.int64)
            return hidden.index_select(0, index), tokens.index_select(0, index)
        ids = self._dev(input_ids, torch.int64)
        if feed is not None:
            ids.index_copy_(0, *feed)
        positions_dev, target_rows_dev = self._dev(positions, torch.int64), self._dev(target_rows, torch.int64)
        with self.forward_context(rows, query_lens, seq_lens, positions):
            if kv_only:
                assert self.write_kv_fn is not None
                self.write_kv_fn(ids, positions_dev, target_rows_dev)
                return torch.empty((0, 0), device=self.device), torch.empty(0, dtype=torch.int64, device=self.device)
            last = (ends_dev.index_select(0, self._dev(pick, torch.int64)) if ends_dev is not None
                    else self._dev(ends[pick], torch.int64))
            return self.catch_up_fn(ids, positions_dev, target_rows_dev, last)

    def capacity(self, rows: np.ndarray, num_blocks: np.ndarray) -> np.ndarray:
        """Positions each row's blocks hold (``num_blocks`` entries of the interleaved table)."""
        return (num_blocks // self.stride) * self.block_size

    def context(self, rows: np.ndarray, query_lens: np.ndarray, seq_lens: np.ndarray,
                positions: np.ndarray) -> ForwardContext:
        """The forward context of ``query_lens[i]`` tokens of batch row ``rows[i]`` at ``positions``
        (flat, request by request) whose contexts end at ``seq_lens[i]``; rows with one-token queries
        must come first."""
        block_table = self.target.input_batch.block_table
        num_reqs, num_tokens = len(rows), len(positions)
        token_rows = np.repeat(rows, query_lens)
        width = int(-(-int(seq_lens.max()) // self.block_size))
        qsl = np.zeros(num_reqs + 1, dtype=np.int32)
        np.cumsum(query_lens, out=qsl[1:])
        columns = (positions // self.block_size) * self.stride
        metas = []
        for g in self.group_of:
            slots = block_table[token_rows, columns + g].astype(np.int64) * self.block_size + positions % self.block_size
            table = block_table[rows, : width * self.stride][:, g::self.stride]
            metas.append(CommonAttentionMetadata(
                num_reqs=num_reqs, num_actual_tokens=num_tokens, max_query_len=int(query_lens.max()),
                max_seq_len=int(seq_lens.max()), query_start_loc=self._dev(qsl, torch.int32),
                seq_lens=self._dev(seq_lens, torch.int32), block_table=self._dev(table, torch.int32),
                slot_mapping=self._dev(slots, torch.int64), query_start_loc_cpu=torch.from_numpy(qsl),
                seq_lens_cpu=torch.from_numpy(seq_lens.astype(np.int32)), max_verify_len=self.max_verify_len))
        built = [builder.build(meta) for builder, meta in zip(self.builders, metas, strict=True)]
        return ForwardContext(built[0], num_tokens, group_attn_metadata=tuple(built[1:]))

    @contextlib.contextmanager
    def forward_context(self, rows: np.ndarray, query_lens: np.ndarray, seq_lens: np.ndarray,
                        positions: np.ndarray) -> Iterator[None]:
        """Run the draft-side model inside :meth:`context` (and unsharded when it is built so)."""
        with tensor_parallel_size(self.draft_tp), set_forward_context(
                self.context(rows, query_lens, seq_lens, positions)):
            yield

    def _dev(self, values: np.ndarray, dtype: torch.dtype) -> torch.Tensor:
        return torch.from_numpy(np.ascontiguousarray(values)).to(self.device, dtype, non_blocking=True)
