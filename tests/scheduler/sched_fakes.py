"""A fake model runner that keeps a token-level copy of the paged KV cache, and request builders."""

from __future__ import annotations

import hashlib
from array import array

from infercore.config import CacheConfig, SchedulerConfig
from infercore.kv_cache.groups import KVCacheGroup, kv_cache_layout
from infercore.sampling_params import SamplingParams
from infercore.scheduler.block_pool import NULL_BLOCK_ID
from infercore.scheduler.request import Request
from infercore.scheduler.scheduler import Scheduler
from infercore.wire.kv_layout import KVCacheLayout
from infercore.wire.messages import EngineCoreOutputs
from infercore.wire.scheduler_output import ModelRunnerOutput, SchedulerOutput

VOCAB = 1000
EOS = 2


def next_token(context: list[int]) -> int:
    """Deterministic 'sampling': a token chosen by the hash of the whole context, never EOS."""
    digest = hashlib.sha256(array("q", context).tobytes()).digest()
    return 3 + int.from_bytes(digest[:4], "little") % (VOCAB - 3)


def _prompt_walk(rid: str) -> tuple[int, int]:
    value = int.from_bytes(hashlib.sha256(rid.encode()).digest()[:8], "little")
    return value % 500, 1 + (value >> 32) % 499


def make_request(rid: str, prompt: list[int] | int, max_tokens: int | None = 8, **kwargs) -> Request:
    if isinstance(prompt, int):
        # Fixed by the id (str hashes differ per process, and two ids whose prompts began alike met a
        # prefix-cache hit in about one run of 250): a start and a stride of their own.
        start, stride = _prompt_walk(rid)
        prompt = [(start + i * stride) % 500 + 3 for i in range(prompt)]
    sp_fields = {k: kwargs.pop(k) for k in list(kwargs) if k in SamplingParams.__struct_fields__}
    sp = SamplingParams(max_tokens=max_tokens, **sp_fields)
    kwargs.setdefault("eos_token_id", EOS)
    return Request(rid, list(prompt), sp, **kwargs)


def kv_layout(num_blocks: int, block_size: int, windows: tuple[int | None, ...] = (None,), *,
              max_num_seqs: int = 1, budget: int = 1) -> KVCacheLayout:
    """The layout a worker would send for one layer per group of ``windows`` (pools sized as it sizes them)."""
    groups = [KVCacheGroup(window, (g,)) for g, window in enumerate(windows)]
    return kv_cache_layout(groups, num_blocks, block_size=block_size, max_num_seqs=max_num_seqs,
                           max_num_batched_tokens=budget)


def make_scheduler(num_blocks: int = 64, block_size: int = 4, max_model_len: int = 64,
                   budget: int = 32, max_num_seqs: int = 16, policy: str = "fcfs",
                   chunked: bool = True, prefix_caching: bool = True) -> Scheduler:
    return Scheduler(
        SchedulerConfig(max_num_seqs=max_num_seqs, scheduling_policy=policy, enable_chunked_prefill=chunked),
        CacheConfig(block_size=block_size, enable_prefix_caching=prefix_caching),
        max_model_len=max_model_len, kv_layout=kv_layout(num_blocks, block_size),
        max_num_batched_tokens=budget,
    )


