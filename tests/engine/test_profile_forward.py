"""The memory-profiling forward pass: a mixed batch that no step could exceed."""

from __future__ import annotations

import pytest
import torch

from infercore import LLM
from infercore.worker import profile_forward


@pytest.mark.parametrize("max_num_seqs", [1, 8])
def test_profile_batch_leads_with_a_decode_and_fits_the_step_limits(qwen3_folder, monkeypatch, max_num_seqs) -> None:
    llm = LLM(model=str(qwen3_folder), max_model_len=64, max_num_seqs=max_num_seqs)
    runner = llm.llm_engine.engine_core.executor.runner
    layouts: list[list[int]] = []
    make_layout = profile_forward.make_layout

    def spy(rows, lengths, computed):
        layouts.append(lengths.tolist())
        return make_layout(rows, lengths, computed)

    monkeypatch.setattr(profile_forward, "make_layout", spy)
    with torch.inference_mode():
        for num_tokens in (1, 2, 130, 1000):  # 1000 is more than max_num_seqs * max_model_len
            profile_forward.profile_forward(runner, num_tokens)
    for lengths in layouts:
        assert len(lengths) <= max_num_seqs and max(lengths) <= 64
    if max_num_seqs == 1:
        assert layouts == [[1], [2], [64], [64]]
    else:  # a one-token query first, so decode kernels beside prefills are built at start-up
        assert layouts == [[1], [1, 1], [1, 64, 64, 1], [1] + [64] * 7]
