"""Drafts as scheduled tokens: the budget, the caps, the rollback of rejected drafts, and a KV cache
that holds every accepted token (and caches no rejected one), through chunked prefill, prefix hits
and preemption."""

from __future__ import annotations

import random

import pytest
from sched_fakes import (
    FakeRunner,
    kv_layout,
    make_request,
    next_token,
    run_to_completion,
    scheduled,
    track_step,
)

from infercore.config import CacheConfig, SchedulerConfig
from infercore.scheduler.scheduler import Scheduler
from infercore.speculative_config import SpeculativeConfig
from infercore.wire.scheduler_output import ModelRunnerOutput, SchedulerOutput

K = 3


def make_spec_scheduler(num_blocks: int = 64, block_size: int = 4, max_model_len: int = 64, budget: int = 32,
                        max_num_seqs: int = 16, disable_by_batch_size: int | None = None) -> Scheduler:
    spec = SpeculativeConfig(method="ngram", num_speculative_tokens=K, disable_by_batch_size=disable_by_batch_size)
    return Scheduler(SchedulerConfig(max_num_seqs=max_num_seqs), CacheConfig(block_size=block_size),
                     max_model_len=max_model_len, kv_layout=kv_layout(num_blocks, block_size),
                     max_num_batched_tokens=budget, speculative_config=spec)


