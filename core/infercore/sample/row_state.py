"""Sampling parameters kept per batch row for a request's lifetime, gathered by row each step.

The runner gives each running request a row; :meth:`SamplingRowState.add` writes the request's
sampling parameters into host arrays at that row once, when it joins, and its prompt and outputs into
the device penalty tables when it has penalties. Each step :meth:`SamplingRowState.gather` picks the
sampled rows' values with numpy, packs them into one pinned staging buffer and sends them to the
device in a single non-blocking copy. Which options the batch uses, the largest top-k and the
logprob count are read from the host arrays, so building a step's metadata never waits for the device.
"""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Sequence

import numpy as np
import torch

from infercore.sample.gumbel import SEED_MASK, fresh_seeds
from infercore.sample.logit_bias import SparseLogitBias
from infercore.sample.metadata import SamplingMetadata
from infercore.sample.penalties import PenaltyTables, PenaltyTensors
from infercore.sample.truncation import TopKTopP
from infercore.sampling_params import SamplingParams

#: The seed spread of ``infercore.sample.gumbel.step_seed``, applied once per request on the host.
_SEED_SPREAD = 0x9E3779B97F4A7C15
_U64 = (1 << 64) - 1
#: int64 fields sent per row each step: row seed, top-k, row index; then float32 fields.
_INT_FIELDS = 3
_FLOAT_FIELDS = 6
_ROW_BYTES = 8 * _INT_FIELDS + 4 * _FLOAT_FIELDS


