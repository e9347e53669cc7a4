"""Two tensor-parallel ranks (``mp`` executor, gloo on CPU), each holding half of every expert's
intermediate features, give the greedy tokens of one."""

from __future__ import annotations

import pytest
from moe_cases import ENGINE_ARGS, MOE_CASES

from infercore import LLM, SamplingParams

PROMPTS = ["hello world", "The engine cache block request server stream json tool call", "a"]
GREEDY = SamplingParams(temperature=0, max_tokens=12, ignore_eos=True)


def greedy_tokens(folder: str, **engine_args: object) -> list[list[int]]:
    llm = LLM(model=folder, **{**ENGINE_ARGS, **engine_args})
    try:
        return [out.outputs[0].token_ids for out in llm.generate(PROMPTS, GREEDY, use_tqdm=False)]
    finally:
        llm.llm_engine.engine_core.shutdown()


@pytest.mark.parametrize("case", ["qwen3-moe"])
def test_moe_tp2_matches_tp1(tiny_model_factory, case: str) -> None:
    architecture, overrides = MOE_CASES[case]
    folder = str(tiny_model_factory(architecture, **overrides))
    expected = greedy_tokens(folder)
    assert greedy_tokens(folder, tensor_parallel_size=2, distributed_executor_backend="mp") == expected
    assert all(len(tokens) == 12 for tokens in expected)
