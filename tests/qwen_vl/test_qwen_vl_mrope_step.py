"""A step's M-RoPE positions, vectorised, against the per-request rule."""

from __future__ import annotations

import numpy as np

from infercore.worker.mrope_step import step_mrope_positions


def per_request(positions: np.ndarray, qsl: np.ndarray, prompts: list, deltas: list[int]) -> np.ndarray:
    out = np.broadcast_to(positions, (3, len(positions))).copy()
    for i, prompt in enumerate(prompts):
        lo, hi = int(qsl[i]), int(qsl[i + 1])
        for j in range(lo, hi):
            p = int(positions[j])
            if prompt is not None and p < prompt.shape[1]:
                out[:, j] = prompt[:, p]
            elif prompt is not None:
                out[:, j] = p + deltas[i]
    return out


def test_matches_the_per_request_rule_on_mixed_steps() -> None:
    rng = np.random.default_rng(0)
    for _ in range(50):
        n = int(rng.integers(1, 8))
        prompts, deltas, chunks = [], [], []
        for _ in range(n):
            length = int(rng.integers(3, 40))
            prompt = None if rng.random() < 0.3 else np.sort(rng.integers(0, length, size=(3, length)), axis=1)
            prompts.append(prompt)
            deltas.append(0 if prompt is None else int(prompt.max()) + 1 - length)
            start = int(rng.integers(0, length + 10))
            size = 1 if start >= length else int(rng.integers(1, length - start + 3))
            chunks.append(np.arange(start, start + size))
        positions = np.concatenate(chunks)
        qsl = np.concatenate([[0], np.cumsum([len(c) for c in chunks])])
        expected = per_request(positions, qsl, prompts, deltas)
        np.testing.assert_array_equal(step_mrope_positions(positions, qsl, prompts, deltas), expected)
