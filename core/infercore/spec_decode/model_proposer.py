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
   one-token steps (:meth:`ModelProposer.decode`, run by ``infercore.worker.draft_steps`` from static
   buffers: captured graphs per batch size where the platform captures) give the rest, each feeding
   the previous draft. The drafts stay on the device until the one copy at the end: no host sync
   inside the loop.

Drafts are the draft's argmax, a point mass for the rejection sampler (``Drafts.probs`` is None), so
the output keeps the target's distribution for greedy and sampled requests alike.

**Drafting inside the verifying step** (:meth:`ModelProposer.launch_drafts`). The catch-up above needs
each row's accepted count, so it waits for the step's tokens on the host; a second wait brings the drafts
back. Instead, right after verification and before either reaches the host, each sampled row's catch-up
runs as if every draft were accepted: its inputs are known on the host except the target's own token
after the accepted ones, which the device writes at its position (``accepted`` further than with none
accepted), and the first draft is read there too. The positions past it compute states nobody reads and
KV entries that a later catch-up overwrites (a lazily catching-up method takes them back from its record
in :meth:`ModelProposer.settle` once the tokens are on the host). The one-token steps take their positions
from the same device counts, and each row's draft count is chosen as if every draft were accepted. The
step's tokens and drafts then come back in one copy, the device kept busy from the target's forward pass
to the last draft. A step in which a sampled row's blocks end before that furthest position (no
lookahead slots) drafts after its tokens arrive, as above.

