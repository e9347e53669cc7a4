"""Aborting requests at any point gives every KV block back and leaves the engine working."""

from __future__ import annotations

import random

from engine_cases import GREEDY_32, PROMPTS, generate_tokens, run_to_completion

from infercore import SamplingParams

CYCLES = 1000


def random_params(rng: random.Random) -> SamplingParams:
    return SamplingParams(temperature=rng.choice([0.0, 1.0]), n=rng.choice([1, 1, 1, 2]),
                          max_tokens=rng.randint(1, 24), ignore_eos=True,
                          prompt_logprobs=rng.choice([None, None, 2]))


def test_add_abort_cycles_free_every_block(make_llm) -> None:
    llm = make_llm(num_gpu_blocks_override=40, max_model_len=128, max_num_batched_tokens=64)
    engine = llm.llm_engine
    scheduler = engine.engine_core.scheduler
    kv = scheduler.kv_cache_manager
    expected = generate_tokens(llm, PROMPTS[:3])
    free_at_start = kv.num_free_blocks
    assert free_at_start == kv.num_usable_blocks
    rng = random.Random(0)
    live: list[str] = []
    aborted_running = 0
    for cycle in range(CYCLES):
        request_id = f"r{cycle}"
        engine.add_request(request_id, rng.choice(PROMPTS), random_params(rng))
        live.append(request_id)
        for _ in range(rng.choice([0, 0, 1, 1, 2, 4])):
            for out in engine.step():
                if out.finished and out.request_id in live:
                    live.remove(out.request_id)
        if live and rng.random() < 0.9:
            victim = live.pop(rng.randrange(len(live)))
            aborted_running += victim in scheduler.requests and scheduler.requests[victim].num_computed_tokens > 0
            engine.abort_request([victim])
    assert aborted_running > 100, "many aborts should hit requests that hold computed blocks"
    engine.abort_request(live)
    assert not engine.has_unfinished_requests()
    assert not scheduler.requests
    assert kv.num_free_blocks == free_at_start
    # The engine still produces the tokens it produced before the churn.
    assert generate_tokens(llm, PROMPTS[:3], GREEDY_32) == expected
    assert kv.num_free_blocks == free_at_start


def test_abort_one_sample_of_n_keeps_the_others(make_llm) -> None:
    llm = make_llm()
    engine = llm.llm_engine
    kv = engine.engine_core.scheduler.kv_cache_manager
    free_at_start = kv.num_free_blocks
    engine.add_request("keep", PROMPTS[1], GREEDY_32)
    engine.add_request("drop", PROMPTS[7], SamplingParams(n=3, temperature=1.0, max_tokens=32, ignore_eos=True))
    for _ in range(3):
        engine.step()
    engine.abort_request(["drop"])
    outputs = run_to_completion(engine)
    assert "drop" not in outputs or not outputs["drop"][-1].finished
    assert outputs["keep"][-1].outputs[0].token_ids == generate_tokens(llm, [PROMPTS[1]])[0]
    assert kv.num_free_blocks == free_at_start
