"""Scheduler: spends each step's token budget on running and waiting requests."""

from __future__ import annotations

from collections import deque
from collections.abc import Iterable
from typing import Any

from infercore.config import CacheConfig, SchedulerConfig
from infercore.pooling.scheduling import pooled_output
from infercore.scheduler.draft_backoff import DraftBackoff
from infercore.scheduler.encoder_budget import EncoderBudget
from infercore.scheduler.image_spans import ImageSpans
from infercore.scheduler.kv_cache_manager import KVCacheManager, make_kv_cache_manager
from infercore.scheduler.prefill_budget import PrefillBudget
from infercore.scheduler.request import Request, RequestStatus
from infercore.scheduler.request_queue import create_request_queue
from infercore.scheduler.spec_decode_stats import SpecDecodeCounters
from infercore.scheduler.token_append import append_sampled, slice_logprobs, take_prompt_logprobs
from infercore.speculative_config import SpeculativeConfig, method_needs_model
from infercore.wire.kv_layout import KVCacheLayout
from infercore.wire.messages import EngineCoreOutput, EngineCoreOutputs, SchedulerStats
from infercore.wire.scheduler_output import (
    CachedRequests,
    ModelRunnerOutput,
    NewRequestData,
    SchedulerOutput,
)

_DEFAULT_MAX_NUM_BATCHED_TOKENS = 2048

_RUNNING = RequestStatus.RUNNING
_STOPPED = RequestStatus.FINISHED_STOPPED


