"""Two pipeline stages (``mp`` executor, gloo on the CPU) give the greedy tokens of one, for every
architecture: Gemma 3's three layers split 2 + 1 (and its sliding and global layers land on different
stages, so each stage caches only its group's layers), the MoE families' experts, and the dense
families. The prompts run with chunked prefill and a prefix-cache hit; one case adds async scheduling
and one two tensor-parallel ranks per stage."""

from __future__ import annotations

import re

import pytest
from pp_cases import ENGINE_ARGS, greedy_tokens

from infercore import LLM, SamplingParams
from infercore.sampling_params import StructuredOutputsParams
from infercore.tiny_models import TINY_ARCHITECTURES

#: By default: uneven layers with hybrid KV groups (Gemma 3), and experts (Qwen3-MoE); the rest are heavy.
DEFAULT = ("Gemma3ForCausalLM", "Qwen3MoeForCausalLM")
CASES = [pytest.param(arch, marks=() if arch in DEFAULT else pytest.mark.heavy) for arch in TINY_ARCHITECTURES]


@pytest.mark.parametrize("architecture", CASES)
def test_pp2_matches_pp1(tiny_model_factory, architecture: str) -> None:
    model = tiny_model_factory(architecture)
    expected = greedy_tokens(model)
    assert greedy_tokens(model, pipeline_parallel_size=2, distributed_executor_backend="mp") == expected


@pytest.mark.heavy
def test_pp2_async_scheduling_matches_pp1(tiny_model_factory) -> None:
    model = tiny_model_factory("Qwen3ForCausalLM")
    expected = greedy_tokens(model)
    assert greedy_tokens(model, pipeline_parallel_size=2, async_scheduling=True) == expected


@pytest.mark.heavy
def test_pp2_tp2_matches_pp1(tiny_model_factory) -> None:
    model = tiny_model_factory("Qwen3MoeForCausalLM")
    expected = greedy_tokens(model)
    assert greedy_tokens(model, pipeline_parallel_size=2, tensor_parallel_size=2) == expected


@pytest.mark.heavy
def test_pp2_tp2_expert_parallel_matches_pp1(tiny_model_factory) -> None:
    model = tiny_model_factory("MixtralForCausalLM")
    expected = greedy_tokens(model)
    assert greedy_tokens(model, pipeline_parallel_size=2, tensor_parallel_size=2,
                         enable_expert_parallel=True) == expected


@pytest.mark.heavy
def test_pp2_with_a_grammar_request_matches_pp1(tiny_model_factory) -> None:
    """A request with a grammar runs its steps one at a time (the pipe emptied first) beside the others."""
    model = tiny_model_factory("Qwen3ForCausalLM")
    constrained = SamplingParams(temperature=0, max_tokens=20,
                                 structured_outputs=StructuredOutputsParams(regex="(yes|no)[0-9]{3}"))
    plain = SamplingParams(temperature=0, max_tokens=12, ignore_eos=True)
    results = []
    for pp in (1, 2):
        llm = LLM(model=str(model), pipeline_parallel_size=pp, **ENGINE_ARGS)
        try:
            outs = llm.generate(["hello world", "a b c", "The engine"], [constrained, plain, plain], use_tqdm=False)
            results.append([(o.outputs[0].text, o.outputs[0].token_ids) for o in outs])
        finally:
            llm.llm_engine.engine_core.shutdown()
    assert results[0] == results[1]
    assert re.fullmatch("(yes|no)[0-9]{3}", results[1][0][0])


def _outputs(model, pp: int, prompts: list[str], params, **engine_args) -> tuple[list, int]:
    """Tokens, logprobs and prompt logprobs of each prompt, and the engine's preemptions."""
    llm = LLM(model=str(model), pipeline_parallel_size=pp, **{**ENGINE_ARGS, **engine_args})
    try:
        outs = llm.generate(prompts, params, use_tqdm=False)
        found = [(o.outputs[0].token_ids, [sorted((k, v.logprob) for k, v in d.items()) for d in o.outputs[0].logprobs or []],
                  [sorted((k, v.logprob) for k, v in d.items()) if d else None for d in o.prompt_logprobs or []])
                 for o in outs]
        return found, llm.llm_engine.engine_core.scheduler.num_preemptions
    finally:
        llm.llm_engine.engine_core.shutdown()


@pytest.mark.heavy
def test_pp2_sampling_logprobs_and_penalties_match_pp1(tiny_model_factory) -> None:
    model = tiny_model_factory("Qwen3ForCausalLM")
    params = [SamplingParams(temperature=0.8, seed=7, max_tokens=10, ignore_eos=True, logprobs=2, prompt_logprobs=1),
              SamplingParams(temperature=0, max_tokens=10, ignore_eos=True, repetition_penalty=1.3,
                             presence_penalty=0.5),
              SamplingParams(temperature=1.0, top_k=5, max_tokens=10, ignore_eos=True, seed=3),
              SamplingParams(temperature=0, max_tokens=10, ignore_eos=True, frequency_penalty=1.0, logprobs=1)]
    prompts = ["hello world", "a b c", "The engine cache block request server stream json tool", "x"]
    assert _outputs(model, 2, prompts, params) == _outputs(model, 1, prompts, params)


@pytest.mark.heavy
def test_pp2_under_preemption_matches_pp1(tiny_model_factory) -> None:
    """A KV cache too small for every request: requests are preempted (some while a step of theirs is in
    the pipe) and resumed, with the tokens of one stage."""
    model = tiny_model_factory("Qwen3ForCausalLM")
    prompts = [f"request number {i} " + "word " * (3 + 2 * i) for i in range(8)]
    params = SamplingParams(temperature=0, max_tokens=60, ignore_eos=True)
    small = {"num_gpu_blocks_override": 14, "max_num_batched_tokens": 64}
    two, preempted = _outputs(model, 2, prompts, params, **small)
    assert preempted > 0
    assert two == _outputs(model, 1, prompts, params, **small)[0]
