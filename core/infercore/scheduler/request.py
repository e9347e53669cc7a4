"""Request: the engine-side state of one sequence, from arrival to finish."""

from __future__ import annotations

import enum

from infercore.lora.request import LoRARequest
from infercore.sampling_params import SamplingParams
from infercore.scheduler.draft_backoff import DraftBackoff
from infercore.wire.messages import EngineCoreRequest, FinishReason, Logprobs
from infercore.wire.multimodal import MultiModalFeature


class RequestStatus(enum.IntEnum):
    """Where a request is in its life. Every status from FINISHED_STOPPED on is final."""

    WAITING = 0
    RUNNING = 1
    PREEMPTED = 2
    FINISHED_STOPPED = 3
    FINISHED_LENGTH = 4
    FINISHED_ABORTED = 5
    FINISHED_ERROR = 6

    @staticmethod
    def is_finished(status: RequestStatus) -> bool:
        return status >= RequestStatus.FINISHED_STOPPED

    @staticmethod
    def finish_reason(status: RequestStatus) -> FinishReason | None:
        """The wire finish reason of a final status; None while the request is live."""
        return _FINISH_REASONS.get(status)


_FINISH_REASONS = {
    RequestStatus.FINISHED_STOPPED: FinishReason.STOP,
    RequestStatus.FINISHED_LENGTH: FinishReason.LENGTH,
    RequestStatus.FINISHED_ABORTED: FinishReason.ABORT,
    RequestStatus.FINISHED_ERROR: FinishReason.ERROR,
}


class Request:
    """The scheduler's view of one sequence.

    ``all_token_ids`` is the prompt followed by the outputs, kept as one list that grows by append;
    ``num_computed_tokens`` counts the leading tokens whose KV is in the cache. The scheduler's one
    rule is to give a request tokens until ``num_computed_tokens`` catches up with ``num_tokens``.
    """

    __slots__ = (
        "request_id", "prompt_token_ids", "sampling_params", "eos_token_id", "arrival_time", "priority",
        "cache_salt", "parent_id", "output_token_ids", "all_token_ids", "num_prompt_tokens",
        "num_computed_tokens", "status", "stop_reason", "num_cached_tokens", "block_hashes",
        "max_tokens", "min_tokens", "stop_eos_token_id", "stop_token_ids", "num_preemptions",
        "prompt_logprobs_parts", "prompt_logprobs_sent", "num_output_placeholders", "lora_request", "lora_id",
        "spec_token_ids", "draft_backoff", "mm_features", "num_tokens_sent",
    )

    def __init__(
        self,
        request_id: str,
        prompt_token_ids: list[int],
        sampling_params: SamplingParams,
        eos_token_id: int | None = None,
        arrival_time: float = 0.0,
        priority: int = 0,
        cache_salt: str | None = None,
        parent_id: str | None = None,
        lora_request: LoRARequest | None = None,
        mm_features: list[MultiModalFeature] | None = None,
    ) -> None:
        self.request_id = request_id
        self.prompt_token_ids = prompt_token_ids
        self.sampling_params = sampling_params
        self.eos_token_id = eos_token_id
        self.arrival_time = arrival_time
        self.priority = priority
        self.cache_salt = cache_salt
        self.parent_id = parent_id
        self.lora_request = lora_request
        #: The prompt's images in prompt order (None: text only): their hashes join the block hashes,
        #: and the scheduler budgets their encoder work (:mod:`infercore.scheduler.encoder_budget`).
        self.mm_features = mm_features or None
        #: The adapter's id (0: the base model); it joins the prefix-cache hashes.
        self.lora_id = 0 if lora_request is None else lora_request.lora_int_id

        self.output_token_ids: list[int] = []
        self.all_token_ids: list[int] = list(prompt_token_ids)
        self.num_prompt_tokens = len(prompt_token_ids)
        self.num_computed_tokens = 0
        #: Tokens being sampled by a step still in flight (async scheduling): counted, not yet known.
        self.num_output_placeholders = 0
        #: Draft tokens the proposer made after the last step (speculative decoding); the next schedule
        #: takes them as scheduled tokens or drops them.
        self.spec_token_ids: list[int] = []
        #: Its acceptance window and pause (:mod:`infercore.scheduler.draft_backoff`); None until it first
        #: verifies drafts with ``disable_by_acceptance`` set.
        self.draft_backoff: DraftBackoff | None = None
        #: Tokens the workers were given (pipeline parallelism: they learn sampled tokens from the scheduler).
        self.num_tokens_sent = 0
        self.status = RequestStatus.WAITING
        self.stop_reason: int | str | None = None
        #: Prefix-cache hit length at the first schedule; -1 until then.
        self.num_cached_tokens = -1
        #: Chained hashes of the full blocks of ``all_token_ids``, extended by the KV cache manager.
        self.block_hashes: list[bytes] = []
        self.num_preemptions = 0
        #: Prompt logprobs arrive one prefill chunk at a time and go out with the first output.
        self.prompt_logprobs_parts: list[Logprobs] = []
        self.prompt_logprobs_sent = False

        # Stop conditions resolved once so the per-token check is a few comparisons.
        sp = sampling_params
        self.max_tokens = sp.max_tokens if sp.max_tokens is not None else 1 << 62
        self.min_tokens = sp.min_tokens
        # ignore_eos also ignores the generation config's extra end tokens (all_stop_token_ids),
        # as they are EOS tokens by another name; user stop_token_ids still apply.
        self.stop_eos_token_id = None if sp.ignore_eos else eos_token_id
        stop_ids = set(sp.stop_token_ids or ())
        if not sp.ignore_eos:
            stop_ids.update(sp.all_stop_token_ids or ())
        stop_ids.discard(self.stop_eos_token_id)
        self.stop_token_ids = frozenset(stop_ids)

    @classmethod
    def from_engine_core_request(cls, req: EngineCoreRequest) -> Request:
        return cls(
            request_id=req.request_id,
            prompt_token_ids=req.prompt_token_ids,
            sampling_params=req.sampling_params,
            eos_token_id=req.eos_token_id,
            arrival_time=req.arrival_time,
            priority=req.priority,
            cache_salt=req.cache_salt,
            parent_id=req.parent_id,
            lora_request=req.lora_request,
            mm_features=req.mm_features,
        )

    @property
    def num_tokens(self) -> int:
        return len(self.all_token_ids)

    @property
    def num_output_tokens(self) -> int:
        return len(self.output_token_ids)

    @property
    def is_finished(self) -> bool:
        return self.status >= RequestStatus.FINISHED_STOPPED

    def __repr__(self) -> str:
        return (f"Request({self.request_id!r}, status={self.status.name}, tokens={self.num_tokens}, "
                f"computed={self.num_computed_tokens})")
