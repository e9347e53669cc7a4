"""``ModelProposer``: the base of the proposers that run a model on the device (draft model, EAGLE).

Such a proposer is bound to the target's runner (:meth:`ModelProposer.bind`, before the KV cache is
sized, so its weights and cache come out of the same budget) and, after every step, is handed the
step's layout (:meth:`ModelProposer.propose_step`), not only the histories:

1. **Catch-up.** One forward pass of the draft-side model over the tokens the target settled in the
   step: each row's scheduled positions up to its last accepted one, plus, for a row that sampled, the
   target's own last token. The draft's KV cache then mirrors the target's (same blocks, same slots,
   :mod:`infercore.worker.draft_runner`), through chunked prefill, prefix hits and preemption.
   A method with ``input_shift = 1`` (EAGLE) feeds position ``p`` the token at ``p + 1`` beside the
   target's hidden state at ``p``, so its catch-up stops one position earlier.
2. **Drafting.** The catch-up's last position gives each sampling row its first draft; ``k - 1``
   one-token steps give the rest, each feeding the previous draft. The drafts stay on the device until
   the one copy at the end: no host sync inside the loop.

Drafts are the draft's argmax, a point mass for the rejection sampler (``Drafts.probs`` is None), so
the output keeps the target's distribution for greedy and sampled requests alike.

A row drafts only within the blocks it holds (the scheduler allocates no lookahead): near the end of
its last block it drafts fewer tokens, or none. Steps with at least ``disable_by_batch_size`` requests
run neither pass; positions computed in such steps stay stale in the draft's cache, which only lowers
later acceptance.
"""

from __future__ import annotations

from abc import abstractmethod
from typing import TYPE_CHECKING, Any

import numpy as np
import torch

from infercore.spec_decode.proposer import Drafts, Proposer

if TYPE_CHECKING:
    from collections.abc import Callable

    from torch import nn

    from infercore.worker.batch_layout import BatchLayout
    from infercore.worker.draft_runner import DraftRunner
    from infercore.worker.input_batch import InputBatch
    from infercore.worker.model_runner import ModelRunner

    #: Builds the :class:`DraftRunner` of a draft-side model: ``(model, draft_tensor_parallel_size)``.
    MakeRunner = Callable[[nn.Module, int | None], DraftRunner]


