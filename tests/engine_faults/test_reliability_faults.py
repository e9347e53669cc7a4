"""RELIABILITY.md, Faults: line 14 (forced preemption gives the output of an unpreempted run, no token
twice) and line 8 (abort/resubmit churn gives every KV block back), in both scheduling modes."""

from __future__ import annotations

import random

import pytest

from infercore import SamplingParams
from infercore.frontend.output_processor import RequestOutputKind

PROMPTS = [
    {"prompt_token_ids": [(13 * i + 7 * k) % 450 + 3 for i in range(10 + 9 * k)]} for k in range(8)
]


def _params(k: int) -> SamplingParams:
    # Greedy and seeded random samples: a resumed request must draw exactly what it would have.
    return SamplingParams(temperature=0.0 if k % 2 else 0.9, seed=100 + k, max_tokens=40, ignore_eos=True)


def _stream_all(llm) -> dict[str, list[int]]:
    """Run every prompt with delta outputs; the concatenated deltas of each request."""
    engine = llm.llm_engine
    for k, prompt in enumerate(PROMPTS):
        engine.add_request(f"r{k}", prompt, _params(k), output_kind=RequestOutputKind.DELTA)
    tokens: dict[str, list[int]] = {}
    finals: dict[str, int] = {}
    while engine.has_unfinished_requests():
        for out in engine.step():
            tokens.setdefault(out.request_id, []).extend(out.outputs[0].token_ids)
            if out.finished:
                finals[out.request_id] = len(tokens[out.request_id])
    assert finals == {f"r{k}": 40 for k in range(len(PROMPTS))}, "each request streams each token once"
    return tokens


@pytest.mark.parametrize("async_scheduling", [False, True])
def test_forced_preemption_matches_an_unpreempted_run(make_llm, async_scheduling) -> None:
    """RELIABILITY line 14."""
    reference = _stream_all(make_llm(async_scheduling=async_scheduling))
    # 9 usable blocks of 16 tokens for 8 requests of up to 113 tokens: they must take turns.
    llm = make_llm(async_scheduling=async_scheduling, num_gpu_blocks_override=10, max_num_batched_tokens=64)
    assert _stream_all(llm) == reference
    scheduler = llm.llm_engine.engine_core.scheduler
    assert scheduler.num_preemptions > 0
    assert scheduler.kv_cache_manager.num_free_blocks == scheduler.kv_cache_manager.num_usable_blocks


def test_abort_resubmit_cycles_with_async_scheduling_free_every_block(make_llm) -> None:
    """RELIABILITY line 8 with a step always in flight when the abort arrives."""
    llm = make_llm(async_scheduling=True, num_gpu_blocks_override=30, max_num_batched_tokens=64)
    engine = llm.llm_engine
    kv = engine.engine_core.scheduler.kv_cache_manager
    greedy = SamplingParams(temperature=0, max_tokens=8, ignore_eos=True)
    expected = [o.outputs[0].token_ids for o in llm.generate(PROMPTS[:3], greedy, use_tqdm=False)]
    free_at_start = kv.num_free_blocks
    rng = random.Random(0)
    live: list[str] = []
    for cycle in range(1000):
        engine.add_request(f"c{cycle}", rng.choice(PROMPTS),
                           SamplingParams(temperature=1.0, max_tokens=rng.randint(1, 12), ignore_eos=True))
        live.append(f"c{cycle}")
        for _ in range(rng.choice([0, 1, 1, 2])):
            live = [rid for rid in live if rid not in {o.request_id for o in engine.step() if o.finished}]
        if live and rng.random() < 0.9:
            engine.abort_request([live.pop(rng.randrange(len(live)))])
    engine.abort_request(live)
    while engine.has_unfinished_requests():
        engine.step()
    assert kv.num_free_blocks == free_at_start == kv.num_usable_blocks
    # No block of an aborted request left stale KV behind a prefix-cache hit.
    assert [o.outputs[0].token_ids for o in llm.generate(PROMPTS[:3], greedy, use_tqdm=False)] == expected
