"""Expert parallelism end to end: two ranks (``mp`` executor, gloo on CPU) each holding half of the
experts whole give the greedy tokens of two ranks sharding every expert, and logprobs within 1e-4."""

from __future__ import annotations

import pytest
from moe_cases import ENGINE_ARGS, MOE_CASES

from infercore import LLM, SamplingParams

PROMPTS = ["hello world", "The engine cache block request server stream json tool call", "a"]
GREEDY = SamplingParams(temperature=0, max_tokens=10, ignore_eos=True, logprobs=3)
#: float32 end to end; the two paths differ only in the order the experts' outputs are summed.
LOGPROB_TOLERANCE = 1e-4


def generate(folder: str, **engine_args: object) -> list[tuple[list[int], list[dict[int, float]]]]:
    llm = LLM(model=folder, **{**ENGINE_ARGS, "tensor_parallel_size": 2, "distributed_executor_backend": "mp",
                               **engine_args})
    try:
        outputs = llm.generate(PROMPTS, GREEDY, use_tqdm=False)
    finally:
        llm.llm_engine.engine_core.shutdown()
    runs = []
    for out in outputs:
        completion = out.outputs[0]
        assert completion.logprobs is not None
        runs.append((list(completion.token_ids),
                     [{token: lp.logprob for token, lp in step.items()} for step in completion.logprobs]))
    return runs


@pytest.mark.parametrize("case", ["qwen3-moe", "mixtral"])
def test_ep2_matches_tp2(tiny_model_factory, case: str) -> None:
    architecture, overrides = MOE_CASES[case]
    folder = str(tiny_model_factory(architecture, **overrides))
    expected = generate(folder)
    got = generate(folder, enable_expert_parallel=True)
    assert [tokens for tokens, _ in got] == [tokens for tokens, _ in expected]
    assert all(len(tokens) == GREEDY.max_tokens for tokens, _ in got)
    worst = 0.0
    for (_, ours), (_, ref) in zip(got, expected, strict=True):
        for step_ours, step_ref in zip(ours, ref, strict=True):
            shared = step_ours.keys() & step_ref.keys()
            assert shared, "the two runs share no top token at a step"
            worst = max(worst, *(abs(step_ours[t] - step_ref[t]) for t in shared))
    assert worst <= LOGPROB_TOLERANCE, f"logprobs differ by up to {worst:.2e}"
