"""The rejection sampler: verifies each row's draft tokens against the target model in one step.

A row with ``n`` drafts ``d_0..d_{n-1}`` has the target's logits at ``n + 1`` positions. Position
``j``'s distribution ``p_j`` is the target's after everything the sampler applies (logit bias and
``min_tokens``, penalties counting the drafts before ``j``, min-p, top-k, top-p, temperature), made
from the same code (``Sampler._adjust`` and the top-k/top-p threshold).

* **Greedy rows** accept while the draft is the argmax of ``p_j``'s logits, then take the argmax at the
  first mismatch (or after the last draft): exactly the tokens greedy decoding gives.
* **Sampled rows** accept ``d_j`` with probability ``min(1, p_j(d_j) / q_j(d_j))``; at the first
  rejection they draw from ``max(0, p_j - q_j)`` normalised, and after ``n`` acceptances from
  ``p_n``. Each token then follows the target's distribution exactly (Leviathan et al., Chen et al.,
  2023). An n-gram draft is a point mass: ``q_j(d_j) = 1``, so the residual is ``p_j`` without ``d_j``.

Randomness is keyed per position by the metadata's seeds: the acceptance test's uniform by
:func:`~infercore.spec_decode.uniforms.acceptance_uniforms`, the residual draw by ``gumbel_argmax``, so
a seeded request's tokens never depend on its neighbours. The acceptance walk is the ``accept_drafts``
custom op; the residual draw is the ``gumbel_argmax`` op over one position per row. Nothing waits for
the device.

``benchmark_acceptance_rate`` is for benchmarks only (no configuration field or request parameter
reaches it): every draft is accepted with that probability whatever the models say, so a benchmark
can measure the step at a chosen acceptance rate with any pair of models.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import torch

from infercore.sample.metadata import SamplingMetadata
from infercore.sample.sampler import Sampler
from infercore.spec_decode.device_index import upload
from infercore.spec_decode.proposer import PAD_TOKEN_ID
from infercore.spec_decode.uniforms import acceptance_uniforms


@dataclass
class VerifiedTokens:
    """Per row, the accepted drafts followed by one token of the target's: 1 to ``n + 1`` tokens."""

    #: [B, K + 1] int64, row ``b``'s tokens in its first ``num_tokens[b]`` entries, then ``PAD_TOKEN_ID``.
    token_ids: torch.Tensor
    #: [B] int64 in ``1..num_drafts[b] + 1``; ``num_tokens - 1`` drafts were accepted.
    num_tokens: torch.Tensor


