"""A sampled step whose tokens may still be on their way from the device."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import numpy as np
import torch

from infercore.wire.messages import Logprobs
from infercore.worker.input_batch import RequestState


@dataclass
class PendingSample:
    """What the runner needs to finish a step once its sampled tokens reach the host."""

    req_ids: list[str]
    sampled_idx: np.ndarray  # batch indices of the sampled requests
    states: list[RequestState]  # their states, in the same order
    prompt_logprobs: dict[str, Logprobs] | None
    tokens: torch.Tensor | None = None  # sampled ids on the device
    tokens_host: torch.Tensor | None = None  # pinned host copy, filled asynchronously
    event: Any = None  # recorded after the host copy was queued
    logprobs: Any = None  # LogprobsTensors of the sample, if any request asked
    #: A speculative step's VerifiedSample (``worker/spec_decode_step.py``): 1..k+1 tokens per row.
    verified: Any = None
    #: The step's BatchLayout (a model-based proposer catches up on the step's tokens from it).
    layout: Any = None
    #: Whether the proposer drafts for the next step (``SchedulerOutput.draft_next``).
    draft_next: bool = True
    #: A step that drafts nothing, whose catch-up (if its proposer needs one) is already queued on the device: its
    #: tokens come back as a plain sample and nothing is left for the proposer once they arrive.
    caught_up: bool = False
    pooled: dict[str, torch.Tensor] | None = None  # pooling requests' results on the device (infercore.pooling)
