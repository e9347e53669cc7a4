"""The runner's side of speculative decoding: verify each row's drafts in the step, propose the next ones.

A speculating row was scheduled its last token plus ``n`` drafts (``InputBatch.num_drafts``); the
forward pass computed all ``n + 1`` positions like any other scheduled tokens. Here the logits of those
positions are gathered, each position becomes a sampling row of its own (the row's parameters, output
index ``len(outputs) + j`` for its seed and ``min_tokens``), and ``RejectionSampler.verify`` returns the
accepted drafts and one token of the target's: 1 to ``n + 1`` tokens per row. Rows without drafts in the
same step are verified with ``n = 0``, which samples exactly what the plain sampler would.

Penalties must count the drafts before each position, which the per-row penalty tables do not hold: a
step in which a penalised row is verified builds its metadata from the rows' histories
(``infercore.spec_decode.position_metadata``, host work per token of history) and then records the
accepted tokens in the rows' tables itself. Other steps gather the metadata from the row state.

A model-based proposer drafts inside the step, before its tokens reach the host
(``ModelProposer.launch_drafts``, from the device's accepted counts; a step that verified nothing passes its
sampled tokens as rows of one): the step's tokens and next drafts come back in one copy. An n-gram proposer
drafts after the tokens reach the host, from each sampled row's history (prompt and outputs in
``InputBatch.token_ids``). Either way the drafts ride back to the scheduler with the step's output.
"""

from __future__ import annotations

import dataclasses
import functools
from collections.abc import Callable
from typing import TYPE_CHECKING

import numpy as np
import torch

from infercore.plugins.manager import get_plugin_manager
from infercore.sample import Sampler
from infercore.sample.logprobs import gather_logprobs
from infercore.sample.metadata import SamplingMetadata
from infercore.spec_decode.device_index import upload
from infercore.spec_decode.model_proposer import ModelProposer
from infercore.spec_decode.position_metadata import positions_metadata
from infercore.spec_decode.proposer import PAD_TOKEN_ID, Proposer, ProposerSpec
from infercore.spec_decode.rejection_sampler import RejectionSampler
from infercore.speculative_config import SpeculativeConfig
from infercore.worker.draft_runner import DraftRunner
from infercore.worker.input_batch import InputBatch, RequestState
from infercore.worker.pending_sample import PendingSample

if TYPE_CHECKING:
    from infercore.worker.model_runner import ModelRunner


@dataclasses.dataclass
class VerifiedSample:
    """What a verified step adds to its :class:`PendingSample`: per sampled row, its first verified
    position (into the step's logprobs rows) and, on the device, ``[count, tokens...]`` rows."""

    first_position: np.ndarray
    #: [S, 2k + 2] int64: the number of tokens of the row, then its tokens (padded to the configured k),
    #: then the next drafts where the proposer drafted inside the step (``PAD_TOKEN_ID`` past them).
    counts_and_tokens: torch.Tensor
    #: Whether the drafts columns hold the row's next drafts (``ModelProposer.launch_drafts``).
    drafted: bool = False