class RejectionSampler(Sampler):
    """A :class:`Sampler` that also verifies draft tokens (:meth:`verify`)."""

    def __init__(self, seed: int | None = None, *, benchmark_acceptance_rate: float | None = None) -> None:
        super().__init__(seed)
        if benchmark_acceptance_rate is not None and not 0.0 <= benchmark_acceptance_rate <= 1.0:
            raise ValueError(f"benchmark_acceptance_rate must be in [0, 1] (got {benchmark_acceptance_rate})")
        self.benchmark_acceptance_rate = benchmark_acceptance_rate

    def verify(self, logits: torch.Tensor, metadata: SamplingMetadata, draft_token_ids: torch.Tensor,
               num_drafts: np.ndarray, draft_probs: torch.Tensor | None = None) -> VerifiedTokens:
        """Verify the drafts of B rows.

        ``logits`` [T, V] hold each row's ``num_drafts[b] + 1`` positions, rows in order (``T`` is
        ``sum(num_drafts + 1)``), and ``metadata`` has one row per position (see
        ``infercore.spec_decode.position_metadata``). ``draft_token_ids`` [B, K] int (on the logits'
        device) and ``num_drafts`` [B] (on the host) are the proposer's drafts; ``draft_probs`` [B, K, V]
        the draft distributions, or None for point masses. ``logits`` may be changed in place; the
        caller records the accepted tokens in its penalty tables.
        """
        device = logits.device
        num_rows, width = draft_token_ids.shape
        first_host = np.concatenate(([0], np.cumsum(num_drafts + 1)))[:-1]
        expected = int((num_drafts + 1).sum())
        if logits.shape[0] != expected:
            raise ValueError(f"verify takes sum(num_drafts + 1) = {expected} rows of logits; got {logits.shape[0]}")
        positions_host = first_host[:, None] + np.minimum(np.arange(width), num_drafts[:, None])
        # One upload: each row's first position, its drafts' positions, its draft count.
        first, positions, counts = upload(device, first_host, positions_host, num_drafts)
        positions = positions.view(num_rows, width)
        drafts = draft_token_ids.long().clamp_min(0)

        logits = self._target_logits(logits.float(), metadata)
        if metadata.temperature is None and draft_probs is None:
            return self._verify_all_greedy(logits, metadata, drafts, counts, first, positions)
        greedy_positions = (metadata.temperature == 0 if metadata.temperature is not None
                            else torch.ones(logits.shape[0], dtype=torch.bool, device=device))
        greedy = greedy_positions.index_select(0, first)
        scaled = logits if metadata.temperature is None else logits / torch.where(
            greedy_positions, 1.0, metadata.temperature).unsqueeze(1)
        accepted = self._accept(logits, scaled, metadata, drafts, counts, greedy, positions, draft_probs)
        final_position = first + accepted
        final_logits = self._final_logits(scaled.index_select(0, final_position), drafts, accepted, counts,
                                          greedy, draft_probs)
        seeds = (metadata.seeds.index_select(0, final_position) if metadata.seeds is not None
                 else torch.zeros(num_rows, dtype=torch.int64, device=device))
        final = self._gumbel_op(device)(final_logits, torch.where(greedy, 0.0, 1.0), seeds)
        return _verified(drafts, accepted, final)

    def _verify_all_greedy(self, logits: torch.Tensor, metadata: SamplingMetadata, drafts: torch.Tensor,
                           counts: torch.Tensor, first: torch.Tensor, positions: torch.Tensor) -> VerifiedTokens:
        """:meth:`verify` where every row is greedy and the drafts are point masses: one argmax per position;
        a draft passes where it is the argmax there (at the benchmark's rate: where its uniform is below the
        rate, as ``accept_drafts`` tests a point-mass draft), and the row's last token is the argmax at the
        first position not accepted. The same tokens as the general path, in far fewer launches."""
        num_rows, width = drafts.shape
        best = logits.argmax(dim=-1)  # [T]
        if self.benchmark_acceptance_rate is not None:
            uniforms = (acceptance_uniforms(metadata.seeds.index_select(0, positions.flatten())).view(num_rows, width)
                        if metadata.seeds is not None else torch.rand((num_rows, width), device=logits.device))
            ok = uniforms < self.benchmark_acceptance_rate
        else:
            ok = drafts == best.index_select(0, positions.flatten()).view(num_rows, width)
        ok &= torch.arange(width, device=ok.device) < counts.unsqueeze(1)
        accepted = ok.long().cumprod(dim=1).sum(dim=1)
        return _verified(drafts, accepted, best.index_select(0, first + accepted))

    def _target_logits(self, logits: torch.Tensor, metadata: SamplingMetadata) -> torch.Tensor:
        """The positions' logits after what the sampler applies before its draw, the top-k/top-p cut
        included (as -inf), not yet divided by the temperature."""
        self._adjust(logits, metadata, self._op("apply_penalties", logits.device))
        if metadata.top_k_top_p is not None:
            logits.masked_fill_(logits < metadata.top_k_top_p.threshold(logits), float("-inf"))
        return logits

    def _accept(self, logits: torch.Tensor, scaled: torch.Tensor, metadata: SamplingMetadata,
                drafts: torch.Tensor, counts: torch.Tensor, greedy: torch.Tensor, positions: torch.Tensor,
                draft_probs: torch.Tensor | None) -> torch.Tensor:
        """[B] drafts accepted per row (``accept_drafts``), or drawn at the benchmark's rate."""
        device = logits.device
        num_rows, width = drafts.shape
        flat_positions = positions.flatten()
        if metadata.seeds is not None:
            uniforms = acceptance_uniforms(metadata.seeds.index_select(0, flat_positions)).view(num_rows, width)
        else:
            uniforms = torch.rand((num_rows, width), device=device)
        target_argmax = logits.argmax(dim=-1).index_select(0, flat_positions).view(num_rows, width)
        accept = self._op("accept_drafts", device)
        if self.benchmark_acceptance_rate is not None:
            rate = torch.full((num_rows, width), self.benchmark_acceptance_rate, device=device)
            return accept(drafts, counts, torch.zeros_like(greedy), target_argmax, rate, torch.ones_like(rate),
                          uniforms)
        if metadata.temperature is None:  # all greedy: no probability is read
            target_probs = torch.zeros((num_rows, width), device=device)
        else:
            # Only the drafts' entries: the log-normaliser per position, then one gathered logit per draft.
            log_norm = scaled.logsumexp(dim=-1).index_select(0, flat_positions).view(num_rows, width)
            at_drafts = scaled.reshape(-1).index_select(0, flat_positions * scaled.shape[1] + drafts.flatten())
            target_probs = torch.nan_to_num((at_drafts.view(num_rows, width) - log_norm).exp(), nan=0.0)
        if draft_probs is None:
            q = torch.ones_like(target_probs)
        else:
            q = draft_probs.gather(2, drafts.unsqueeze(2)).squeeze(2).float()
        return accept(drafts, counts, greedy, target_argmax, target_probs, q, uniforms)

    @staticmethod
    def _final_logits(scaled: torch.Tensor, drafts: torch.Tensor, accepted: torch.Tensor, counts: torch.Tensor,
                      greedy: torch.Tensor, draft_probs: torch.Tensor | None) -> torch.Tensor:
        """[B, V] logits of each row's last token: the target's at the first rejected position minus the
        draft (the residual ``max(0, p - q)``), or the target's after the last accepted draft."""
        width = drafts.shape[1]
        if width == 0:
            return scaled
        rejected = (accepted < counts) & ~greedy
        at = accepted.clamp_max(width - 1).unsqueeze(1)
        if draft_probs is None:
            token = drafts.gather(1, at)
            kept = scaled.gather(1, token)
            residual = scaled.scatter(1, token, torch.where(rejected.unsqueeze(1), float("-inf"), kept))
        else:
            q = draft_probs.gather(1, at.unsqueeze(2).expand(-1, 1, draft_probs.shape[2])).squeeze(1).float()
            difference = (scaled.softmax(dim=-1) - q).clamp_min_(0.0)
            residual = torch.where(rejected.unsqueeze(1), difference.log(), scaled)
        # Rounding may leave no residual mass (p == q): the target's own distribution is then exact enough.
        empty = residual.amax(dim=-1, keepdim=True) == float("-inf")
        return torch.where(empty, scaled, residual)


def _verified(drafts: torch.Tensor, accepted: torch.Tensor, final: torch.Tensor) -> VerifiedTokens:
    """Each row's accepted drafts, then its ``final`` token, then ``PAD_TOKEN_ID`` ([B, K + 1])."""
    num_rows, width = drafts.shape
    columns = torch.arange(width + 1, device=drafts.device)
    padded = torch.cat([drafts, drafts.new_zeros(num_rows, 1)], dim=1)
    token_ids = torch.where(columns < accepted.unsqueeze(1), padded, PAD_TOKEN_ID)
    token_ids.scatter_(1, accepted.unsqueeze(1), final.unsqueeze(1))
    return VerifiedTokens(token_ids, accepted + 1)