class SpeculatingRunner:
    """A fake runner that verifies drafts against :func:`next_token` (greedy) and proposes drafts whose
    first ``m`` tokens are right and the next one wrong (``m`` drawn per step), writing every computed
    position, drafts included, into a token-level copy of the paged cache. Before a request samples,
    its whole context must read back from the cache: a rejected draft left in place fails it."""

    def __init__(self, block_size: int, seed: int = 0) -> None:
        self.block_size = block_size
        self.rng = random.Random(seed)
        self.kv: dict[int, dict[int, int]] = {}
        self.state: dict[str, tuple[list[int], list[int]]] = {}

    def execute(self, out: SchedulerOutput) -> ModelRunnerOutput:
        start_of = track_step(self.state, out)
        req_ids, sampled, drafts_out = [], [], []
        for rid, num in scheduled(out).items():
            tokens, blocks = self.state[rid]
            drafts = out.scheduled_spec_decode_tokens.get(rid, [])
            start = start_of[rid]
            sequence = tokens + drafts
            assert start + num <= len(sequence) and len(blocks) * self.block_size >= start + num
            if drafts:
                assert start + num == len(sequence), "drafts come after the request's own last token"
            for pos in range(start, start + num):
                self.kv.setdefault(blocks[pos // self.block_size], {})[pos % self.block_size] = sequence[pos]
            new_tokens: list[int] = []
            proposed: list[int] = []
            if start + num - len(drafts) == len(tokens):
                got = [self.kv.get(blocks[p // self.block_size], {}).get(p % self.block_size)
                       for p in range(len(tokens))]
                assert got == tokens, f"KV cache of {rid} does not hold its tokens"
                context = list(tokens)
                for draft in drafts:
                    if next_token(context) != draft:
                        break
                    context.append(draft)
                context.append(next_token(context))
                new_tokens = context[len(tokens):]
                tokens.extend(new_tokens)
                proposed = self._propose(tokens)
            req_ids.append(rid)
            sampled.append(new_tokens)
            drafts_out.append(proposed)
        return ModelRunnerOutput(req_ids=req_ids, sampled_token_ids=sampled, draft_token_ids=drafts_out)

    def _propose(self, tokens: list[int]) -> list[int]:
        right = self.rng.randint(0, K)
        context = list(tokens)
        for _ in range(right):
            context.append(next_token(context))
        proposed = context[len(tokens):]
        if right < K:
            proposed.append(3 + (next_token(context) - 2) % 997)  # any token but the right one
        return proposed


def _requests(prefix: list[int]) -> list:
    return [make_request(f"r{i}", prefix + [100 + i] * (i % 5) + list(range(3, 3 + i)), max_tokens=9 + 3 * i)
            for i in range(8)]


def _plain_results(prefix: list[int], **kwargs) -> dict[str, list[int]]:
    from sched_fakes import make_scheduler

    sched = make_scheduler(**kwargs)
    for request in _requests(prefix):
        sched.add_request(request)
    return run_to_completion(sched, FakeRunner(kwargs.get("block_size", 4)))


@pytest.mark.parametrize("num_blocks,budget", [(64, 32), (64, 6), (18, 32)])
def test_greedy_tokens_equal_plain_decoding(num_blocks: int, budget: int) -> None:
    """Roomy; a small budget (chunked prompts, drafts cut by the budget); a small pool (preemption)."""
    prefix = list(range(10, 22))  # three shared blocks: prefix hits
    sched = make_spec_scheduler(num_blocks=num_blocks, budget=budget)
    for request in _requests(prefix):
        sched.add_request(request)
    steps: list[SchedulerOutput] = []
    results = run_to_completion(sched, SpeculatingRunner(4), on_step=lambda out, _: steps.append(out))
    assert results == _plain_results(prefix, num_blocks=num_blocks, budget=budget)
    assert all(out.total_num_scheduled_tokens <= budget for out in steps)
    assert any(out.scheduled_spec_decode_tokens for out in steps)
    stats = sched.get_stats()
    assert 0 < stats.spec_num_accepted_tokens < stats.spec_num_draft_tokens
    assert sum(stats.spec_num_accepted_tokens_per_pos) == stats.spec_num_accepted_tokens
    if num_blocks == 18:
        assert sched.num_preemptions > 0
    assert sched.kv_cache_manager.num_free_blocks == sched.kv_cache_manager.num_usable_blocks


def test_no_rejected_draft_enters_the_prefix_cache() -> None:
    """A later prompt made of an earlier request's prompt and outputs hits blocks filled while drafts
    were verified; the runner checks that those blocks hold the accepted tokens."""
    sched = make_spec_scheduler()
    runner = SpeculatingRunner(4, seed=3)
    first = make_request("a", list(range(10, 17)), max_tokens=30)
    sched.add_request(first)
    outputs = run_to_completion(sched, runner)["a"]
    follow = make_request("b", list(range(10, 17)) + outputs[:25], max_tokens=4)
    sched.add_request(follow)
    assert run_to_completion(sched, runner)["b"]
    assert follow.num_cached_tokens >= 28


@pytest.mark.parametrize("max_tokens,max_model_len", [(1, 64), (2, 64), (7, 64), (40, 24)])
def test_drafts_never_pass_max_tokens_or_max_model_len(max_tokens: int, max_model_len: int) -> None:
    sched = make_spec_scheduler(max_model_len=max_model_len)
    sched.add_request(make_request("a", list(range(10, 20)), max_tokens=max_tokens))
    seen: list[SchedulerOutput] = []
    results = run_to_completion(sched, SpeculatingRunner(4), on_step=lambda out, _: seen.append(out))
    assert len(results["a"]) == min(max_tokens, max_model_len - 10)
    for out in seen:
        for drafts in out.scheduled_spec_decode_tokens.values():
            assert 1 <= len(drafts) <= K


def test_disable_by_batch_size() -> None:
    sched = make_spec_scheduler(disable_by_batch_size=2)
    for request in _requests([5]):
        sched.add_request(request)
    seen: list[SchedulerOutput] = []
    run_to_completion(sched, SpeculatingRunner(4), on_step=lambda out, _: seen.append(out))
    for out in seen:
        running = len(out.req_ids)
        assert not out.scheduled_spec_decode_tokens or running < 2
    assert any(out.scheduled_spec_decode_tokens for out in seen), "the last request alone speculates"


def test_rejected_drafts_roll_num_computed_tokens_back() -> None:
    sched = make_spec_scheduler()
    request = make_request("a", list(range(10, 18)), max_tokens=20)
    sched.add_request(request)
    out = sched.schedule()
    sched.update_from_output(out, ModelRunnerOutput(req_ids=["a"], sampled_token_ids=[[50]],
                                                    draft_token_ids=[[51, 52, 53]]))
    out = sched.schedule()
    assert out.scheduled_spec_decode_tokens == {"a": [51, 52, 53]} and out.num_scheduled_tokens == [4]
    assert request.num_computed_tokens == 12
    # The first draft is accepted, the second rejected: 51 and the target's 60.
    sched.update_from_output(out, ModelRunnerOutput(req_ids=["a"], sampled_token_ids=[[51, 60]],
                                                    draft_token_ids=[[]]))
    assert request.num_computed_tokens == 10 and request.output_token_ids == [50, 51, 60]
    out = sched.schedule()
    assert out.num_scheduled_tokens == [1] and not out.scheduled_spec_decode_tokens