The scheduler allocates ``k`` lookahead slots past each running request's tokens for the draft's writes
(``Scheduler.num_lookahead_tokens``), when blocks are free; a row drafts only within the blocks it holds,
so without them, near the end of its last block, it drafts fewer tokens, or none. Steps with at least ``disable_by_batch_size`` requests
run neither pass; positions computed in such steps stay stale in the draft's cache, which only lowers
later acceptance.
"""

from __future__ import annotations

from abc import abstractmethod
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

import numpy as np
import torch

from infercore.spec_decode.device_index import is_prefix, take, upload
from infercore.spec_decode.proposer import PAD_TOKEN_ID, Drafts, Proposer

if TYPE_CHECKING:
    from collections.abc import Callable

    from torch import nn

    from infercore.worker.batch_layout import BatchLayout
    from infercore.worker.draft_runner import DraftRunner
    from infercore.worker.draft_steps import DraftSteps
    from infercore.worker.input_batch import InputBatch, RequestState
    from infercore.worker.model_runner import ModelRunner

    #: Builds the :class:`DraftRunner` of a draft-side model: ``(model, draft_tensor_parallel_size)``.
    MakeRunner = Callable[[nn.Module, int | None], DraftRunner]


@dataclass
class CatchUpPlan:
    """One catch-up pass: its requests (batch indices, one-token queries first), their query lengths, and per
    flat token its position, input id and the target's row of this step's hidden states."""

    catch: np.ndarray
    query_lens: np.ndarray
    positions: np.ndarray
    input_ids: np.ndarray
    target_rows: np.ndarray


class ModelProposer(Proposer):
    """A proposer that drafts with a model in the target's block tables (see the module docstring).

    Subclasses implement :meth:`bind` (build ``self.runner``, a :class:`DraftRunner`) and
    :meth:`forward` (the draft-side model over flat tokens → its hidden states and draft token ids).
    """

    #: Position ``p`` is fed the token at ``p + input_shift``.
    input_shift = 0
    #: Whether positions of steps without drafting are caught up later, when drafting resumes (a draft
    #: model: its inputs are the tokens alone); else every step catches up (EAGLE: it needs the target's
    #: hidden states of the step).
    lazy_catch_up = True
    runner: DraftRunner
    steps: DraftSteps
    #: The width of the hidden states :meth:`decode` takes and returns.
    hidden_size: int
    _valid_until: np.ndarray | None = None
    _owner: np.ndarray  # per batch row, the request whose positions ``_valid_until`` counts (object array)

    def propose(self, *, token_ids: np.ndarray, num_tokens: np.ndarray, num_drafts: np.ndarray) -> Drafts:
        """Model-based proposers draft in :meth:`propose_step`; the history alone gives none."""
        return Drafts.empty(len(num_tokens), int(num_drafts.max()) if len(num_drafts) else 0)

    @abstractmethod
    def bind(self, target: ModelRunner, make_runner: MakeRunner) -> None:
        """Load the draft-side model onto the target's device (``target.device``, ``target.dtype``,
        ``target.config`` for the load format) and set ``self.runner = make_runner(model, tp_size)``."""

    def allocate(self, pool_sizes: list[int]) -> None:
        """Allocate the draft's KV cache beside the target's pools of ``pool_sizes`` blocks, and the
        buffers (and graphs) of its one-token steps."""
        self.runner.allocate(pool_sizes)
        config = self.spec.config
        limit = config.disable_by_batch_size
        rows = self.spec.max_num_seqs if limit is None else max(min(self.spec.max_num_seqs, limit - 1), 1)
        self.steps = self.runner.make_steps(self.decode, self.hidden_size, rows, config.num_speculative_tokens - 1)
        self.runner.make_catch_up(self.forward, rows, self.write_kv if self.writes_kv_alone else None)

    @abstractmethod
    def decode(self, input_ids: torch.Tensor, positions: torch.Tensor,
               hidden: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """One draft step of one token per row (captured as a device graph where the platform can):
        the draft-side model's hidden states and its draft token ids."""

    @abstractmethod
    def forward(self, input_ids: torch.Tensor, positions: torch.Tensor, target_rows: torch.Tensor,
                last: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """The catch-up: run the draft-side model (inside the runner's forward context) over flat
        ``input_ids`` at ``positions`` (an EAGLE head with the target's captured hidden states at
        ``target_rows``). Returns the hidden states at the flat indices ``last`` and the draft token ids
        from them."""

    #: Whether the draft's K/V entries of a token depend on that token's own inputs alone (one layer: EAGLE),
    #: so that a catch-up in which no row drafts runs :meth:`write_kv` instead of the whole model.
    writes_kv_alone = False

    def write_kv(self, input_ids: torch.Tensor, positions: torch.Tensor, target_rows: torch.Tensor) -> None:
        """A catch-up that drafts nothing, where :attr:`writes_kv_alone`: write the tokens' K/V entries (inside
        the runner's forward context), as :meth:`forward` would."""
        raise NotImplementedError(f"{type(self).__name__} catches up through its whole model")

    @torch.inference_mode()
    def propose_step(self, batch: InputBatch, layout: BatchLayout, req_ids: list[str], sampled_idx: np.ndarray,
                     draft: bool = True) -> dict[int, list[int]]:
        """Catch up on a finished step and, with ``draft``, draft: ``{batch index: drafts}`` for the rows
        that sampled. Without ``draft`` (a step of at least ``disable_by_batch_size`` requests) a method
        that catches up lazily (:attr:`lazy_catch_up`) does nothing; the others only catch up."""
        num_rows = len(req_ids)
        if not num_rows:
            return {}
        states = [batch.requests.get(rid) for rid in req_ids]
        live = np.array([s is not None and s.row == r for s, r in zip(states, layout.rows.tolist(), strict=True)])
        if not draft and self.lazy_catch_up:
            self._first_stale(layout.rows, layout.num_computed, req_ids, live)  # who holds each row, since when
            return {}
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
                                     self.spec.config.num_speculative_tokens), capacity - last_pos)
        drafting = sampled & live & (stop == batch.num_tokens[rows] - shift) & (allowed > 0) & draft
        plan = self._catch_up_plan(batch, layout, req_ids, live, stop)
        catch, query_lens = plan.catch, plan.query_lens
        if not len(catch):
            return {}
        ends = np.cumsum(query_lens) - 1
        pick = np.flatnonzero(drafting[catch])
        hidden, tokens = self.runner.catch_up(rows[catch], query_lens, stop[catch], plan.positions, plan.input_ids,
                                              plan.target_rows, ends, pick, graphs_allowed=len(pick) > 0)
        if not len(pick):
            return {}
        order = catch[pick]  # batch indices of the drafting rows
        counts = allowed[order]
        host = self.steps.run(rows[order], last_pos[order], counts, tokens, hidden).cpu().numpy()
        return {int(i): host[n, : counts[n]].tolist() for n, i in enumerate(order.tolist())}

    #: Whether this method drafts inside the verifying step (:meth:`launch_drafts`) rather than after its
    #: tokens reach the host (:meth:`propose_step`).
    drafts_in_step = True

    @torch.inference_mode()
    def launch_drafts(self, batch: InputBatch, layout: BatchLayout, req_ids: list[str], sampled_idx: np.ndarray,
                      accepted: torch.Tensor, bonus: torch.Tensor, draft: bool = True) -> torch.Tensor | None:
        """Catch up on a step whose verification is queued and draft, all on the device (see the module
        docstring); ``req_ids`` in batch order. ``accepted`` / ``bonus`` [S] (device): per sampled row, in
        ``sampled_idx`` order, the drafts accepted and the target's token after them. Returns [S, k] int64
        drafts on the device, each row's first ``n`` then ``PAD_TOKEN_ID`` (``n`` may be 0); or None, having
        done nothing, where a sampled row's blocks end before the furthest position it could reach (no
        lookahead slots: the step then drafts after its tokens reach the host, :meth:`propose_step`).
        :meth:`settle` then records, once the tokens are on the host, how far the draft's cache holds."""
        rows, start, scheduled = layout.rows, layout.num_computed, layout.num_scheduled
        num_rows, num_sampled = len(rows), len(sampled_idx)
        shift, k = self.input_shift, self.spec.config.num_speculative_tokens

        def none() -> torch.Tensor:  # no drafts for any sampled row
            return torch.full((num_sampled, k), PAD_TOKEN_ID, dtype=torch.int64, device=accepted.device)

        live = np.ones(num_rows, dtype=bool)
        if not draft and self.lazy_catch_up:
            self._first_stale(rows, start, req_ids, live)  # who holds each row, since when
            return none()
        num_drafts = batch.num_drafts[rows]
        sampled = np.zeros(num_rows, dtype=bool)
        sampled[sampled_idx] = True
        sample_of = np.full(num_rows, -1, dtype=np.int64)  # batch index -> its place in sampled_idx
        sample_of[sampled_idx] = np.arange(num_sampled)
        # Every draft accepted is the furthest a row can get: a sampled row's tokens then end at
        # start + scheduled + 1; the catch-up stops ``shift`` before.
        stop = start + scheduled + np.where(sampled, 1 - shift, 0)
        num_blocks = np.array([batch.requests[rid].num_blocks for rid in req_ids], dtype=np.int64)
        capacity = self.runner.capacity(rows, num_blocks)
        if (stop > capacity).any():
            return None
        # A lazy catch-up's record goes up to ``stop``; :meth:`settle` takes back what was not accepted.
        plan = self._catch_up_plan(batch, layout, req_ids, live, stop)
        catch, query_lens = plan.catch, plan.query_lens
        if not len(catch):
            return none()
        # Each row's last settled token (flat) if no draft were accepted; a sampled row's moves by ``accepted``,
        # and the input there is the target's token after the accepted ones.
        ends = np.cumsum(query_lens) - 1 - np.where(sampled[catch], num_drafts[catch], 0)
        in_catch = np.flatnonzero(sampled[catch])
        allowed = np.minimum(np.clip(self.spec.max_model_len - 2 - start - scheduled, 0, k), capacity - (stop - 1))
        drafting = sampled & (allowed > 0) & draft
        pick = np.flatnonzero(drafting[catch])
        order = catch[pick]
        samples = sample_of[catch[in_catch]]  # the sampled catch-up requests' places among the samples
        # Every index the device needs, in one upload.
        ends_dev, where, which, order_dev, last_base = upload(
            self.runner.device, ends, in_catch, samples, sample_of[order], stop[order] - 1 - num_drafts[order])
        feed = None
        if len(in_catch):
            moved = take(accepted, samples, which)
            if is_prefix(in_catch):  # the first catch-up requests (every one, at batch 1)
                ends_dev[: len(in_catch)] += moved
            else:
                ends_dev.index_add_(0, where, moved)
            feed = (take(ends_dev, in_catch, where), take(bonus, samples, which))
        hidden, tokens = self.runner.catch_up(rows[catch], query_lens, stop[catch], plan.positions, plan.input_ids,
                                              plan.target_rows, ends, pick, graphs_allowed=True, ends_dev=ends_dev,
                                              feed=feed)
        if not len(pick):
            return none()
        counts = allowed[order]
        last_pos = last_base + take(accepted, sample_of[order], order_dev)
        drafted = self.steps.run(rows[order], last_pos, counts, tokens, hidden)[:, :k]
        if len(order) == num_sampled and drafted.shape[1] == k and is_prefix(sample_of[order]):
            return drafted  # every sampled row drafts, in order (a view the caller copies before the next step)
        padded = none()
        padded[:, : drafted.shape[1]].index_copy_(0, order_dev, drafted)
        return padded

    def _catch_up_plan(self, batch: InputBatch, layout: BatchLayout, req_ids: list[str], live: np.ndarray,
                       stop: np.ndarray) -> CatchUpPlan:
        """The catch-up of each row from the first position the draft's cache lacks (the step's first, for a
        method that catches up every step) up to ``stop`` (exclusive), one-token queries first; a lazy
        method's record of what its cache holds moves to ``stop``."""
        rows, start = layout.rows, layout.num_computed
        first = self._first_stale(rows, start, req_ids, live) if self.lazy_catch_up else start
        if int(np.maximum(stop - first, 0).sum()) > self.runner.max_tokens:
            first = np.maximum(first, start)  # no pass beyond a step's size: stale positions stay stale
        catch = np.flatnonzero(stop > first)
        catch = catch[np.argsort(stop[catch] - first[catch] > 1, kind="stable")]
        if self.lazy_catch_up:
            self._valid_until[rows[catch]] = stop[catch]
        query_lens = stop[catch] - first[catch]
        offsets = np.arange(int(query_lens.sum())) - np.repeat(np.cumsum(query_lens) - query_lens, query_lens)
        positions = np.repeat(first[catch], query_lens) + offsets
        token_rows = np.repeat(rows[catch], query_lens)
        input_ids = batch.token_ids[token_rows, np.minimum(positions + self.input_shift, batch.max_model_len - 1)]
        # The target's hidden states of this step (EAGLE, whose catch-up starts at the step's first token).
        target_rows = np.maximum(
            np.repeat(layout.query_start_loc[:-1][catch] - (first - start)[catch], query_lens) + offsets, 0)
        return CatchUpPlan(catch, query_lens, positions, input_ids, target_rows)

    def settle(self, batch: InputBatch, states: list[RequestState | None]) -> None:
        """After a step drafted inside it (:meth:`launch_drafts`) reached the host: a lazily catching-up
        method's record of the positions its cache holds stops at each sampled row's real end (its
        catch-up ran as if every draft were accepted; the positions past the accepted ones are stale)."""
        if not self.lazy_catch_up or self._valid_until is None:
            return
        for state in states:
            if state is not None and batch.is_live(state):
                row = state.row
                self._valid_until[row] = min(int(self._valid_until[row]), int(batch.num_tokens[row]) - self.input_shift)

    def _first_stale(self, rows: np.ndarray, start: np.ndarray, req_ids: list[str], live: np.ndarray) -> np.ndarray:
        """Per row, the first position the draft's cache lacks: the step's first token, or earlier when
        steps without drafting left positions out. The record starts where a request is first seen in a
        row (what it had computed before, prefix hits, counts as present)."""
        if self._valid_until is None:
            self._valid_until = np.zeros(self.spec.max_num_seqs, dtype=np.int64)
            self._owner = np.full(self.spec.max_num_seqs, None, dtype=object)
        ids = np.empty(len(req_ids), dtype=object)
        ids[:] = req_ids
        new = live & (self._owner[rows] != ids)
        self._owner[rows[new]] = ids[new]
        self._valid_until[rows[new]] = start[new]
        return np.where(live, np.minimum(self._valid_until[rows], start), start)

    def _dev(self, values: np.ndarray) -> torch.Tensor:
        return torch.from_numpy(np.ascontiguousarray(values, dtype=np.int64)).to(self.runner.device, non_blocking=True)


def load_weights_into(model: Any, folder: str, load_format: str) -> None:
    """Read ``folder``'s checkpoint into ``model`` through its ``load_weights``."""
    from pathlib import Path

    from infercore.models.loader import check_loaded, process_weights_after_loading
    from infercore.models.weight_files import iterate_weights

    check_loaded(model, model.load_weights(iterate_weights(Path(folder), load_format)))
    process_weights_after_loading(model)