class Scheduler:
    """Continuous batching over a paged KV cache.

    One rule drives every step: give each request tokens until its ``num_computed_tokens``
    catches up with its ``num_tokens``, within one token budget (``max_num_batched_tokens``) and
    ``max_num_seqs`` requests. Running requests are served first, then waiting ones in policy
    order. A long prompt is split over steps (chunked prefill), a prefix-cache hit starts
    ``num_computed_tokens`` at the hit length, and a step may compute several tokens of a request.
    When the KV cache is full, the running request that the policy ranks last is preempted: its
    blocks are freed (those it computed stay in the prefix cache) and it waits to recompute.

    The books are the same whether or not the engine schedules step N+1 before step N's tokens
    are known (async scheduling): scheduled tokens count as computed when the step is scheduled,
    and a sample the step will draw counts as a placeholder token until it is folded in.

    ``kv_layout`` is the KV cache the workers allocated (:mod:`infercore.wire.kv_layout`), read as it
    is: with one sliding group the KV manager gives back the blocks of a running request that left the
    window; with several (sliding layers beside global ones) each group has a pool and a block table of
    its own.

    With ``speculative_config``, a decoding request's draft tokens (``Request.spec_token_ids``, from the
    previous step's output) are scheduled tokens of that request: ``1 + k`` from the one budget, ``k``
    capped so that neither ``max_model_len`` nor ``max_tokens`` is passed, none in steps with at least
    ``disable_by_batch_size`` running requests, and none for requests with a grammar (their bitmask
    covers one position per step) or while an earlier step is in flight (async scheduling: the engine
    overlaps only steps that may not draft, see :meth:`drafts_allowed`), nor for a request whose drafts
    keep failing while it pauses (``disable_by_acceptance``, :mod:`infercore.scheduler.draft_backoff`).
    When the step comes back, ``num_computed_tokens`` goes back by the rejected drafts: their KV entries are
    written over by the next step, and no block is cached before its tokens are all accepted (blocks
    are hashed from ``all_token_ids``, which never holds a draft).

    With ``pipeline_stages`` > 1 several steps are in the pipe at once and no worker samples for itself:
    a request whose sample is still in the pipe is not scheduled again (the next prompt chunk of one
    that samples nothing may be: every stage runs the steps in order), a preempted request is not
    resumed while a step of it is in the pipe, and each cached request carries the tokens sampled since
    its last step (``CachedRequests.new_token_ids``).
    """

    def __init__(
        self,
        scheduler_config: SchedulerConfig,
        cache_config: CacheConfig,
        max_model_len: int,
        kv_layout: KVCacheLayout,
        max_num_batched_tokens: int | None = None,
        max_loras: int | None = None,
        speculative_config: SpeculativeConfig | None = None,
        max_num_encoder_input_tokens: int | None = None,
        pipeline_stages: int = 1,
        whole_image_spans: bool = False,
    ) -> None:
        block_size = kv_layout.block_size
        #: Whether steps carry sampled tokens to the workers and wait for a request's sample (pipeline stages).
        self.pipelined = pipeline_stages > 1
        self.max_model_len = max_model_len
        self.block_size = block_size
        self.max_num_seqs = scheduler_config.max_num_seqs
        self.max_num_batched_tokens = (max_num_batched_tokens or scheduler_config.max_num_batched_tokens
                                       or _DEFAULT_MAX_NUM_BATCHED_TOKENS)
        self.enable_chunked_prefill = scheduler_config.enable_chunked_prefill
        #: Image tokens the vision tower may encode per step (:mod:`infercore.scheduler.encoder_budget`).
        self.encoder_budget = EncoderBudget(max_num_encoder_input_tokens or self.max_num_batched_tokens,
                                            ImageSpans(self.max_num_batched_tokens) if whole_image_spans else None)
        #: Most distinct LoRA adapters among the running requests (None: LoRA is off). The workers hold
        #: that many adapter slots, so every running request keeps its adapter on the device.
        self.max_loras = max_loras
        #: Prompt tokens a step may take beside decodes (:mod:`infercore.scheduler.prefill_budget`).
        self.prefill_budget = PrefillBudget(scheduler_config)
        if not self.enable_chunked_prefill and self.max_num_batched_tokens < max_model_len:
            raise ValueError(
                f"max_num_batched_tokens ({self.max_num_batched_tokens}) is smaller than max_model_len "
                f"({max_model_len}), so without chunked prefill a long prompt could never run; "
                "enable chunked prefill or raise max_num_batched_tokens")
        self.kv_cache_manager: KVCacheManager = make_kv_cache_manager(kv_layout, cache_config.enable_prefix_caching)
        blocks_per_seq = -(-max_model_len // block_size)
        if blocks_per_seq > self.kv_cache_manager.num_usable_blocks:
            raise ValueError(
                f"one sequence of max_model_len={max_model_len} tokens needs {blocks_per_seq} KV cache blocks "
                f"but the cache holds {self.kv_cache_manager.num_usable_blocks}; lower max_model_len or "
                "give the KV cache more memory")

        self.requests: dict[str, Request] = {}
        self.waiting = create_request_queue(scheduler_config.scheduling_policy)
        self.running: list[Request] = []
        self._finished_req_ids: set[str] = set()
        self.num_preemptions = 0
        #: Steps scheduled but not yet folded in, oldest first, each with the blocks it put into
        #: the prefix cache before writing them (``take_newly_cached``; taken out again if the step fails).
        self._unfolded: deque[tuple[SchedulerOutput, Any]] = deque()
        self.speculative_config = speculative_config
        #: Slots past each running request's scheduled tokens for a model-based draft's own KV writes (its
        #: one-token steps run ahead of the target by up to k positions); 0 for n-gram.
        self.num_lookahead_tokens = (speculative_config.num_speculative_tokens
                                     if speculative_config is not None and method_needs_model(speculative_config.method)
                                     else 0)
        self.spec_counters = SpecDecodeCounters(
            speculative_config.num_speculative_tokens if speculative_config is not None else 0)

    @property
    def num_running(self) -> int:
        return len(self.running)

    @property
    def num_waiting(self) -> int:
        return len(self.waiting)

    def has_unfinished_requests(self) -> bool:
        return bool(self.running) or len(self.waiting) > 0

    def add_request(self, request: Request) -> None:
        if request.request_id in self.requests:
            raise ValueError(f"request id {request.request_id!r} is already in use; give each request a unique id")
        if request.num_prompt_tokens == 0:
            raise ValueError("the prompt is empty; send at least one token")
        if request.num_prompt_tokens > self.max_model_len:
            raise ValueError(
                f"prompt has {request.num_prompt_tokens} tokens but max_model_len is {self.max_model_len}; "
                "shorten the prompt or raise --max-model-len")
        if self.encoder_budget.spans is not None:  # images computed whole in one step (Gemma 3)
            self.encoder_budget.spans.check(request)
        self.requests[request.request_id] = request
        self.waiting.add(request)

    def abort_requests(self, request_ids: Iterable[str],
                       status: RequestStatus = RequestStatus.FINISHED_ABORTED) -> None:
        """Finish requests in any state and free their blocks; unknown ids are ignored."""
        aborted = [r for r in map(self.requests.get, request_ids) if r is not None]
        if not aborted:
            return
        ids = {r.request_id for r in aborted}
        if any(r.status == _RUNNING for r in aborted):
            self.running = [r for r in self.running if r.request_id not in ids]
        if any(r.status != _RUNNING for r in aborted):
            self.waiting.remove(ids)
        for request in aborted:
            self._finish(request, status)

    def fail_unfolded_steps(self) -> list[str]:
        """The steps scheduled but not folded in failed: take the blocks they were to fill out of the
        prefix cache (no later request may hit KV that was never written) and finish their requests
        with an error. Returns the ids of those requests."""
        ids: dict[str, None] = {}
        for scheduler_output, cached_blocks in self._unfolded:
            ids.update(dict.fromkeys(scheduler_output.req_ids))
            self.kv_cache_manager.uncache(cached_blocks)
        self._unfolded.clear()
        self.abort_requests(ids, RequestStatus.FINISHED_ERROR)
        return list(ids)

    def schedule(self) -> SchedulerOutput:
        budget = self.max_num_batched_tokens
        kv = self.kv_cache_manager
        settled_until = kv.settled_until
        running = self.running
        chunked = self.enable_chunked_prefill
        max_model_len = self.max_model_len
        preempted = False
        cached = CachedRequests()
        req_ids, num_computed = cached.req_ids, cached.num_computed_tokens
        num_scheduled: list[int] = []
        idx = 0
        prefill_left = self.prefill_budget.allowed(budget, self.running, self.waiting) if chunked else budget
        spec_tokens: dict[str, list[int]] = {}
        drafts_allowed = self.drafts_allowed()
        lookahead = self.num_lookahead_tokens if drafts_allowed else 0
        encoder_budget = self.encoder_budget
        encoder_budget.start_step()
        pipelined = self.pipelined
        while idx < len(running) and budget > 0:
            request = running[idx]
            placeholders = request.num_output_placeholders
            if pipelined and placeholders:  # its sample is still in the pipe
                idx += 1
                continue
            computed = request.num_computed_tokens
            num_tokens = len(request.all_token_ids) + placeholders
            num_new = num_tokens - computed
            if (num_new <= 0 or (num_new > budget and not chunked)
                    # In-flight samples (async scheduling) already take the request to its length limit.
                    or (placeholders and (num_tokens >= max_model_len
                                          or len(request.output_token_ids) + placeholders >= request.max_tokens))):
                idx += 1
                continue
            allowed = budget if num_new == 1 else min(budget, prefill_left)
            if allowed <= 0:
                idx += 1
                continue
            # The step ends in a sample unless the budget cuts the request's tokens short.
            samples = num_new <= allowed
            if not samples:
                num_new = allowed
            if request.mm_features is not None:  # images its tokens reach must fit the encoder budget
                fitted = encoder_budget.fit(request, computed, num_new, new_to_worker=False)
                if fitted < num_new:
                    if fitted == 0:
                        idx += 1
                        continue
                    num_new, samples = fitted, False
            rid = request.request_id
            pause = request.draft_backoff
            if pause is not None and pause.paused and num_new == 1:  # a decode step without drafts
                pause.tick()
                request.spec_token_ids = []
            elif request.spec_token_ids:
                drafts = self._take_drafts(request, drafts_allowed and num_new == 1 and not placeholders, budget - 1)
                if drafts:
                    spec_tokens[rid] = drafts
                    num_new += len(drafts)
            # A model-based draft writes its own KV up to k positions past the step's tokens: lookahead slots.
            slots = num_new + (min(lookahead, max_model_len - computed - num_new) if lookahead else 0)
            # Most decode steps stay within the blocks held and fill none: then there is nothing to allocate.
            if computed + slots > settled_until.get(rid, -1):
                block_ids = kv.allocate_slots(request, slots)
                if block_ids is None and slots > num_new:  # the lookahead is not worth a preemption
                    block_ids = kv.allocate_slots(request, num_new)
                if block_ids is None:
                    preempted = True
                    block_ids, idx, num_undone = self._preempt_for(request, num_new, idx, cached, num_scheduled,
                                                                   spec_tokens)
                    budget += num_undone
                    if block_ids is None:
                        continue
                if block_ids:
                    cached.add_new_blocks(len(req_ids), block_ids)
            req_ids.append(rid)
            num_computed.append(computed)
            num_scheduled.append(num_new)
            if pipelined:
                cached.new_token_ids.append(request.all_token_ids[request.num_tokens_sent:])
                request.num_tokens_sent = len(request.all_token_ids)
            # As _advance, inline: this loop runs once per running request per step.
            request.num_computed_tokens = computed + num_new
            if samples:
                request.num_output_placeholders = placeholders + 1
            budget -= num_new
            if num_new > 1:
                prefill_left -= num_new
            idx += 1

        new_reqs: list[NewRequestData] = []
        if not preempted:
            offered = min(budget, prefill_left)
            budget -= offered - self._schedule_waiting(offered, num_scheduled, new_reqs)

        finished = self._finished_req_ids
        self._finished_req_ids = set()
        scheduler_output = SchedulerOutput(
            scheduled_new_reqs=new_reqs,
            scheduled_cached_reqs=cached,
            num_scheduled_tokens=num_scheduled,
            total_num_scheduled_tokens=self.max_num_batched_tokens - budget,
            finished_req_ids=finished,
            scheduled_spec_decode_tokens=spec_tokens,
            draft_next=self._draft_next(),
        )
        cached_blocks = kv.take_newly_cached()
        if num_scheduled:
            self._unfolded.append((scheduler_output, cached_blocks))
        return scheduler_output

    def keep_finished(self, scheduler_output: SchedulerOutput) -> None:
        """A step that is not run hands its finished request ids back: the next step tells the workers."""
        self._finished_req_ids |= scheduler_output.finished_req_ids

    def drafts_allowed(self) -> bool:
        """Whether the next step may schedule drafts at all (``disable_by_batch_size``); when not, the
        engine may overlap it with the step before (async scheduling)."""
        spec = self.speculative_config
        if spec is None:
            return False
        if self._busy(spec):
            return False
        # A request drafts again when its pause ends (infercore.scheduler.draft_backoff): its drafts are
        # made in the step before, where its pause has one step left.
        return self._unpaused_within(spec, 1)

    def _draft_next(self) -> bool:
        """Whether the step just scheduled should make drafts for the next: some running request is not
        paused there (``SchedulerOutput.draft_next``). Steps of ``disable_by_batch_size`` requests or more are
        not looked at: the runner drafts nothing in them anyway."""
        spec = self.speculative_config
        return spec is None or self._busy(spec) or self._unpaused_within(spec, 0)

    def _busy(self, spec: SpeculativeConfig) -> bool:
        """Whether ``disable_by_batch_size`` keeps drafts out at this many running requests."""
        return spec.disable_by_batch_size is not None and len(self.running) >= spec.disable_by_batch_size

    def _unpaused_within(self, spec: SpeculativeConfig, steps: int) -> bool:
        """Whether some running request's pause (``disable_by_acceptance``) ends within ``steps`` scheduled
        steps (0: it is not paused for the next one)."""
        return spec.disable_by_acceptance is None or any(
            r.draft_backoff is None or r.draft_backoff.pause_left <= steps for r in self.running)

    def _take_drafts(self, request: Request, allowed: bool, budget: int) -> list[int]:
        """The drafts of ``request`` this step verifies (taken off the request either way): at most the
        budget left after its own token, and none past ``max_model_len`` or ``max_tokens``."""
        drafts, request.spec_token_ids = request.spec_token_ids, []
        if not allowed or request.sampling_params.structured_outputs is not None:
            return []
        room = min(budget, self.max_model_len - request.num_tokens - 1,
                   request.max_tokens - len(request.output_token_ids) - 1)
        return drafts[:max(room, 0)]

    def _preempt_for(self, request: Request, num_new: int, idx: int, cached: CachedRequests,
                     num_scheduled: list[int], spec_tokens: dict[str, list[int]]) -> tuple[list[int] | None, int, int]:
        """Preempt running requests, the policy's last first, until ``num_new`` tokens of ``request``
        (``running[idx]``) fit. A victim already planned in this step leaves the plan.

        Returns the blocks appended for ``request`` (None when it was the victim itself), its index in
        ``running`` now, and the planned tokens given back to the budget.
        """
        running = self.running
        req_ids = cached.req_ids
        num_undone = 0
        block_ids = None
        while block_ids is None:
            victim = max(reversed(running), key=self.waiting.preemption_key)
            victim_idx = running.index(victim)
            del running[victim_idx]
            if victim_idx < idx and victim.request_id in req_ids:
                # Undo this step's advance only: the tokens computed before stay cached.
                pos = req_ids.index(victim.request_id)
                undone = num_scheduled.pop(pos)
                cached.remove(pos)
                num_undone += undone
                victim.num_computed_tokens -= undone
            spec_tokens.pop(victim.request_id, None)
            self._preempt(victim)
            if victim is request:
                break
            if victim_idx < idx:
                idx -= 1
            block_ids = self.kv_cache_manager.allocate_slots(request, num_new)
        return block_ids, idx, num_undone

    def _schedule_waiting(self, budget: int, num_scheduled: list[int], new_reqs: list[NewRequestData]) -> int:
        """Start waiting requests in policy order until the budget, the seats or the blocks run out;
        each one's token count is appended to ``num_scheduled``."""
        kv = self.kv_cache_manager
        waiting = self.waiting
        adapters = None if self.max_loras is None else {r.lora_id for r in self.running if r.lora_id}
        #: Requests passed over because their adapter has no free slot (or, with pipeline stages, a step of
        #: theirs from before their preemption is still in the pipe); they keep their place in the queue.
        deferred: list[Request] = []
        in_pipe: set[str] | None = None
        while len(waiting) > 0 and budget > 0 and len(self.running) < self.max_num_seqs:
            request = waiting.peek()
            if self.pipelined and request.num_preemptions:
                if in_pipe is None:
                    in_pipe = {rid for so, _ in self._unfolded for rid in so.req_ids}
                if request.request_id in in_pipe:
                    deferred.append(waiting.pop())
                    continue
            if (adapters is not None and request.lora_id and request.lora_id not in adapters
                    and len(adapters) >= self.max_loras):
                deferred.append(waiting.pop())
                continue
            hit_blocks, num_hit = kv.get_computed_blocks(request)
            num_new = request.num_tokens - num_hit
            if num_new > budget:
                if not self.enable_chunked_prefill:
                    break
                num_new = budget
            if request.mm_features is not None:
                fitted = self.encoder_budget.fit(request, num_hit, num_new, new_to_worker=True)
                if fitted == 0 or (fitted < num_new and not self.enable_chunked_prefill):
                    break
                num_new = fitted
            if kv.allocate_slots(request, num_new, hit_blocks) is None:
                break
            waiting.pop()
            request.status = _RUNNING
            request.num_computed_tokens = num_hit
            if request.num_cached_tokens < 0:
                request.num_cached_tokens = num_hit
            self.running.append(request)
            num_scheduled.append(num_new)
            budget -= num_new
            new_reqs.append(NewRequestData(
                req_id=request.request_id,
                prompt_token_ids=request.prompt_token_ids,
                sampling_params=request.sampling_params,
                block_ids=kv.get_block_ids(request),
                num_computed_tokens=num_hit,
                output_token_ids=list(request.output_token_ids),
                lora_request=request.lora_request,
                mm_features=request.mm_features,
            ))
            if adapters is not None and request.lora_id:
                adapters.add(request.lora_id)
            request.num_tokens_sent = len(request.all_token_ids)
            self._advance(request, num_new)
        for request in reversed(deferred):
            waiting.add_preempted(request)
        return budget

    def _advance(self, request: Request, num_new: int) -> None:
        """Count the scheduled tokens as computed now, and the sample they end in as a placeholder."""
        request.num_computed_tokens += num_new
        if request.num_computed_tokens >= len(request.all_token_ids) + request.num_output_placeholders:
            request.num_output_placeholders += 1

    def _preempt(self, request: Request) -> None:
        self.kv_cache_manager.free(request)
        request.status = RequestStatus.PREEMPTED
        request.num_computed_tokens = 0
        request.num_output_placeholders = 0
        request.spec_token_ids = []
        request.num_preemptions += 1
        if not request.prompt_logprobs_sent:
            request.prompt_logprobs_parts.clear()
        self.num_preemptions += 1
        self._finished_req_ids.add(request.request_id)
        self.waiting.add_preempted(request)

    def _finish(self, request: Request, status: RequestStatus) -> None:
        request.status = status
        self.kv_cache_manager.free(request)
        del self.requests[request.request_id]
        self._finished_req_ids.add(request.request_id)

    def update_from_output(
        self, scheduler_output: SchedulerOutput, runner_output: ModelRunnerOutput
    ) -> EngineCoreOutputs:
        """Fold one step's results into request state; return outputs of requests with news.

        ``runner_output.req_ids`` lists every scheduled request (with ``[]`` sampled for a prefill
        chunk that did not reach the end). Steps are folded in the order they were scheduled.
        """
        self._mark_folded(scheduler_output)
        requests = self.requests
        if runner_output.prompt_logprobs:
            for rid, lp in runner_output.prompt_logprobs.items():
                request = requests.get(rid)
                if request is not None and not request.prompt_logprobs_sent:
                    request.prompt_logprobs_parts.append(lp)

        logprobs = runner_output.logprobs
        spec_tokens = scheduler_output.scheduled_spec_decode_tokens
        new_drafts = runner_output.draft_token_ids
        spec = self.speculative_config
        backoff_threshold = spec.disable_by_acceptance if spec is not None else None
        outputs: list[EngineCoreOutput] = []
        any_finished = False
        for i, (rid, sampled) in enumerate(zip(runner_output.req_ids, runner_output.sampled_token_ids)):
            request = requests.get(rid)
            if request is None or request.status != _RUNNING or not sampled:
                continue
            request.num_output_placeholders -= 1
            drafts = spec_tokens.get(rid) if spec_tokens else None
            if drafts:
                # The rejected drafts' KV entries are written over by the next step.
                request.num_computed_tokens -= len(drafts) + 1 - len(sampled)
                self.spec_counters.count(len(drafts), len(sampled) - 1)
                if backoff_threshold is not None:
                    if request.draft_backoff is None:
                        request.draft_backoff = DraftBackoff()
                    request.draft_backoff.record(len(sampled) - 1, backoff_threshold)
            new_tokens = append_sampled(request, sampled, self.max_model_len)
            if new_drafts is not None and request.status == _RUNNING:
                request.spec_token_ids = new_drafts[i]
            new_logprobs = logprobs.get(rid) if logprobs else None
            if new_logprobs is not None and len(new_tokens) < len(sampled):
                new_logprobs = slice_logprobs(new_logprobs, len(new_tokens))
            status = request.status
            finished = status != _RUNNING
            outputs.append(EngineCoreOutput(
                rid,
                new_tokens,
                new_logprobs,
                None if request.prompt_logprobs_sent else take_prompt_logprobs(request),
                RequestStatus.finish_reason(status) if finished else None,
                request.stop_reason,
                request.num_cached_tokens,
            ))
            if finished:
                any_finished = True
                self._finish(request, status)
        # Pooling requests finish with their pooled result (infercore.pooling).
        for rid, pooled in (runner_output.pooler_output or {}).items():
            request = requests.get(rid)
            if request is not None and request.status == _RUNNING:
                outputs.append(pooled_output(request, pooled))
                self._finish(request, _STOPPED)
                any_finished = True
        if any_finished:
            self.running = [r for r in self.running if r.status == _RUNNING]
        return EngineCoreOutputs(outputs=outputs)

    def _mark_folded(self, scheduler_output: SchedulerOutput) -> None:
        """Forget the step (and any older one): its KV is written."""
        unfolded = self._unfolded
        if any(entry[0] is scheduler_output for entry in unfolded):
            while unfolded.popleft()[0] is not scheduler_output:
                pass

    def get_stats(self) -> SchedulerStats:
        """Gauges now and counters since the scheduler started."""
        kv = self.kv_cache_manager
        return SchedulerStats(
            num_running=len(self.running),
            num_waiting=len(self.waiting),
            kv_cache_usage=kv.usage,
            prefix_cache_queries=kv.prefix_cache_queries,
            prefix_cache_hits=kv.prefix_cache_hits,
            num_free_blocks=kv.num_free_blocks,
            num_total_blocks=kv.num_usable_blocks,
            num_preemptions=self.num_preemptions,
            **self.spec_counters.as_stats(),
        )

