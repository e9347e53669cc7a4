"""The batched sampler: logits of one step in, one token per request (and its logprobs) out."""

from __future__ import annotations

from dataclasses import dataclass

import torch
from torch import nn

from infercore.sample.gumbel import log_exponential
from infercore.sample.logprobs import LogprobsTensors, gather_logprobs
from infercore.sample.metadata import SamplingMetadata
from infercore.sample.truncation import apply_min_p
from infercore.structured_output import apply_token_bitmask


@dataclass
class SamplerOutput:
    """One sampled token per row, and logprobs of the raw model distribution when any row asked."""

    sampled_token_ids: torch.Tensor
    logprobs: LogprobsTensors | None


class Sampler(nn.Module):
    """Turns [B, V] logits into tokens.

    Order (as in vLLM): grammar bitmask, logit bias and min_tokens, penalties; greedy rows take the
    argmax here; then temperature, min-p, top-k/top-p, and a Gumbel-max draw. Logprobs describe the
    model's raw distribution, before any of these. ``logits`` may be changed in place.
    """

    def forward(self, logits: torch.Tensor, metadata: SamplingMetadata) -> SamplerOutput:
        logits = logits.float()
        raw_logprobs = None
        if metadata.max_num_logprobs is not None:
            raw_logprobs = torch.log_softmax(logits, dim=-1)
        self._adjust(logits, metadata)
        sampled = self._sample(logits, metadata)
        logprobs = None
        if raw_logprobs is not None and metadata.max_num_logprobs is not None:
            logprobs = gather_logprobs(raw_logprobs, sampled, metadata.max_num_logprobs)
        return SamplerOutput(sampled, logprobs)

    @staticmethod
    def _adjust(logits: torch.Tensor, metadata: SamplingMetadata) -> None:
        if metadata.grammar_bitmask is not None:
            apply_token_bitmask(logits, metadata.grammar_bitmask)
        if metadata.logit_bias is not None:
            metadata.logit_bias.apply(logits)
        if metadata.penalties is not None:
            metadata.penalties.apply(logits)

    @staticmethod
    def _sample(logits: torch.Tensor, metadata: SamplingMetadata) -> torch.Tensor:
        if metadata.all_greedy:
            return logits.argmax(dim=-1)
        greedy_tokens = None if metadata.all_random else logits.argmax(dim=-1)
        if metadata.temperature is not None:
            logits.div_(metadata.temperature)
        if metadata.min_p is not None:
            apply_min_p(logits, metadata.min_p)
        candidates = None if metadata.top_k_top_p is None else metadata.top_k_top_p.apply(logits)
        if candidates is None:
            log_q = log_exponential(logits.shape, metadata.generators, metadata.vocab_size, logits.device)
            sampled = logits.sub_(log_q).argmax(dim=-1)
        else:
            log_q = log_exponential(candidates.logits.shape, metadata.generators, metadata.vocab_size,
                                    logits.device, candidates.token_ids)
            best = candidates.logits.sub_(log_q).argmax(dim=-1, keepdim=True)
            sampled = candidates.token_ids.gather(1, best).squeeze(1)
        if metadata.greedy is not None and greedy_tokens is not None:
            sampled = torch.where(metadata.greedy, greedy_tokens, sampled)
        return sampled
