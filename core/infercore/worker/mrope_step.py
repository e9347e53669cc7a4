"""A step's M-RoPE positions ([3, T], the Qwen2-VL family), vectorised over its requests.

A token at plain position ``p`` of a request whose prompt M-RoPE positions are ``P`` ([3, prompt_len]) and
whose delta is ``d`` gets ``P[:, p]`` while ``p`` is inside the prompt and ``p + d`` on all three axes after
it; a request without M-RoPE positions (a text prompt of a model that takes images) gets ``p`` on all three.
Decoding rows, most of a busy step, are one vectorised add; only rows with prompt tokens in the step read
their prompt arrays.
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np


def step_mrope_positions(positions: np.ndarray, query_start_loc: np.ndarray,
                         prompts: Sequence[np.ndarray | None], deltas: Sequence[int]) -> np.ndarray:
    """[3, T] int64 positions for a step's tokens (``positions`` [T], request ``i`` owning
    ``query_start_loc[i]:query_start_loc[i + 1]``), given each request's prompt positions (None: plain)
    and delta."""
    n = len(prompts)
    counts = np.diff(query_start_loc[: n + 1])
    owner = np.repeat(np.arange(n), counts)
    prompt_len = np.fromiter((0 if p is None else p.shape[1] for p in prompts), dtype=np.int64, count=n)
    delta = np.fromiter(deltas, dtype=np.int64, count=n)
    flat = np.asarray(positions, dtype=np.int64)
    out = np.broadcast_to(flat, (3, len(flat))).copy()
    m = len(owner)
    out[:, :m] += delta[owner]
    in_prompt = flat[:m] < prompt_len[owner]
    if in_prompt.any():
        for i in np.unique(owner[in_prompt]).tolist():
            lo, hi = int(query_start_loc[i]), int(query_start_loc[i + 1])
            rows = lo + np.flatnonzero(in_prompt[lo:hi])
            prompt = prompts[i]
            assert prompt is not None
            out[:, rows] = prompt[:, flat[rows]]
    return out