class SpeculativeStep:
    """Verification and proposing for one model runner (built only when speculating)."""

    def __init__(self, config: SpeculativeConfig, sampler: RejectionSampler, *, vocab_size: int, max_num_seqs: int,
                 max_model_len: int, device: torch.device, pin_memory: bool = False,
                 target: ModelRunner | None = None) -> None:
        self.sampler = sampler
        self.device = device
        self.max_model_len = max_model_len
        self.num_speculative_tokens = config.num_speculative_tokens
        self.disable_by_batch_size = config.disable_by_batch_size
        #: Where each step's verified tokens land on the host (pinned when the device is not the host).
        self._host = torch.zeros((max_num_seqs, 2 * config.num_speculative_tokens + 2), dtype=torch.int64,
                                 pin_memory=pin_memory)
        proposer_cls = get_plugin_manager().registry("speculative_method").load(config.method)
        self.proposer: Proposer = proposer_cls(ProposerSpec(config=config, vocab_size=vocab_size,
                                                            max_num_seqs=max_num_seqs, max_model_len=max_model_len))
        if isinstance(self.proposer, ModelProposer):
            if target is None:
                raise ValueError(f"speculative method {config.method!r} drafts with a model and needs the target's runner")
            self.proposer.bind(target, functools.partial(DraftRunner, target))

    def allocate(self, pool_sizes: list[int]) -> None:
        """Allocate a model-based proposer's KV cache beside the target's pools (nothing otherwise)."""
        if isinstance(self.proposer, ModelProposer):
            self.proposer.allocate(pool_sizes)

    def verify(self, batch: InputBatch, out: torch.Tensor, ends: np.ndarray, rows: np.ndarray,
               states: list[RequestState], compute_logits: Callable[[torch.Tensor], torch.Tensor],
               grammar_bitmask: torch.Tensor | None,
               pending: PendingSample) -> None:
        """Verify the sampled rows ``rows`` (batch order), whose scheduled tokens end at flat index
        ``ends`` (exclusive) of the forward's hidden states ``out``; fills ``pending``."""
        num_drafts = batch.num_drafts[rows]
        counts = num_drafts + 1
        first = np.concatenate(([0], np.cumsum(counts)))[:-1]
        owner = np.repeat(np.arange(len(rows)), counts)
        offset = np.arange(int(counts.sum())) - first[owner]
        width = int(num_drafts.max())
        columns = np.minimum(batch.num_tokens[rows][:, None] + np.arange(width), batch.max_model_len - 1)
        drafts = np.where(np.arange(width) < num_drafts[:, None], batch.token_ids[rows[:, None], columns],
                          PAD_TOKEN_ID)
        # One upload: the verified positions' flat indices, then the drafts.
        index, drafts_dev = upload(self.device, np.repeat(ends - counts, counts) + offset, drafts)
        logits = compute_logits(out.index_select(0, index)).float()
        metadata = self._metadata(batch, rows, states, num_drafts, owner, offset)
        if grammar_bitmask is not None:
            expand = torch.from_numpy(owner).to(grammar_bitmask.device, non_blocking=True)
            metadata = dataclasses.replace(metadata, grammar_bitmask=grammar_bitmask.index_select(0, expand))
        raw_logprobs = logits.log_softmax(dim=-1) if metadata.max_num_logprobs is not None else None
        verified = self.sampler.verify(logits, metadata, drafts_dev.view(len(rows), width), num_drafts)
        if bool(batch.sampling.penalised[rows].any()):
            self._record_penalties(batch, rows, verified.token_ids)
        if raw_logprobs is not None:
            chosen = verified.token_ids[torch.from_numpy(owner).to(self.device, non_blocking=True),
                                        torch.from_numpy(offset).to(self.device, non_blocking=True)]
            assert metadata.max_num_logprobs is not None
            pending.logprobs = gather_logprobs(raw_logprobs, chosen.clamp_min(0), metadata.max_num_logprobs)
        rows_out = torch.cat([verified.num_tokens.unsqueeze(1), verified.token_ids], 1)
        k = self.num_speculative_tokens
        rows_out = torch.nn.functional.pad(rows_out, (0, k + 2 - rows_out.shape[1]), value=PAD_TOKEN_ID)
        drafts_next = self._launch_drafts(batch, pending, verified.num_tokens - 1, verified.token_ids)
        drafted = drafts_next is not None
        if drafts_next is None:
            drafts_next = rows_out.new_full((len(rows), k), PAD_TOKEN_ID)
        pending.verified = VerifiedSample(first, torch.cat([rows_out, drafts_next], 1), drafted=drafted)

    def sampled_in_step(self, batch: InputBatch, pending: PendingSample, tokens: torch.Tensor) -> torch.Tensor | None:
        """A step that verified nothing, for a proposer that drafts inside the step: its sampled ``tokens``
        [S] as verified rows of one token each (``pending.verified``), with the proposer's catch-up and next
        drafts queued behind them; the rows for the host copy. None where the proposer drafts after the
        step instead, and where the step drafts nothing (``disable_by_batch_size``, the draft back-off): then
        only the catch-up is queued (``pending.caught_up``) and the tokens come back as a plain sample.

        Its catch-up then reads the target's states of this very step, also when async scheduling has
        already queued the next step's forward pass before this one's tokens are collected."""
        if not self._drafts_in_step:
            return None
        accepted = torch.zeros(len(tokens), dtype=torch.int64, device=tokens.device)
        drafts_next = self._launch_drafts(batch, pending, accepted, tokens.long().unsqueeze(1))
        if drafts_next is None:
            return None
        if not self._drafting(pending):  # caught up, no drafts: the tokens come back as a plain sample
            pending.caught_up = True
            return None
        k = self.num_speculative_tokens
        rows_out = torch.full((len(tokens), k + 2), PAD_TOKEN_ID, dtype=torch.int64, device=tokens.device)
        rows_out[:, 0] = 1
        rows_out[:, 1] = tokens
        pending.verified = VerifiedSample(np.arange(len(tokens)), torch.cat([rows_out, drafts_next], 1), drafted=True)
        return pending.verified.counts_and_tokens

    def _launch_drafts(self, batch: InputBatch, pending: PendingSample, accepted: torch.Tensor,
                       token_ids: torch.Tensor) -> torch.Tensor | None:
        """Queue the proposer's catch-up and drafts behind the verification (``ModelProposer.launch_drafts``);
        None where the proposer drafts after the step instead."""
        if not self._drafts_in_step:
            return None
        assert isinstance(self.proposer, ModelProposer)
        bonus = token_ids.gather(1, accepted.unsqueeze(1)).squeeze(1)
        return self.proposer.launch_drafts(batch, pending.layout, pending.req_ids, pending.sampled_idx, accepted,
                                           bonus, self._drafting(pending))

    @property
    def _drafts_in_step(self) -> bool:
        return isinstance(self.proposer, ModelProposer) and self.proposer.drafts_in_step

    def _drafting(self, pending: PendingSample) -> bool:
        """Whether a step drafts: the scheduler takes drafts from it (``draft_next``: some request is not
        paused by the draft back-off) and it has fewer than ``disable_by_batch_size`` requests (else the
        scheduler would drop the drafts)."""
        limit = self.disable_by_batch_size
        return pending.draft_next and (limit is None or len(pending.req_ids) < limit)

    def host_rows(self, num_rows: int) -> torch.Tensor:
        """The host buffer for ``num_rows`` rows of ``VerifiedSample.counts_and_tokens``."""
        return self._host[:num_rows]

    def _metadata(self, batch: InputBatch, rows: np.ndarray, states: list[RequestState], num_drafts: np.ndarray,
                  owner: np.ndarray, offset: np.ndarray) -> SamplingMetadata:
        """One sampling row per verified position (see the module docstring)."""
        sampling = batch.sampling
        if not bool(sampling.penalised[rows].any()):
            num_outputs = np.fromiter((len(s.output_token_ids) for s in states), dtype=np.int64, count=len(states))
            return sampling.gather(rows[owner], num_outputs[owner] + offset, None, self.sampler.seed_source)
        drafts = [batch.token_ids[row, batch.num_tokens[row]: batch.num_tokens[row] + n].tolist()
                  for row, n in zip(rows.tolist(), num_drafts.tolist(), strict=True)]
        return positions_metadata([s.sampling_params for s in states], [s.prompt_token_ids for s in states],
                                  [s.output_token_ids for s in states], drafts, sampling.vocab_size, self.device,
                                  eos_token_ids=[sampling.eos_token_ids[row] for row in rows.tolist()],
                                  seed_source=self.sampler.seed_source)

    def _record_penalties(self, batch: InputBatch, rows: np.ndarray, token_ids: torch.Tensor) -> None:
        """Count each row's verified tokens in its output counts, on the device (pads count zero)."""
        tables = batch.sampling.penalty_tables
        assert tables is not None
        row_index = torch.from_numpy(rows).to(self.device, non_blocking=True).unsqueeze(1).expand_as(token_ids)
        valid = (token_ids >= 0).to(torch.int32)
        tables.output_counts.index_put_((row_index.flatten(), token_ids.clamp_min(0).flatten()), valid.flatten(),
                                        accumulate=True)

    @staticmethod
    def tokens_of(counts_and_tokens: list[list[int]]) -> list[list[int]]:
        """Each row's verified tokens from the host copy of ``VerifiedSample.counts_and_tokens``."""
        return [row[1: 1 + row[0]] for row in counts_and_tokens]

    def step_drafts(self, batch: InputBatch, pending: PendingSample) -> list[list[int]]:
        """The next drafts of a collected step's requests, in its ``req_ids`` order ([] for those that
        did not sample)."""
        drafts: list[list[int]] = [[] for _ in pending.req_ids]
        if pending.caught_up:  # a step without drafts, caught up inside it (:meth:`sampled_in_step`)
            return drafts
        draft = self._drafting(pending)
        verified = pending.verified
        if verified is not None and verified.drafted:  # drafted inside the step: in the same host copy
            assert isinstance(self.proposer, ModelProposer)
            self.proposer.settle(batch, pending.states)
            if not pending.states:  # a step of prompt chunks only: caught up, nothing sampled
                return drafts
            host = pending.tokens_host if pending.tokens_host is not None else pending.tokens
            k = self.num_speculative_tokens
            for i, row in zip(pending.sampled_idx.tolist(), host[:, k + 2:].tolist(), strict=True):
                drafts[i] = [t for t in row if t != PAD_TOKEN_ID]
            return drafts
        if isinstance(self.proposer, ModelProposer):
            for i, ids in self.proposer.propose_step(batch, pending.layout, pending.req_ids, pending.sampled_idx,
                                                     draft).items():
                drafts[i] = ids
            return drafts
        if not draft:
            return drafts
        for i, ids in zip(pending.sampled_idx.tolist(), self.propose(batch, pending.states), strict=True):
            drafts[i] = ids
        return drafts

    def propose(self, batch: InputBatch, states: list[RequestState]) -> list[list[int]]:
        """Drafts for each of ``states`` from its history ([] for a row that left the batch)."""
        live = [j for j, s in enumerate(states) if batch.is_live(s)]
        drafts: list[list[int]] = [[] for _ in states]
        if not live:
            return drafts
        rows = np.array([states[j].row for j in live], dtype=np.int64)
        num_tokens = batch.num_tokens[rows]
        allowed = np.clip(self.max_model_len - 1 - num_tokens, 0, self.num_speculative_tokens)
        history = batch.token_ids[rows, : int(num_tokens.max())]
        proposed = self.proposer.propose(token_ids=history, num_tokens=num_tokens, num_drafts=allowed)
        for j, ids, n in zip(live, proposed.token_ids.tolist(), proposed.num_drafts.tolist(), strict=True):
            drafts[j] = ids[:n]
        return drafts


def make_sampler_and_step(runner: ModelRunner) -> tuple[Sampler, SpeculativeStep | None, int]:
    """The runner's sampler, the step that verifies drafts and proposes the next ones (None without
    speculative decoding), and how many positions a row may verify in one step (1 + k)."""
    speculative, seed = runner.config.speculative.speculative_config, runner.config.model.seed
    if speculative is None:
        return Sampler(seed), None, 1
    sampler = RejectionSampler(seed)
    pin = runner.platform.capabilities.pin_memory and runner.device.type != "cpu"
    step = SpeculativeStep(speculative, sampler, vocab_size=runner.vocab_size, max_num_seqs=runner.max_num_reqs,
                           max_model_len=runner.max_model_len, device=runner.device, pin_memory=pin, target=runner)
    return sampler, step, 1 + speculative.num_speculative_tokens
