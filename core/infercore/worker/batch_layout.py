"""Turning one step's scheduled token counts into flat batch arrays, vectorised with numpy."""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np


@dataclass
class BatchLayout:
    """Host-side layout of one step: which request row and position each flat token belongs to."""

    rows: np.ndarray  # [B] persistent row of each request, in batch order
    num_scheduled: np.ndarray  # [B]
    num_computed: np.ndarray  # [B] tokens already in the cache before this step
    query_start_loc: np.ndarray  # [B + 1]
    token_rows: np.ndarray  # [T] row of each token
    positions: np.ndarray  # [T]

    @property
    def num_tokens(self) -> int:
        return int(self.query_start_loc[-1])

    @property
    def seq_lens(self) -> np.ndarray:
        return self.num_computed + self.num_scheduled


def make_layout(rows: np.ndarray, num_scheduled: np.ndarray, num_computed: np.ndarray) -> BatchLayout:
    """Flatten requests ``rows`` with ``num_scheduled`` new tokens each after ``num_computed`` cached ones."""
    cu = np.cumsum(num_scheduled)
    query_start_loc = np.zeros(len(rows) + 1, dtype=np.int32)
    query_start_loc[1:] = cu
    total = int(cu[-1]) if len(cu) else 0
    req_index = np.repeat(np.arange(len(rows)), num_scheduled)
    offsets = np.arange(total) - query_start_loc[:-1][req_index]
    positions = num_computed[req_index] + offsets
    return BatchLayout(rows, num_scheduled, num_computed, query_start_loc, rows[req_index], positions)
