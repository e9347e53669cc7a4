"""``max_prefill_tokens_per_decode``: while requests decode, a step's prompt tokens are bounded in proportion
to the decodes (never below ``MIN_PREFILL_TOKENS_WHILE_DECODING``), so a burst of prompts beside few decodes
spreads over short steps while a full batch of decodes still takes long chunks. At high load (requests in the
engine at least ``per_decode_bound_below_load`` of ``max_num_seqs``) the bound stands aside."""

from __future__ import annotations

from sched_fakes import FakeRunner, kv_layout, make_request, run_to_completion, scheduled

from infercore.config import CacheConfig, SchedulerConfig
from infercore.scheduler.prefill_budget import MIN_PREFILL_TOKENS_WHILE_DECODING as FLOOR
from infercore.scheduler.scheduler import Scheduler

BLOCK = 16


def _scheduler(per_decode: int | None, cap: int | None = None, budget: int = 8192,
               chunked: bool = True, below_load: float = 0.5) -> Scheduler:
    return Scheduler(SchedulerConfig(max_num_seqs=64, enable_chunked_prefill=chunked,
                                     max_num_batched_tokens_while_decoding=cap,
                                     max_prefill_tokens_per_decode=per_decode,
                                     per_decode_bound_below_load=below_load),
                     CacheConfig(block_size=BLOCK), max_model_len=4096, kv_layout=kv_layout(4096, BLOCK),
                     max_num_batched_tokens=budget)


def _step(scheduler: Scheduler, runner: FakeRunner) -> dict[str, int]:
    out = scheduler.schedule()
    scheduler.update_from_output(out, runner.execute(out))
    return scheduled(out)


def _decoding(scheduler: Scheduler, runner: FakeRunner, n: int) -> None:
    """``n`` requests past their prompts, each decoding one token a step from now on."""
    for i in range(n):
        scheduler.add_request(make_request(f"d{i}", 8, max_tokens=100))
    assert _step(scheduler, runner) == {f"d{i}": 8 for i in range(n)}


def test_prompt_tokens_beside_decodes_follow_the_decode_count() -> None:
    for decodes, per_decode, allowed in ((1, 100, FLOOR), (8, 100, 800), (20, 100, 2000), (20, 300, 6000)):
        scheduler, runner = _scheduler(per_decode), FakeRunner(BLOCK)
        _decoding(scheduler, runner, decodes)
        scheduler.add_request(make_request("p", 4000, max_tokens=2))
        scheduler.add_request(make_request("q", 4000, max_tokens=2))
        plan = _step(scheduler, runner)
        assert all(plan[f"d{i}"] == 1 for i in range(decodes)), plan
        prompt_tokens = plan.get("p", 0) + plan.get("q", 0)
        assert prompt_tokens == allowed, (decodes, per_decode, plan)


def test_a_backlog_of_long_prompts_drains_in_steps_of_a_share_of_it() -> None:
    # 20 prompts of 4,000 tokens wait beside one decode: 1/32 of the 80,000 backlog per step (2,500), not
    # the floor's 512, so the backlog clears in tens of steps; as it shrinks the step shrinks with it.
    scheduler, runner = _scheduler(per_decode=16), FakeRunner(BLOCK)
    _decoding(scheduler, runner, 1)
    for i in range(20):
        scheduler.add_request(make_request(f"p{i}", 4000, max_tokens=2))
    plan = _step(scheduler, runner)
    assert plan["d0"] == 1 and sum(plan.get(f"p{i}", 0) for i in range(20)) == 80_000 // 32
    second = _step(scheduler, runner)
    assert sum(second.get(f"p{i}", 0) for i in range(20)) == (80_000 - 2_500) // 32


def test_without_decodes_the_budget_rules() -> None:
    scheduler, runner = _scheduler(per_decode=1), FakeRunner(BLOCK)
    scheduler.add_request(make_request("p", 3000, max_tokens=2))
    scheduler.add_request(make_request("q", 3000, max_tokens=2))
    assert _step(scheduler, runner) == {"p": 3000, "q": 3000}


def test_the_smaller_of_the_fixed_cap_and_the_per_decode_bound_holds() -> None:
    for cap, per_decode, allowed in ((700, 100, 700 - 10), (4000, 100, 1000)):
        scheduler, runner = _scheduler(per_decode, cap=cap), FakeRunner(BLOCK)
        _decoding(scheduler, runner, 10)
        scheduler.add_request(make_request("p", 3000, max_tokens=2))
        plan = _step(scheduler, runner)
        assert plan["p"] == allowed, plan


def test_bounded_runs_give_the_same_tokens() -> None:
    results = []
    for per_decode in (None, 1):
        scheduler, runner = _scheduler(per_decode, budget=2048), FakeRunner(BLOCK)
        for i in range(12):
            scheduler.add_request(make_request(f"r{i}", 300 + 97 * i, max_tokens=5 + i))
        results.append(run_to_completion(scheduler, runner))
    assert results[0] == results[1] and len(results[0]) == 12



def test_the_bound_stands_aside_at_high_load() -> None:
    # max_num_seqs 64 at 0.5: the bound holds below 32 requests running or waiting, not from 32 on.
    for decodes, waiting, bounded in ((20, 2, True), (29, 2, True), (30, 2, False), (31, 4, False)):
        scheduler, runner = _scheduler(per_decode=10), FakeRunner(BLOCK)
        _decoding(scheduler, runner, decodes)
        for i in range(waiting):
            scheduler.add_request(make_request(f"p{i}", 3000, max_tokens=2))
        plan = _step(scheduler, runner)
        prompt_tokens = sum(plan.get(f"p{i}", 0) for i in range(waiting))
        assert prompt_tokens == (FLOOR if bounded else min(3000 * waiting, 8192 - decodes)), (decodes, waiting, plan)


def test_the_load_fraction_is_configurable() -> None:
    scheduler, runner = _scheduler(per_decode=20, below_load=1.0), FakeRunner(BLOCK)
    _decoding(scheduler, runner, 40)
    scheduler.add_request(make_request("p", 3000, max_tokens=2))
    assert _step(scheduler, runner)["p"] == 40 * 20


def test_the_bound_is_on_by_default() -> None:
    config = SchedulerConfig()
    assert config.max_prefill_tokens_per_decode == 16 and config.per_decode_bound_below_load == 0.5
