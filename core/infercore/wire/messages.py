"""Typed messages between the engine's front end (API process or offline LLM) and EngineCore.

They cross the process boundary as msgpack (msgspec), never pickle.
"""

from __future__ import annotations

import enum

import msgspec

from infercore.sampling_params import SamplingParams
from infercore.wire.lora_request import LoRARequest
from infercore.wire.multimodal import MultiModalFeature
from infercore.wire.pooled import PooledTensor


class FinishReason(enum.IntEnum):
    """Why a request stopped. ``str()`` gives the OpenAI name."""

    STOP = 0
    LENGTH = 1
    ABORT = 2
    ERROR = 3

    def __str__(self) -> str:
        return ("stop", "length", "abort", "error")[self.value]


class EngineCoreRequest(msgspec.Struct, array_like=True, omit_defaults=True):
    """A tokenized, validated request (one per sampled sequence: n>1 is fanned out by the front end,
    with ``parent_id`` linking siblings so they share prompt blocks)."""

    request_id: str
    prompt_token_ids: list[int]
    sampling_params: SamplingParams
    arrival_time: float
    eos_token_id: int | None = None
    priority: int = 0
    cache_salt: str | None = None
    parent_id: str | None = None
    lora_request: LoRARequest | None = None
    #: The prompt's images (:mod:`infercore.wire.multimodal`), in prompt order; None: text only.
    mm_features: list[MultiModalFeature] | None = None


class Logprobs(msgspec.Struct, array_like=True):
    """Log-probabilities of positions: for each position the chosen token first, then the top-k.

    ``token_ids[i]`` and ``logprobs[i]`` are parallel lists; ``ranks[i]`` is the chosen token's rank
    (1 = most likely) in the full distribution.
    """

    token_ids: list[list[int]]
    logprobs: list[list[float]]
    ranks: list[int]


class EngineCoreOutput(msgspec.Struct, array_like=True, omit_defaults=True):
    """What one step produced for one request."""

    request_id: str
    new_token_ids: list[int]
    new_logprobs: Logprobs | None = None
    prompt_logprobs: Logprobs | None = None
    finish_reason: FinishReason | None = None
    stop_reason: int | str | None = None
    num_cached_tokens: int = 0
    error: str | None = None
    #: A pooling request's result (infercore.pooling), with its finishing output.
    pooled: PooledTensor | None = None

    @property
    def finished(self) -> bool:
        return self.finish_reason is not None


class SchedulerStats(msgspec.Struct, array_like=True, omit_defaults=True):
    """Gauges and counters the engine reports with each batch of outputs."""

    num_running: int = 0
    num_waiting: int = 0
    kv_cache_usage: float = 0.0
    prefix_cache_queries: int = 0
    prefix_cache_hits: int = 0
    num_free_blocks: int = 0
    num_total_blocks: int = 0
    num_preemptions: int = 0
    #: Speculative decoding counters since the scheduler started: verified steps of a request with
    #: drafts, drafts verified, drafts accepted, and drafts accepted at each draft position.
    spec_num_drafts: int = 0
    spec_num_draft_tokens: int = 0
    spec_num_accepted_tokens: int = 0
    spec_num_accepted_tokens_per_pos: list[int] = []


class EngineCoreOutputs(msgspec.Struct, array_like=True, omit_defaults=True):
    """One step's outputs (only requests with something new) plus the engine's stats."""

    outputs: list[EngineCoreOutput] = []
    stats: SchedulerStats | None = None
    timestamp: float = 0.0
