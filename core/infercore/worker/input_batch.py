"""InputBatch: the persistent per-row state of the requests a model runner holds, in one place."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Protocol

import numpy as np
import torch

from infercore.lora.request import LoRARequest
from infercore.sample.row_state import SamplingRowState
from infercore.sampling_params import SamplingParams
from infercore.wire.scheduler_output import SchedulerOutput


class AdapterSlots(Protocol):
    """Device slots of LoRA adapters (:class:`infercore.lora.manager.LoRAManager`)."""

    def acquire(self, request: LoRARequest) -> int: ...

    def release(self, slot: int) -> None: ...


@dataclass
class RequestState:
    """What the runner keeps for a request between steps: its row in the persistent arrays,
    and its tokens (a seeded request's random draw follows from its seed and output index alone)."""

    req_id: str
    row: int
    prompt_token_ids: list[int]
    output_token_ids: list[int]
    sampling_params: SamplingParams
    num_blocks: int

    @property
    def num_tokens(self) -> int:
        return len(self.prompt_token_ids) + len(self.output_token_ids)


class InputBatch:
    """One row per running request, kept between steps, as columns the step reads with numpy:

    - ``token_ids[row, :num_tokens[row]]``: the prompt and the tokens sampled so far;
    - ``num_computed[row]``: tokens whose KV is in the cache (the scheduler's count);
    - ``block_table[row]``: the row's block ids in the layout's encoding (interleaved by KV cache
      group, :mod:`infercore.wire.kv_layout`);
    - ``num_drafts[row]``: draft tokens the row verifies this step (speculative decoding); the drafts
      themselves sit in ``token_ids`` right after the row's tokens, so the step gathers them as it
      gathers any token, and a verified draft is already in place when it is appended;
    - ``sampling``: the row's sampling parameters and penalty tables (:class:`SamplingRowState`);
    - ``adapter_slot[row]``: the device slot of the row's LoRA adapter (-1: none), from ``adapters``;
    - ``requests``: each request's :class:`RequestState` (its row, its tokens as lists).

    ``max_positions_per_row`` is how many positions of a row a step samples at most (``1 + k`` when
    speculating).

    A workload that brings something per row (an adapter slot, draft tokens, pooling parameters,
    encoder outputs) adds a column here, written in :meth:`add_request` and cleared in
    :meth:`remove_request`, and the runner reads it when it prepares a step; it never becomes a branch
    of the runner or a graph key.
    """

    def __init__(self, *, max_num_reqs: int, max_model_len: int, block_size: int, num_kv_groups: int, vocab_size: int,
                 device: torch.device, pin_memory: bool, eos_token_id: int | None,
                 adapters: AdapterSlots | None = None, max_positions_per_row: int = 1) -> None:
        self.max_num_reqs = max_num_reqs
        self.max_model_len = max_model_len
        self.eos_token_id = eos_token_id
        self.max_blocks_per_req = -(-max_model_len // block_size)
        self.token_ids = np.zeros((max_num_reqs, max_model_len), dtype=np.int64)
        self.block_table = np.zeros((max_num_reqs, self.max_blocks_per_req * num_kv_groups), dtype=np.int32)
        self.num_computed = np.zeros(max_num_reqs, dtype=np.int64)
        self.num_tokens = np.zeros(max_num_reqs, dtype=np.int64)
        self.adapters = adapters
        self.adapter_slot = np.full(max_num_reqs, -1, dtype=np.int32)
        self.num_drafts = np.zeros(max_num_reqs, dtype=np.int64)
        self.sampling = SamplingRowState(max_num_reqs, vocab_size, device, pin_memory,
                                         max_positions=max_num_reqs * max_positions_per_row)
        self.requests: dict[str, RequestState] = {}
        #: Running requests that asked for prompt logprobs (a step without any skips looking for them).
        self.prompt_logprob_reqs: set[str] = set()
        self._free_rows = list(range(max_num_reqs - 1, -1, -1))

    def update(self, so: SchedulerOutput) -> list[int]:
        """Drop finished requests, add new ones and apply the cached ones' new blocks and computed
        counts; returns the rows of the step's requests in ``so.req_ids`` order."""
        requests = self.requests
        for req_id in so.finished_req_ids:
            self.remove_request(req_id)
        cached = so.scheduled_cached_reqs
        rows = [requests[r].row for r in cached.req_ids]
        if rows:
            self.num_computed[rows] = cached.num_computed_tokens
        if cached.new_token_ids:  # pipeline stages: the tokens sampled since the request's last step
            self.append_verified([requests[r] for r in cached.req_ids], cached.new_token_ids)
        for i, block_ids in cached.new_blocks():
            state = requests[cached.req_ids[i]]
            n = len(block_ids)
            self.block_table[state.row, state.num_blocks: state.num_blocks + n] = block_ids
            state.num_blocks += n
        for new in so.scheduled_new_reqs:
            rows.append(self.add_request(new.req_id, new.prompt_token_ids, new.output_token_ids,
                                         new.sampling_params, new.block_ids, new.num_computed_tokens,
                                         new.lora_request))
        self.num_drafts[rows] = 0
        for req_id, drafts in so.scheduled_spec_decode_tokens.items():
            row = requests[req_id].row
            start = self.num_tokens[row]
            self.token_ids[row, start: start + len(drafts)] = drafts
            self.num_drafts[row] = len(drafts)
        return rows

    def add_request(self, req_id: str, prompt_token_ids: list[int], output_token_ids: list[int],
                    params: SamplingParams, block_ids: list[int], num_computed_tokens: int,
                    lora_request: LoRARequest | None = None) -> int:
        """Give a new (or resumed) request a row; returns the row."""
        slot = -1
        if lora_request is not None:
            if self.adapters is None:
                raise ValueError("a request names a LoRA adapter but the engine runs without enable_lora")
            slot = self.adapters.acquire(lora_request)
        row = self._free_rows.pop()
        self.adapter_slot[row] = slot
        tokens = list(prompt_token_ids) + list(output_token_ids)
        self.token_ids[row, : len(tokens)] = tokens
        self.num_tokens[row] = len(tokens)
        self.num_computed[row] = num_computed_tokens
        self.block_table[row, : len(block_ids)] = block_ids
        self.requests[req_id] = RequestState(req_id, row, list(prompt_token_ids), list(output_token_ids), params,
                                             len(block_ids))
        self.sampling.add(row, params, prompt_token_ids, output_token_ids, self.eos_token_id)
        if params.prompt_logprobs is not None:
            self.prompt_logprob_reqs.add(req_id)
        return row

    def remove_request(self, req_id: str) -> None:
        """Free the row of a finished, aborted or preempted request (nothing when it has none)."""
        state = self.requests.pop(req_id, None)
        if state is not None:
            self._free_rows.append(state.row)
            if self.adapter_slot[state.row] >= 0:
                self.adapters.release(int(self.adapter_slot[state.row]))
                self.adapter_slot[state.row] = -1
            self.prompt_logprob_reqs.discard(req_id)

    def is_live(self, state: RequestState) -> bool:
        """Whether ``state`` still holds its row (it was not finished or preempted since)."""
        return self.requests.get(state.req_id) is state

    def append_verified(self, states: list[RequestState], tokens: list[list[int]]) -> None:
        """Fold each live request's verified tokens (its accepted drafts and one more) into its row."""
        for state, new in zip(states, tokens, strict=True):
            if self.requests.get(state.req_id) is not state:
                continue
            state.output_token_ids.extend(new)
            start = self.num_tokens[state.row]
            fits = new[: max(self.max_model_len - start, 0)]
            self.token_ids[state.row, start: start + len(fits)] = fits
            self.num_tokens[state.row] = start + len(new)

    def append_sampled(self, states: list[RequestState], tokens: list[int]) -> None:
        """Fold one sampled token into each live request of ``states``; the others' rows may be reused."""
        live_rows, live_tokens = [], []
        requests = self.requests
        for state, tok in zip(states, tokens, strict=True):
            if requests.get(state.req_id) is not state:
                continue
            state.output_token_ids.append(tok)
            live_rows.append(state.row)
            live_tokens.append(tok)
        rows, values = np.array(live_rows, dtype=np.int64), np.array(live_tokens, dtype=np.int64)
        positions = self.num_tokens[rows]
        fits = positions < self.max_model_len
        self.token_ids[rows[fits], positions[fits]] = values[fits]
        self.num_tokens[rows] += 1
