"""``max_num_batched_tokens_while_decoding``: a smaller step budget only while requests decode; their tokens
count against it and prompts get the rest."""

from __future__ import annotations

from sched_fakes import FakeRunner, kv_layout, make_request, make_scheduler, run_to_completion, scheduled

from infercore.config import CacheConfig, SchedulerConfig
from infercore.scheduler.scheduler import Scheduler


def _capped(cap: int | None, budget: int = 32, chunked: bool = True) -> Scheduler:
    return Scheduler(SchedulerConfig(max_num_seqs=16, enable_chunked_prefill=chunked,
                                     max_num_batched_tokens_while_decoding=cap),
                     CacheConfig(block_size=4), max_model_len=64, kv_layout=kv_layout(128, 4),
                     max_num_batched_tokens=budget)


def _steps(scheduler: Scheduler, runner: FakeRunner, n: int) -> list[dict[str, int]]:
    plans = []
    for _ in range(n):
        out = scheduler.schedule()
        plans.append(scheduled(out))
        scheduler.update_from_output(out, runner.execute(out))
    return plans


def test_a_step_beside_decodes_takes_at_most_the_cap() -> None:
    scheduler = _capped(7)
    runner = FakeRunner(4)
    scheduler.add_request(make_request("a", 5, max_tokens=20))
    first = _steps(scheduler, runner, 1)[0]
    assert first == {"a": 5}  # nothing decodes yet: the whole budget
    for rid in ("b", "c", "d"):
        scheduler.add_request(make_request(rid, 10, max_tokens=4))
    plans = _steps(scheduler, runner, 6)
    for plan in plans:
        assert plan.get("a") == 1 and sum(plan.values()) <= 7, plan
    # 30 prompt tokens at no more than 7 - 1 a step, chunked across requests.
    assert plans[0] == {"a": 1, "b": 6}
    assert plans[1] == {"a": 1, "b": 4, "c": 2}
    # Once b decodes too, the prompts get what the two decodes leave.
    assert plans[2] == {"a": 1, "b": 1, "c": 5}


def test_without_decodes_and_without_a_cap_the_budget_rules() -> None:
    for scheduler in (_capped(None), _capped(6)):
        runner = FakeRunner(4)
        for rid in ("b", "c", "d"):
            scheduler.add_request(make_request(rid, 10, max_tokens=4))
        assert _steps(scheduler, runner, 1)[0] == {"b": 10, "c": 10, "d": 10}


def test_capped_runs_give_the_same_tokens() -> None:
    results = []
    for cap in (None, 3):
        scheduler = _capped(cap, budget=16)
        runner = FakeRunner(4)
        for i in range(8):
            scheduler.add_request(make_request(f"r{i}", 5 + 3 * i, max_tokens=6 + i))
        results.append(run_to_completion(scheduler, runner))
    assert results[0] == results[1]
    assert len(results[0]) == 8


def test_a_cap_is_ignored_without_chunked_prefill() -> None:
    scheduler = _capped(2, budget=64, chunked=False)
    runner = FakeRunner(4)
    scheduler.add_request(make_request("a", 4, max_tokens=10))
    _steps(scheduler, runner, 1)
    scheduler.add_request(make_request("b", 12, max_tokens=2))
    assert _steps(scheduler, runner, 1)[0] == {"a": 1, "b": 12}


def test_as_many_decodes_as_the_cap_leave_prompts_waiting_until_one_finishes() -> None:
    scheduler = _capped(2)
    runner = FakeRunner(4)
    for rid in ("a", "b"):
        scheduler.add_request(make_request(rid, 3, max_tokens=3))
    assert _steps(scheduler, runner, 1)[0] == {"a": 3, "b": 3}
    scheduler.add_request(make_request("c", 3, max_tokens=2))
    plans = _steps(scheduler, runner, 4)
    assert plans[:2] == [{"a": 1, "b": 1}, {"a": 1, "b": 1}]
    assert plans[2] == {"c": 3}


def test_make_scheduler_default_has_no_cap() -> None:
    assert make_scheduler().prefill_budget.max_num_batched_tokens_while_decoding is None
