"""Counters of speculative decoding kept by the scheduler: how many drafts were verified and accepted."""

from __future__ import annotations

from typing import Any


class SpecDecodeCounters:
    """Totals since the scheduler started, with vLLM's meanings: a *draft* is one request's verified
    run of draft tokens in one step; ``accepted_per_pos[j]`` counts the drafts whose token ``j`` was
    accepted (so it never grows faster than ``accepted_per_pos[j - 1]``)."""

    def __init__(self, num_speculative_tokens: int) -> None:
        self.num_drafts = 0
        self.num_draft_tokens = 0
        self.num_accepted_tokens = 0
        self.accepted_per_pos = [0] * num_speculative_tokens

    def count(self, num_draft_tokens: int, num_accepted: int) -> None:
        """One request's step verified ``num_draft_tokens`` drafts and accepted the first ``num_accepted``."""
        self.num_drafts += 1
        self.num_draft_tokens += num_draft_tokens
        self.num_accepted_tokens += num_accepted
        for j in range(num_accepted):
            self.accepted_per_pos[j] += 1

    def as_stats(self) -> dict[str, Any]:
        """The ``SchedulerStats`` fields these counters fill (none without speculative decoding)."""
        if not self.accepted_per_pos:
            return {}
        return {"spec_num_drafts": self.num_drafts, "spec_num_draft_tokens": self.num_draft_tokens,
                "spec_num_accepted_tokens": self.num_accepted_tokens,
                "spec_num_accepted_tokens_per_pos": list(self.accepted_per_pos)}
