"""Gemma 3 and Phi-3 split over two ranks (``mp`` executor, gloo on CPU) give the greedy tokens of one."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
from dense_cases import ENGINE_ARGS

from infercore import LLM, SamplingParams

#: Prompts longer than Gemma 3's tiny window; greedy continuations long enough to cross it again.
PROMPTS = ["hello world", "The engine cache block request server stream json tool call weather city paris"]
GREEDY = SamplingParams(temperature=0, max_tokens=16, ignore_eos=True)


def greedy_tokens(model: Path, **engine_args: Any) -> list[list[int]]:
    """Greedy tokens of :data:`PROMPTS` from a fresh engine, which is shut down afterwards."""
    llm = LLM(model=str(model), **{**ENGINE_ARGS, **engine_args})
    try:
        return [out.outputs[0].token_ids for out in llm.generate(PROMPTS, GREEDY, use_tqdm=False)]
    finally:
        llm.llm_engine.engine_core.shutdown()


# Phi-3 checkpoints hold q/k/v and gate/up fused: each rank cuts its rows out of them.
@pytest.mark.parametrize("case", ["gemma3", "phi3"])
def test_tp2_matches_tp1(case_folder, case: str) -> None:
    model = case_folder(case)
    expected = greedy_tokens(model)
    got = greedy_tokens(model, tensor_parallel_size=2, distributed_executor_backend="mp")
    assert got == expected
    assert all(len(tokens) == 16 for tokens in got)
