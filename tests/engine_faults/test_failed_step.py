"""A model step that raises fails its requests only: no unwritten KV stays in the prefix cache, the
requests' grammars are dropped, and the engine goes on (async scheduling included)."""

from __future__ import annotations

import pytest
from step_faults import fail_next_launch

from infercore import SamplingParams
from infercore.entrypoints.llm import GenerationError
from infercore.sampling_params import StructuredOutputsParams

#: 48 tokens: three full blocks of 16, all of which a second request with this prompt could hit.
PROMPT = {"prompt_token_ids": [(7 * i) % 400 + 5 for i in range(49)]}
GREEDY = SamplingParams(temperature=0, max_tokens=6, ignore_eos=True)


def _run_alone(llm, prompt=PROMPT):
    out = llm.generate([prompt], GREEDY, use_tqdm=False)[0]
    return out.outputs[0].token_ids, out.num_cached_tokens


@pytest.mark.parametrize("async_scheduling", [False, True])
def test_failed_step_leaves_no_unwritten_block_in_the_prefix_cache(make_llm, async_scheduling) -> None:
    reference, _ = _run_alone(make_llm(enable_prefix_caching=False))
    llm = make_llm(async_scheduling=async_scheduling)
    core = llm.llm_engine.engine_core
    assert core.async_mode is async_scheduling
    failures = fail_next_launch(core.executor)
    # Two requests with one prompt in one step: the second shares the blocks the first is to write.
    with pytest.raises(GenerationError, match="StepFailure: the device fell over") as failed:
        llm.generate([PROMPT, PROMPT], GREEDY, use_tqdm=False)
    assert failures == [1] and type(failed.value.__cause__).__name__ == "StepFailure"
    assert not llm.llm_engine.has_unfinished_requests()
    kv = core.scheduler.kv_cache_manager
    assert kv.num_free_blocks == kv.num_usable_blocks
    tokens, num_cached = _run_alone(llm)
    assert num_cached == 0, "a block the failed step never wrote was served from the prefix cache"
    assert tokens == reference
    # The blocks written by that healthy run are cached as usual.
    assert _run_alone(llm) == (reference, 48)


def test_failed_async_step_fails_the_step_still_in_flight_too(make_llm) -> None:
    """Step N+1 fails at launch while step N's tokens are unread: both steps' requests fail and no
    block either of them filled stays cached. Step N is the prompt's first chunk (a step of nothing but
    whole new prompts is folded in before the next launch)."""
    reference, _ = _run_alone(make_llm(enable_prefix_caching=False))
    llm = make_llm(async_scheduling=True, max_num_batched_tokens=32)
    engine = llm.llm_engine
    core = engine.engine_core
    engine.add_request("first", PROMPT, GREEDY)
    engine.step()  # step 1 launched, its tokens in flight
    failures = fail_next_launch(core.executor)
    finished = {out.request_id: out.outputs[0].finish_reason for out in engine.step() if out.finished}
    assert failures == [1] and finished == {"first": "error"}
    assert not engine.has_unfinished_requests()
    tokens, num_cached = _run_alone(llm)
    assert (tokens, num_cached) == (reference, 0)


def test_failed_step_drops_the_grammar_and_async_scheduling_resumes(make_llm) -> None:
    llm = make_llm(async_scheduling=True)
    engine = llm.llm_engine
    core = engine.engine_core
    constrained = SamplingParams(temperature=0, max_tokens=8,
                                 structured_outputs=StructuredOutputsParams(choice=["yes", "no"]))
    # The grammar compiles in the background; then the request runs in synchronous steps, the first of which fails.
    failures = fail_next_launch(core.executor)
    engine.add_request("choice", "Is it raining?", constrained)
    outputs = []
    while engine.has_unfinished_requests():
        outputs.extend(engine.step())
    assert failures == [1] and outputs[-1].outputs[0].finish_reason == "error"
    assert core.grammars.manager.num_requests == 0, "the failed request's grammar was kept"
    assert not core.grammars.has_requests()
    # With no constrained request left the engine overlaps steps again.
    engine.add_request("plain", "hello", GREEDY)
    engine.step()
    assert core._inflight is not None, "async scheduling should resume after the failed constrained step"
    while engine.has_unfinished_requests():
        engine.step()
