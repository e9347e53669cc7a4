"""A step's logprobs: of the tokens it sampled (or verified) and of the prompt tokens it computed."""

from __future__ import annotations

from collections.abc import Callable, Sequence

import torch

from infercore.sample import LogprobsTensors, compute_prompt_logprobs
from infercore.wire.messages import Logprobs
from infercore.worker.batch_layout import BatchLayout
from infercore.worker.input_batch import InputBatch, RequestState


def step_prompt_logprobs(batch: InputBatch, req_ids: list[str], layout: BatchLayout, out: torch.Tensor,
                         logits_of: Callable[[torch.Tensor], torch.Tensor],
                         device: torch.device) -> dict[str, Logprobs] | None:
    """Logprobs of prompt tokens computed in this step's chunk (position p predicts token p + 1);
    ``out`` holds the step's rows (hidden states or logits) and ``logits_of`` turns rows into logits."""
    result: dict[str, Logprobs] | None = None
    for i, req_id in enumerate(req_ids):
        state = batch.requests[req_id]
        k = state.sampling_params.prompt_logprobs
        if k is None:
            continue
        start = int(layout.num_computed[i])
        end = min(start + int(layout.num_scheduled[i]), len(state.prompt_token_ids) - 1)
        if end <= start:
            continue
        q0 = int(layout.query_start_loc[i])
        logits = logits_of(out[q0: q0 + end - start])
        targets = torch.tensor(state.prompt_token_ids[start + 1: end + 1], device=device)
        result = result or {}
        result[req_id] = compute_prompt_logprobs(logits, targets, k)
    return result


def sampled_logprobs(logprobs: LogprobsTensors, first: Sequence[int], tokens: list[list[int]],
                     states: list[RequestState]) -> dict[str, Logprobs]:
    """Per request that asked, the logprobs of its new tokens: request ``j`` has one row of ``logprobs``
    per token of ``tokens[j]`` from row ``first[j]`` on (one per step; 1..k+1 when verifying drafts)."""
    cpu = logprobs.cpu()
    result = {}
    for j, state in enumerate(states):
        k = state.sampling_params.logprobs
        if k is not None:
            start = int(first[j])
            result[state.req_id] = cpu.rows_to_logprobs(slice(start, start + len(tokens[j])), k)
    return result