def _stride(n: int) -> int:
    """Entries per field of an ``n``-row step, a multiple of 4: every field starts 16-byte aligned, so
    kernels that take a field never meet a pointer alignment they were not built for."""
    return -(-n // 4) * 4


class SamplingRowState:
    """Per-row sampling parameters of up to ``num_rows`` requests (host arrays), their penalty tables
    on ``device``, and two alternating pinned staging buffers for the per-step copy.

    A step gathers at most ``max_positions`` sampling rows (``num_rows`` when None); a row may appear
    more than once (speculative decoding samples each verified position of a row)."""

    def __init__(self, num_rows: int, vocab_size: int, device: torch.device, pin_memory: bool = False,
                 max_positions: int | None = None) -> None:
        self.num_rows = num_rows
        self.vocab_size = vocab_size
        self.device = device
        self.greedy = np.ones(num_rows, dtype=bool)
        self.temperature = np.zeros(num_rows, dtype=np.float32)
        self.top_k = np.zeros(num_rows, dtype=np.int64)
        self.top_p = np.ones(num_rows, dtype=np.float32)
        self.min_p_margin = np.full(num_rows, -np.inf, dtype=np.float32)
        self.repetition = np.ones(num_rows, dtype=np.float32)
        self.presence = np.zeros(num_rows, dtype=np.float32)
        self.frequency = np.zeros(num_rows, dtype=np.float32)
        self.penalised = np.zeros(num_rows, dtype=bool)
        self.seeded = np.zeros(num_rows, dtype=bool)
        #: ``seed * _SEED_SPREAD`` modulo 2**64: a step's row seed adds the output index and masks.
        self.seed_base = np.zeros(num_rows, dtype=np.uint64)
        #: Top logprobs each row asked for, clipped to the vocabulary; -1 for none.
        self.num_logprobs = np.full(num_rows, -1, dtype=np.int64)
        #: Rows with a logit bias or a min_tokens stop mask (their sparse biases are built each step).
        self.biased = np.zeros(num_rows, dtype=bool)
        self.params: list[SamplingParams | None] = [None] * num_rows
        self.eos_token_ids: list[int | None] = [None] * num_rows
        self.penalty_tables: PenaltyTables | None = None
        pin = pin_memory and device.type != "cpu"
        capacity = _stride(max(num_rows, max_positions or 0)) * _ROW_BYTES
        self._staging = [torch.empty(capacity, dtype=torch.uint8, pin_memory=pin) for _ in range(2)]
        self._on_device = torch.empty(capacity, dtype=torch.uint8, device=device)
        self._next = 0
        #: Bumped by every ``add``: a step's rows with the same version have the same parameters.
        self._version = 0
        #: What each staging buffer holds besides the seeds: (version, rows) of its last fill.
        self._staged_key: list[tuple[int, bytes] | None] = [None, None]
        #: The last step's (version, rows), its metadata without the per-step logit bias and grammar
        #: bitmask (all of it depends only on its rows and their parameters), and whether a row is biased.
        self._static_key: tuple[int, bytes] | None = None
        self._static: SamplingMetadata | None = None
        self._static_biased = False

    def add(self, row: int, params: SamplingParams, prompt_token_ids: Sequence[int],
            output_token_ids: Sequence[int], eos_token_id: int | None) -> None:
        """Write a joining request's parameters into ``row`` (outputs: those it already has)."""
        greedy = params.greedy
        self.greedy[row] = greedy
        self.temperature[row] = 0.0 if greedy else params.temperature
        restricted = 0 < params.top_k < self.vocab_size
        self.top_k[row] = 1 if greedy else (params.top_k if restricted else 0)
        self.top_p[row] = 1.0 if greedy else params.top_p
        self.min_p_margin[row] = (params.temperature * math.log(params.min_p)
                                  if params.min_p > 0 and not greedy else -math.inf)
        self.repetition[row] = params.repetition_penalty
        self.presence[row] = params.presence_penalty
        self.frequency[row] = params.frequency_penalty
        penalised = (params.presence_penalty != 0 or params.frequency_penalty != 0
                     or params.repetition_penalty != 1)
        self.penalised[row] = penalised
        self.seeded[row] = params.seed is not None and not greedy
        self.seed_base[row] = ((params.seed or 0) * _SEED_SPREAD) & _U64
        logprobs = params.logprobs
        self.num_logprobs[row] = -1 if logprobs is None else (
            self.vocab_size if logprobs < 0 else min(logprobs, self.vocab_size))
        self.biased[row] = bool(params.logit_bias) or params.min_tokens > 0
        self.params[row] = params
        self.eos_token_ids[row] = eos_token_id
        self._version += 1
        if penalised:
            if self.penalty_tables is None:
                self.penalty_tables = PenaltyTables(self.num_rows, self.vocab_size, self.device)
            self.penalty_tables.fill_row(row, prompt_token_ids, output_token_ids)

    def gather(self, rows: np.ndarray, num_output_tokens: np.ndarray, grammar_bitmask: torch.Tensor | None = None,
               seed_source: np.random.Generator | None = None) -> SamplingMetadata:
        """The metadata of one step sampling ``rows`` [B] (in batch order), whose requests have produced
        ``num_output_tokens`` [B] tokens so far. Unseeded rows draw fresh seeds from ``seed_source``."""
        n = len(rows)
        key = (self._version, rows.tobytes())
        stage = self._staging[self._next].numpy()
        restage = self._staged_key[self._next] != key
        self._staged_key[self._next] = key
        self._next ^= 1
        s = _stride(n)
        ints = stage[: 8 * _INT_FIELDS * s].view(np.int64).reshape(_INT_FIELDS, s)[:, :n]
        floats = stage[8 * _INT_FIELDS * s: _ROW_BYTES * s].view(np.float32).reshape(_FLOAT_FIELDS, s)[:, :n]
        if restage:  # the rows or their parameters changed since this buffer was filled
            ints[1] = self.top_k[rows]
            ints[2] = rows
            for field, values in enumerate((self.temperature, self.top_p, self.min_p_margin, self.repetition,
                                            self.presence, self.frequency)):
                floats[field] = values[rows]
        static = self._static
        if static is None or self._static_key != key:
            static = self._static = self._static_metadata(rows, ints, floats)
            self._static_key, self._static_biased = key, bool(self.biased[rows].any())
        if not static.all_greedy:
            ints[0] = self._row_seeds(rows, num_output_tokens, seed_source)
        self._upload(n)
        return dataclasses.replace(
            static, grammar_bitmask=grammar_bitmask,
            logit_bias=self._logit_bias(rows, num_output_tokens) if self._static_biased else None)

    def _static_metadata(self, rows: np.ndarray, ints: np.ndarray, floats: np.ndarray) -> SamplingMetadata:
        """The metadata of a step sampling ``rows``, less its logit bias and grammar bitmask: it stays the
        same while the rows and their parameters do (device views of the staging buffer's copy, which
        has the same layout every step of ``len(rows)``)."""
        n = len(rows)
        s = _stride(n)
        greedy = self.greedy[rows]
        all_greedy = bool(greedy.all())
        on_device = self._on_device[: _ROW_BYTES * s]
        dev_ints = on_device[: 8 * _INT_FIELDS * s].view(torch.int64).view(_INT_FIELDS, s)[:, :n]
        dev_floats = on_device[8 * _INT_FIELDS * s:].view(torch.float32).view(_FLOAT_FIELDS, s)[:, :n]
        temperature = seeds = min_p_margin = top_k_top_p = None
        if not all_greedy:
            temperature, seeds = dev_floats[0], dev_ints[0]
            if bool((self.min_p_margin[rows] > -np.inf).any()):
                min_p_margin = dev_floats[2].unsqueeze(1)
            top_k_top_p = TopKTopP.from_rows(ints[1].copy(), floats[1].copy(), floats[0].copy(), greedy,
                                             dev_floats[1])
        return SamplingMetadata(
            all_greedy=all_greedy,
            temperature=temperature,
            seeds=seeds,
            min_p_margin=min_p_margin,
            top_k_top_p=top_k_top_p,
            penalties=self._penalties(rows, dev_ints[2], dev_floats),
            logit_bias=None,
            grammar_bitmask=None,
            max_num_logprobs=self._max_num_logprobs(rows),
        )

    def _row_seeds(self, rows: np.ndarray, num_output_tokens: np.ndarray,
                   seed_source: np.random.Generator | None) -> np.ndarray:
        """Fresh seeds, and ``step_seed(seed, num_output_tokens)`` on seeded rows (the same value:
        only the low 63 bits are kept, so working modulo 2**64 changes nothing)."""
        seeds = fresh_seeds(len(rows), seed_source)
        seeded = self.seeded[rows]
        if seeded.any():
            step = self.seed_base[rows[seeded]] + num_output_tokens[seeded].astype(np.uint64)
            seeds[seeded] = (step & np.uint64(SEED_MASK)).astype(np.int64)
        return seeds

    def _upload(self, n: int) -> torch.Tensor:
        """Send the staged ``n`` rows to the device; the copy is queued without waiting for it."""
        size = _ROW_BYTES * _stride(n)
        on_device = self._on_device[:size]
        on_device.copy_(self._staging[self._next ^ 1][:size], non_blocking=True)
        return on_device

    def _penalties(self, rows: np.ndarray, dev_rows: torch.Tensor, dev_floats: torch.Tensor) -> PenaltyTensors | None:
        if self.penalty_tables is None or not bool(self.penalised[rows].any()):
            return None
        return PenaltyTensors(self.penalty_tables, dev_rows, repetition=dev_floats[3].unsqueeze(1),
                              presence=dev_floats[4].unsqueeze(1), frequency=dev_floats[5].unsqueeze(1))

    def _logit_bias(self, rows: np.ndarray, num_output_tokens: np.ndarray) -> SparseLogitBias | None:
        biased = np.flatnonzero(self.biased[rows])
        if not len(biased):
            return None
        entries = []
        for i in biased.tolist():
            params = self.params[rows[i]]
            assert params is not None
            entries.append((i, params, self.eos_token_ids[rows[i]]))
        return SparseLogitBias.build(entries, num_output_tokens, self.device)

    def _max_num_logprobs(self, rows: np.ndarray) -> int | None:
        wanted = self.num_logprobs[rows]
        largest = int(wanted.max()) if len(wanted) else -1
        return None if largest < 0 else largest