class FakeRunner:
    """Follows SchedulerOutputs the way a model runner does and checks the block tables.

    Each computed position writes its token into the slot its block table names; before sampling,
    every position of the request (the last ``window`` ones, with a sliding window) is read back from
    the cache and compared with its tokens, so a wrong block table, a stale prefix-cache hit or a lost
    block fails the check.
    """

    def __init__(self, block_size: int, sampler=next_token, tokens_per_step: int = 1,
                 window: int | None = None) -> None:
        self.block_size = block_size
        self.window = window
        self.sampler = sampler
        self.tokens_per_step = tokens_per_step
        self.kv: dict[int, dict[int, int]] = {}
        self.state: dict[str, tuple[list[int], list[int], int]] = {}  # tokens, block ids, num prompt

    def execute(self, out: SchedulerOutput) -> ModelRunnerOutput:
        for rid in out.finished_req_ids:
            self.state.pop(rid, None)
        computed: dict[str, int] = {}
        for new in out.scheduled_new_reqs:
            assert new.req_id not in self.state, f"{new.req_id} scheduled as new twice"
            tokens = list(new.prompt_token_ids) + list(new.output_token_ids)
            self.state[new.req_id] = (tokens, list(new.block_ids), len(new.prompt_token_ids))
            computed[new.req_id] = new.num_computed_tokens
        cached = out.scheduled_cached_reqs
        for i, block_ids in cached.new_blocks():
            self.state[cached.req_ids[i]][1].extend(block_ids)
        computed.update(zip(cached.req_ids, cached.num_computed_tokens, strict=True))
        assert len(out.req_ids) == len(set(out.req_ids)) == len(out.num_scheduled_tokens) == len(computed)
        assert set(computed) == set(out.req_ids)
        assert sum(out.num_scheduled_tokens) == out.total_num_scheduled_tokens
        req_ids, sampled = [], []
        for rid, num in scheduled(out).items():
            tokens, blocks, _ = self.state[rid]
            start = computed[rid]
            assert num > 0 and start + num <= len(tokens)
            assert len(blocks) * self.block_size >= start + num, "block table too short"
            for pos in range(start, start + num):
                self.kv.setdefault(blocks[pos // self.block_size], {})[pos % self.block_size] = tokens[pos]
            new_tokens: list[int] = []
            if start + num == len(tokens):
                first = 0 if self.window is None else max(0, len(tokens) - self.window)
                cached = [self.kv.get(blocks[p // self.block_size], {}).get(p % self.block_size)
                          for p in range(first, len(tokens))]
                assert cached == tokens[first:], f"KV cache of {rid} does not hold its tokens"
                context = list(tokens)
                for _ in range(self.tokens_per_step):
                    context.append(self.sampler(context))
                new_tokens = context[len(tokens):]
                tokens.extend(new_tokens)
            req_ids.append(rid)
            sampled.append(new_tokens)
        return ModelRunnerOutput(req_ids=req_ids, sampled_token_ids=sampled, logprobs=None, prompt_logprobs=None)


def scheduled(out: SchedulerOutput) -> dict[str, int]:
    """Tokens scheduled per request id, in batch order."""
    return dict(zip(out.req_ids, out.num_scheduled_tokens, strict=True))


def run_to_completion(scheduler: Scheduler, runner: FakeRunner, max_steps: int = 10_000,
                      on_step=None) -> dict[str, list[int]]:
    """Step until no request is left; return each request's generated tokens."""
    results: dict[str, list[int]] = {}
    steps = 0
    while scheduler.has_unfinished_requests():
        steps += 1
        assert steps <= max_steps, "scheduler made no progress"
        out = scheduler.schedule()
        outputs: EngineCoreOutputs = scheduler.update_from_output(out, runner.execute(out))
        for o in outputs.outputs:
            results.setdefault(o.request_id, []).extend(o.new_token_ids)
        if on_step is not None:
            on_step(out, outputs)
    return results


class GroupedRunner:
    """A fake runner for KV cache groups (:mod:`infercore.kv_cache.groups`): one token-level cache per
    group, written through the group's block table (every ``G``-th entry of the interleaved ids, never
    the null block); before sampling, each group's window (all of the context for a global group) must
    read back the request's tokens."""

    def __init__(self, block_size: int, windows: list[int | None]) -> None:
        self.block_size = block_size
        self.windows = windows
        self.kv: list[dict[int, dict[int, int]]] = [{} for _ in windows]
        self.state: dict[str, tuple[list[int], list[int]]] = {}

    def execute(self, out: SchedulerOutput) -> ModelRunnerOutput:
        start_of = track_step(self.state, out)
        groups, bs = len(self.windows), self.block_size
        req_ids, sampled = [], []
        for rid, num in zip(out.req_ids, out.num_scheduled_tokens, strict=True):
            tokens, ids = self.state[rid]
            assert len(ids) % groups == 0
            start = start_of[rid]
            for g in range(groups):
                table = ids[g::groups]
                for pos in range(start, start + num):
                    assert table[pos // bs] != NULL_BLOCK_ID, f"{rid} writes {pos} into group {g}'s null block"
                    self.kv[g].setdefault(table[pos // bs], {})[pos % bs] = tokens[pos]
            new_tokens: list[int] = []
            if start + num == len(tokens):
                for g, window in enumerate(self.windows):
                    table = ids[g::groups]
                    first = 0 if window is None else max(0, len(tokens) - window)
                    got = [self.kv[g].get(table[p // bs], {}).get(p % bs) for p in range(first, len(tokens))]
                    assert got == tokens[first:], f"group {g} of {rid} lost tokens of its window"
                new_tokens = [next_token(tokens)]
                tokens.extend(new_tokens)
            req_ids.append(rid)
            sampled.append(new_tokens)
        return ModelRunnerOutput(req_ids=req_ids, sampled_token_ids=sampled, logprobs=None, prompt_logprobs=None)


def track_step(state: dict[str, tuple[list[int], list[int]]], out: SchedulerOutput) -> dict[str, int]:
    """Fold a step's finished, new and cached requests into ``state`` (tokens, block ids per request);
    returns where each scheduled request's computed tokens start."""
    for rid in out.finished_req_ids:
        state.pop(rid, None)
    start_of: dict[str, int] = {}
    for new in out.scheduled_new_reqs:
        state[new.req_id] = (list(new.prompt_token_ids) + list(new.output_token_ids), list(new.block_ids))
        start_of[new.req_id] = new.num_computed_tokens
    cached = out.scheduled_cached_reqs
    for i, block_ids in cached.new_blocks():
        state[cached.req_ids[i]][1].extend(block_ids)
    start_of.update(zip(cached.req_ids, cached.num_computed_tokens, strict=True))
    return start_of
