"""What the scheduler hands the model runner each step, and what the runner hands back."""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass, field

from infercore.sampling_params import SamplingParams
from infercore.wire.lora_request import LoRARequest
from infercore.wire.messages import Logprobs
from infercore.wire.multimodal import MultiModalFeature
from infercore.wire.pooled import PooledTensor


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
    #: The adapter the request runs with (None: the base model).
    lora_request: LoRARequest | None = None
    #: The prompt's images (None: text only); the runner encodes those its scheduled tokens reach.
    mm_features: list[MultiModalFeature] | None = None


@dataclass(slots=True)
class CachedRequests:
    """The requests the runner holds from earlier steps, as columns: entry ``i`` of each list is
    request ``req_ids[i]``.

    ``num_computed_tokens[i]`` tokens of it were computed before this step (the runner appends the
    tokens it sampled itself). Blocks appended to block tables since the previous step are stored
    sparsely, since most decode steps append none: request ``req_ids[new_block_req_indices[k]]``
    gets ``new_block_ids[new_block_offsets[k]:new_block_offsets[k + 1]]``, with
    ``new_block_req_indices`` ascending.

    Under pipeline parallelism no stage samples for itself: ``new_token_ids[i]`` then holds the tokens
    request ``req_ids[i]`` was given since the runner last saw it (empty without pipeline stages).
    """

    req_ids: list[str] = field(default_factory=list)
    num_computed_tokens: list[int] = field(default_factory=list)
    new_block_req_indices: list[int] = field(default_factory=list)
    new_block_offsets: list[int] = field(default_factory=lambda: [0])
    new_block_ids: list[int] = field(default_factory=list)
    new_token_ids: list[list[int]] = field(default_factory=list)

    def add_new_blocks(self, index: int, block_ids: list[int]) -> None:
        """Record blocks appended to the table of ``req_ids[index]`` (indices must come in ascending order)."""
        self.new_block_req_indices.append(index)
        self.new_block_ids.extend(block_ids)
        self.new_block_offsets.append(len(self.new_block_ids))

    def remove(self, index: int) -> None:
        """Take out entry ``index`` and its new blocks (a request preempted later in the same step)."""
        runs = [(i - (i > index), ids) for i, ids in self.new_blocks() if i != index]
        del self.req_ids[index]
        del self.num_computed_tokens[index]
        if self.new_token_ids:
            del self.new_token_ids[index]
        self.new_block_req_indices = []
        self.new_block_offsets = [0]
        self.new_block_ids = []
        for i, ids in runs:
            self.add_new_blocks(i, ids)

    def new_blocks(self) -> Iterator[tuple[int, list[int]]]:
        """``(index into req_ids, new block ids)`` of each request that got blocks this step."""
        ids, offsets = self.new_block_ids, self.new_block_offsets
        for k, index in enumerate(self.new_block_req_indices):
            yield index, ids[offsets[k]:offsets[k + 1]]


@dataclass(slots=True)
class SchedulerOutput:
    """One step's plan.

    The step's requests are :attr:`req_ids`: the cached ones first (``scheduled_cached_reqs`` order),
    then the new ones. ``num_scheduled_tokens[i]`` tokens of request ``req_ids[i]`` are computed,
    starting at its ``num_computed_tokens``. ``finished_req_ids`` lists requests finished, aborted or
    preempted since the previous step: the runner drops their state before adding the new requests.

    ``scheduled_spec_decode_tokens`` maps a request that speculates in this step to its draft tokens:
    they are the last ``len(drafts)`` of its scheduled tokens (each counts in the token budget), after
    the one token it would decode without them; the runner verifies all of them in the one forward pass.
    """

    scheduled_new_reqs: list[NewRequestData]
    scheduled_cached_reqs: CachedRequests
    num_scheduled_tokens: list[int]
    total_num_scheduled_tokens: int
    finished_req_ids: set[str]
    scheduled_spec_decode_tokens: dict[str, list[int]] = field(default_factory=dict)
    #: Speculative decoding: whether this step makes drafts for the next one. False where every running
    #: request's next step verifies none, each paused by the draft back-off (the worker applies
    #: ``disable_by_batch_size`` itself, from the step's request count).
    draft_next: bool = True

    @property
    def req_ids(self) -> list[str]:
        """The scheduled requests in the order of ``num_scheduled_tokens``."""
        return self.scheduled_cached_reqs.req_ids + [new.req_id for new in self.scheduled_new_reqs]


@dataclass(slots=True)
class ModelRunnerOutput:
    """What one step produced: for each scheduled request (in ``req_ids`` order) the tokens sampled,
    ``[]`` when its prefill chunk did not reach the end of its tokens; a speculating request gets its
    accepted drafts and one token of the target's (1 to ``k + 1`` tokens), with one logprobs position
    per token.

    ``draft_token_ids`` (speculative decoding; None without) holds, in ``req_ids`` order, the drafts the
    proposer made from each sampled request's history after this step's tokens: the scheduler may
    schedule them in the next step (``[]``: none)."""

    req_ids: list[str]
    sampled_token_ids: list[list[int]]
    logprobs: dict[str, Logprobs] | None = None
    prompt_logprobs: dict[str, Logprobs] | None = None
    draft_token_ids: list[list[int]] | None = None
    #: Results of pooling requests whose prompt this step finished (infercore.pooling).
    pooler_output: dict[str, PooledTensor] | None = None