class ModelProposer(Proposer):
    """A proposer that drafts with a model in the target's block tables (see the module docstring).

    Subclasses implement :meth:`bind` (build ``self.runner``, a :class:`DraftRunner`) and
    :meth:`forward` (the draft-side model over flat tokens → its hidden states and draft token ids).
    """

    #: Position ``p`` is fed the token at ``p + input_shift``.
    input_shift = 0
    runner: DraftRunner

    def propose(self, *, token_ids: np.ndarray, num_tokens: np.ndarray, num_drafts: np.ndarray) -> Drafts:
        """Model-based proposers draft in :meth:`propose_step`; the history alone gives none."""
        return Drafts.empty(len(num_tokens), int(num_drafts.max()) if len(num_drafts) else 0)

    @abstractmethod
    def bind(self, target: ModelRunner, make_runner: MakeRunner) -> None:
        """Load the draft-side model onto the target's device (``target.device``, ``target.dtype``,
        ``target.config`` for the load format) and set ``self.runner = make_runner(model, tp_size)``."""

    def allocate(self, pool_sizes: list[int]) -> None:
        """Allocate the draft's KV cache beside the target's pools of ``pool_sizes`` blocks."""
        self.runner.allocate(pool_sizes)

    @abstractmethod
    def forward(self, input_ids: torch.Tensor, positions: np.ndarray, hidden: torch.Tensor | None,
                target_rows: torch.Tensor | None, last: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """Run the draft-side model (inside the runner's forward context) over flat ``input_ids`` at
        ``positions``. ``hidden`` [N, *] are the previous step's draft hidden states for these tokens (None
        in the catch-up, whose target hidden states are the captured ones at ``target_rows``). Returns
        the hidden states at the flat indices ``last`` and the draft token ids from them."""

    def propose_step(self, batch: InputBatch, layout: BatchLayout, req_ids: list[str],
                     sampled_idx: np.ndarray) -> dict[int, list[int]]:
        """Catch up on a finished step and draft: ``{batch index: drafts}`` for the rows that sampled."""
        config = self.spec.config
        num_rows = len(req_ids)
        if not num_rows or (config.disable_by_batch_size is not None and num_rows >= config.disable_by_batch_size):
            return {}
        states = [batch.requests.get(rid) for rid in req_ids]
        live = np.array([s is not None and s.row == r for s, r in zip(states, layout.rows.tolist(), strict=True)])
        num_blocks = np.array([s.num_blocks if s is not None else 0 for s in states], dtype=np.int64)
        sampled = np.zeros(num_rows, dtype=bool)
        sampled[sampled_idx] = True
        rows, start = layout.rows, layout.num_computed
        shift = self.input_shift
        stop = np.where(sampled, batch.num_tokens[rows] - shift, start + layout.num_scheduled)
        capacity = self.runner.capacity(rows, num_blocks)
        stop = np.where(live, np.minimum(stop, capacity), start)
        last_pos = stop - 1
        allowed = np.minimum(np.clip(self.spec.max_model_len - 1 - batch.num_tokens[rows], 0,
                                     config.num_speculative_tokens), capacity - last_pos)
        drafting = sampled & live & (stop == batch.num_tokens[rows] - shift) & (allowed > 0)
        catch = np.flatnonzero(stop > start)
        if not len(catch):
            return {}
        catch = catch[np.argsort(stop[catch] - start[catch] > 1, kind="stable")]  # one-token queries first
        query_lens = stop[catch] - start[catch]
        offsets = np.arange(int(query_lens.sum())) - np.repeat(np.cumsum(query_lens) - query_lens, query_lens)
        positions = np.repeat(start[catch], query_lens) + offsets
        token_rows = np.repeat(rows[catch], query_lens)
        input_ids = batch.token_ids[token_rows, np.minimum(positions + shift, batch.max_model_len - 1)]
        target_rows = np.repeat(layout.query_start_loc[:-1][catch], query_lens) + offsets
        ends = np.cumsum(query_lens) - 1
        pick = np.flatnonzero(drafting[catch])
        if not len(pick):
            with self.runner.forward_context(rows[catch], query_lens, stop[catch], positions):
                self.forward(self._dev(input_ids), positions, None, self._dev(target_rows), self._dev(ends[:0]))
            return {}
        with self.runner.forward_context(rows[catch], query_lens, stop[catch], positions):
            hidden, tokens = self.forward(self._dev(input_ids), positions, None, self._dev(target_rows),
                                          self._dev(ends[pick]))
        order = catch[pick]  # batch indices of the drafting rows
        counts = allowed[order]
        columns = [tokens]
        alive = np.arange(len(order))
        for j in range(1, int(counts.max())):
            keep = np.flatnonzero(counts[alive] > j)
            if not len(keep):
                break
            keep_dev = self._dev(keep)
            tokens, hidden = tokens.index_select(0, keep_dev), hidden.index_select(0, keep_dev)
            alive = alive[keep]
            step_pos = last_pos[order[alive]] + j
            ones = np.ones(len(alive), dtype=np.int64)
            with self.runner.forward_context(rows[order[alive]], ones, step_pos + 1, step_pos):
                hidden, tokens = self.forward(tokens, step_pos, hidden, None, self._dev(np.arange(len(alive))))
            full = torch.full((len(order),), -1, dtype=torch.int64, device=tokens.device)
            columns.append(full.index_copy_(0, self._dev(alive), tokens.long()))
        host = torch.stack([c.long() for c in columns], 1).cpu().numpy()
        return {int(i): host[n, : counts[n]].tolist() for n, i in enumerate(order.tolist())}

    def _dev(self, values: np.ndarray) -> torch.Tensor:
        return torch.from_numpy(np.ascontiguousarray(values, dtype=np.int64)).to(self.runner.device, non_blocking=True)


def load_weights_into(model: Any, folder: str, load_format: str) -> None:
    """Read ``folder``'s checkpoint into ``model`` through its ``load_weights``."""
    from pathlib import Path

    from infercore.models.loader import check_loaded, process_weights_after_loading
    from infercore.models.weight_files import iterate_weights

    check_loaded(model, model.load_weights(iterate_weights(Path(folder), load_format)))
    process_weights_after_loading(model)
