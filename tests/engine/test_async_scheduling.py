"""Async scheduling (step N+1 scheduled before step N's tokens are known) changes no output."""

from __future__ import annotations

import random

import pytest

from infercore import LLM, SamplingParams


def _workload() -> tuple[list[dict], list[SamplingParams]]:
    rng = random.Random(0)
    prompts = [{"prompt_token_ids": [rng.randint(0, 500) for _ in range(rng.randint(5, 60))]} for _ in range(24)]
    params = [SamplingParams(temperature=0 if i % 2 else 0.8, seed=i, max_tokens=rng.randint(1, 40),
                             ignore_eos=i % 3 == 0, stop_token_ids=[7] if i % 5 == 0 else None,
                             logprobs=2 if i % 4 == 0 else None) for i in range(24)]
    return prompts, params


def _run(folder, **engine_args) -> tuple[list, LLM]:
    prompts, params = _workload()
    llm = LLM(model=str(folder), max_model_len=128, max_num_batched_tokens=64, **engine_args)
    outs = llm.generate(prompts, params, use_tqdm=False)
    return [(o.outputs[0].token_ids, o.outputs[0].finish_reason,
             [sorted(d) for d in (o.outputs[0].logprobs or [])]) for o in outs], llm


@pytest.mark.parametrize("blocks", [None, 40])
def test_async_scheduling_gives_identical_outputs(qwen3_folder, blocks):
    extra = {"num_gpu_blocks_override": blocks} if blocks else {}
    sync, _ = _run(qwen3_folder, async_scheduling=False, **extra)
    overlapped, llm = _run(qwen3_folder, async_scheduling=True, **extra)
    assert llm.llm_engine.engine_core.async_mode
    if blocks:
        assert llm.llm_engine.engine_core.scheduler.num_preemptions > 0
    assert overlapped == sync


def test_a_lone_prompt_hands_out_its_first_token_before_the_next_step_is_launched(qwen3_folder):
    from infercore.wire.messages import EngineCoreRequest

    llm = LLM(model=str(qwen3_folder), max_model_len=128, async_scheduling=True)
    core = llm.llm_engine.engine_core
    core.add_request(EngineCoreRequest("lone", list(range(1, 20)),
                                       SamplingParams(temperature=0, max_tokens=4, ignore_eos=True), 0.0))
    assert core.step().outputs == []  # the prefill is launched
    first = core.step()
    assert [o.request_id for o in first.outputs] == ["lone"] and len(first.outputs[0].new_token_ids) == 1
    assert core._inflight is None, "the first token waited for the next step's launch"
    # From there the steps overlap again: each call launches one step and folds in the one before.
    tokens = list(first.outputs[0].new_token_ids)
    while core.has_unfinished_requests():
        out = core.step()
        tokens += [t for o in out.outputs for t in o.new_token_ids]
        if core.has_unfinished_requests() and out.outputs:
            assert core._inflight is not None
    expected = llm.generate([{"prompt_token_ids": list(range(1, 20))}],
                            SamplingParams(temperature=0, max_tokens=4, ignore_eos=True), use_tqdm=False)
    assert tokens == expected[0].outputs[0].token_ids
