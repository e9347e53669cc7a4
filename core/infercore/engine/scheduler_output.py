"""What the scheduler hands the model runner each step, and what the runner hands back."""

from __future__ import annotations

from dataclasses import dataclass, field

from infercore.engine.messages import Logprobs
from infercore.sampling_params import SamplingParams


@dataclass(slots=True)
class NewRequestData:
    """A request the runner has no state for: first scheduled, or resumed after preemption.

    ``num_computed_tokens`` tokens (prefix-cache hits) already have KV in ``block_ids``; the
    runner computes from there. ``output_token_ids`` is non-empty for a resumed request, whose
    prompt and outputs so far are recomputed.
    """

    req_id: str
    prompt_token_ids: list[int]
    sampling_params: SamplingParams
    block_ids: list[int]
    num_computed_tokens: int
    output_token_ids: list[int] = field(default_factory=list)


@dataclass(slots=True)
class CachedRequestData:
    """A request the runner scheduled before: only the blocks appended since, and how many of its
    tokens were computed before this step (the runner appends the tokens it sampled itself)."""

    req_id: str
    new_block_ids: list[int]
    num_computed_tokens: int


@dataclass(slots=True)
class SchedulerOutput:
    """One step's plan.

    ``num_scheduled_tokens[req_id]`` tokens of each scheduled request are computed, starting at its
    ``num_computed_tokens``. ``finished_req_ids`` lists requests finished, aborted or preempted since
    the previous step: the runner drops their state before adding the new requests.
    """

    scheduled_new_reqs: list[NewRequestData]
    scheduled_cached_reqs: list[CachedRequestData]
    num_scheduled_tokens: dict[str, int]
    total_num_scheduled_tokens: int
    finished_req_ids: set[str]


@dataclass(slots=True)
class ModelRunnerOutput:
    """What one step produced: for each scheduled request (in ``req_ids`` order) the tokens sampled,
    ``[]`` when its prefill chunk did not reach the end of its tokens."""

    req_ids: list[str]
    sampled_token_ids: list[list[int]]
    logprobs: dict[str, Logprobs] | None = None
    prompt_logprobs: dict[str, Logprobs] | None = None
