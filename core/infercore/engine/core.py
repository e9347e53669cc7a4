"""EngineCore: schedule → execute → sample → update, one step at a time."""

from __future__ import annotations

import gc
import logging
import time
from collections import deque

from infercore.config import InfercoreConfig
from infercore.demo import resolve_demo_model
from infercore.engine.grammar_gate import GrammarGate
from infercore.executor.base import Executor, ExecutorDeadError
from infercore.executor.step_future import StepFuture
from infercore.gc_heap import freeze_startup_heap
from infercore.models.model_info import attends_images_whole, resolve_model_info
from infercore.platforms.selection import current_platform
from infercore.plugins.manager import get_plugin_manager
from infercore.pooling.config import configure_pooling, pooling_model_info
from infercore.pooling.front import check_request_kind
from infercore.scheduler.request import Request, RequestStatus
from infercore.scheduler.scheduler import Scheduler
from infercore.startup_timeline import TIMELINE, startup_phase
from infercore.wire.kv_layout import KVCacheLayout
from infercore.wire.messages import EngineCoreOutput, EngineCoreOutputs, EngineCoreRequest, FinishReason
from infercore.wire.model_info import ModelInfo
from infercore.wire.scheduler_output import SchedulerOutput

logger = logging.getLogger(__name__)

#: Longest a step with only grammar compiles left waits for one (bounds how late new input is read).
_IDLE_COMPILE_WAIT_S = 0.01


def only_first_tokens(scheduler_output: SchedulerOutput) -> bool:
    """Whether a step holds only new requests, each computing the rest of its prompt (so every one of
    them samples its first token) and no request that was already running."""
    new_reqs = scheduler_output.scheduled_new_reqs
    if not new_reqs or scheduler_output.scheduled_cached_reqs.req_ids:
        return False
    return all(new.num_computed_tokens + num >= len(new.prompt_token_ids) + len(new.output_token_ids)
               for new, num in zip(new_reqs, scheduler_output.num_scheduled_tokens, strict=True))


def resolve_token_budget(config: InfercoreConfig, max_model_len: int, profile_memory: bool) -> int:
    """Tokens per step: the configured budget, or a default that suits the platform."""
    sched = config.scheduler
    if sched.max_num_batched_tokens is not None:
        budget = sched.max_num_batched_tokens
        if not sched.enable_chunked_prefill and budget < max_model_len:
            raise ValueError(
                f"max_num_batched_tokens={budget} is smaller than max_model_len={max_model_len} with chunked "
                "prefill disabled, so long prompts could never run; raise it or enable chunked prefill")
        return budget
    default = 16384 if profile_memory else 2048
    if not sched.enable_chunked_prefill:
        default = max(default, max_model_len)
    return max(default, sched.max_num_seqs)


class EngineCore:
    """Owns the scheduler and the executor. Used in-process by ``LLM`` and in its own process by the server."""

    def __init__(self, config: InfercoreConfig) -> None:
        with startup_phase("config"):  # plugins, platform, the model's config
            resolve_demo_model(config)
            with startup_phase("plugins"):
                manager = get_plugin_manager()
                manager.configure(config)
            configure_pooling(config)  # no chunked prefill or prefix cache where a pooling model forbids them
            self.config = config
            with startup_phase("platform"):  # probing, then the device runtime's first call
                self.platform = current_platform(manager)
                self.platform.update_config(config)
            with startup_phase("model config"):
                self.model_info: ModelInfo = resolve_model_info(config)
            self.max_num_batched_tokens = resolve_token_budget(
                config, self.model_info.max_model_len, self.platform.capabilities.profile_memory)
            #: What a pooling model serves (None: it generates); requests of the other kind are refused.
            self.pooling_info = pooling_model_info(config)
            executor_name = config.parallel.executor_backend
            executor_cls = manager.registry("executor").load(executor_name)
        started = time.perf_counter()
        with startup_phase("workers"):  # devices, the model built and its weights loaded
            self.executor: Executor = executor_cls(config, self.platform, self.model_info,
                                                   self.max_num_batched_tokens)
        with startup_phase("profiling"):  # a forward pass of the largest step sizes the KV cache
            num_blocks = self.executor.determine_num_blocks()
        with startup_phase("kv_cache"):  # allocation, warm-up, graph capture
            #: The KV cache as the workers allocated it; the scheduler reads it, never recomputes it.
            self.kv_layout: KVCacheLayout = self.executor.initialize_kv_cache(num_blocks)
        self.model_info.num_kv_blocks = num_blocks
        logger.info("engine ready on %s in %.1f s (%d KV blocks)", self.platform.name,
                    time.perf_counter() - started, num_blocks)
        #: Async scheduling overlaps the host work of step N+1 with step N on the device.
        self.async_mode = config.scheduler.async_scheduling
        if self.async_mode is None:
            self.async_mode = self.platform.capabilities.async_scheduling and not config.model.enforce_eager
        speculative = config.speculative.speculative_config
        if speculative is not None and self.async_mode:
            # A step's drafts come back with its output, and the next step schedules them: overlapped
            # steps would verify drafts a step late, so steps that may draft run one at a time and only
            # those of at least disable_by_batch_size requests (no drafts) overlap.
            logger.info("speculative decoding: async scheduling overlaps only steps without drafts (at least "
                        "%s running requests)", speculative.disable_by_batch_size)
        #: Pipeline parallelism: steps are sent to the stages without waiting, up to ``max_batches`` in the
        #: pipe (one per stage, so no stage idles).
        self.pipelined = config.parallel.pipeline_parallel_size > 1
        self.max_batches = config.parallel.pipeline_parallel_size
        self.scheduler = Scheduler(config.scheduler, config.cache, self.model_info.max_model_len, self.kv_layout,
                                   self.max_num_batched_tokens, speculative_config=speculative,
                                   max_loras=config.lora.max_loras if config.lora.enable_lora else None,
                                   max_num_encoder_input_tokens=config.multimodal.max_num_encoder_input_tokens,
                                   pipeline_stages=config.parallel.pipeline_parallel_size,
                                   whole_image_spans=attends_images_whole(config))
        #: The step launched last in overlapped mode and the future of its output.
        self._inflight: tuple[SchedulerOutput, StepFuture] | None = None
        #: Pipeline parallelism: the steps in the pipe and their futures, oldest first.
        self._batches: deque[tuple[SchedulerOutput, StepFuture]] = deque()
        self.grammars = GrammarGate(config, self.model_info.vocab_size, self.model_info.generation_stop_ids)
        # What start-up built (model, caches, registries, compiled kernels) lives as long as the engine.
        freeze_startup_heap()
        TIMELINE.log_summary("the engine")

    def add_request(self, request: EngineCoreRequest) -> None:
        """Queue a request; raises ValueError (changing nothing) if it cannot be taken."""
        if request.request_id in self.scheduler.requests or request.request_id in self.grammars.pending:
            raise ValueError(f"request id {request.request_id!r} is already in use; give each request a unique id")
        check_request_kind(request.sampling_params, self.pooling_info)
        req = Request.from_engine_core_request(request)
        if request.sampling_params.structured_outputs is not None:
            self.grammars.submit(req)
        else:
            self.scheduler.add_request(req)

    def abort_requests(self, request_ids: list[str]) -> None:
        self.grammars.abort(request_ids)
        self.scheduler.abort_requests(request_ids)

    def reset_prefix_cache(self) -> bool:
        """Forget every cached prefix (so the next requests compute their prompts in full); refused
        (False) while requests are unfinished."""
        if self.has_unfinished_requests():
            return False
        self.scheduler.kv_cache_manager.reset_prefix_cache()
        return True

    def has_unfinished_requests(self) -> bool:
        return (bool(self.grammars.pending) or self.scheduler.has_unfinished_requests()
                or self._inflight is not None or bool(self._batches))

    def step(self) -> EngineCoreOutputs:
        """One engine iteration; outputs only for requests with something new."""
        if self.grammars.pending and self._inflight is None and not self.scheduler.has_unfinished_requests():
            # Only compiles are left: wait for one briefly rather than spin beside the compile threads.
            self.grammars.wait_for_compiles(_IDLE_COMPILE_WAIT_S)
        failed = self.grammars.admit_ready(self.scheduler) if self.grammars.pending else []
        if self.pipelined and not self.grammars.has_requests():
            outputs = self._step_pipelined()
        elif self._batches:  # a grammar's steps run one at a time: empty the pipe first
            outputs = self._fold_oldest_batch()
        elif self.async_mode and not self.grammars.has_requests() and not self.scheduler.drafts_allowed():
            outputs = self._step_overlapped()
        else:
            outputs = self._step_synchronous()
        outputs.outputs.extend(failed)
        outputs.stats = self.scheduler.get_stats()
        outputs.timestamp = time.time()
        return outputs

    def _step_synchronous(self) -> EngineCoreOutputs:
        """Schedule, run and fold in one step (after finishing any step still in flight)."""
        if self._inflight is not None:
            return self._finish_inflight()
        if not self.scheduler.has_unfinished_requests():
            return EngineCoreOutputs()
        scheduler_output = self.scheduler.schedule()
        try:
            bitmask = self.grammars.bitmask(self.scheduler, scheduler_output)
            runner_output = self.executor.execute_model(scheduler_output, bitmask)
        except Exception as exc:
            return self._fail_step(exc)
        outputs = self.scheduler.update_from_output(scheduler_output, runner_output)
        self.grammars.after_step(outputs)
        faulted = self.grammars.take_faulted()
        if faulted:
            self._fail_requests(outputs, faulted)
        return outputs

    def _fail_requests(self, outputs: EngineCoreOutputs, errors: dict[str, str]) -> None:
        """Fail requests whose own processing raised (their grammar, say): their outputs of this step
        become errors; the other requests go on."""
        self.scheduler.abort_requests(list(errors), RequestStatus.FINISHED_ERROR)
        kept = [out for out in outputs.outputs if out.request_id not in errors]
        outputs.outputs = kept + [EngineCoreOutput(rid, [], finish_reason=FinishReason.ERROR, error=message)
                                  for rid, message in errors.items()]

    def _step_overlapped(self) -> EngineCoreOutputs:
        """Launch step N, then fold in step N-1, whose tokens arrive while step N runs.

        A step N-1 of nothing but whole new prompts is folded in first: the device had nothing else to
        do beside them, and launching step N before would delay every one of their first tokens by
        that launch."""
        if not self.scheduler.has_unfinished_requests():
            return self._finish_inflight() if self._inflight is not None else EngineCoreOutputs()
        if self._inflight is not None and only_first_tokens(self._inflight[0]):
            return self._finish_inflight()
        scheduler_output = self.scheduler.schedule()
        previous = self._inflight
        try:
            future = self.executor.execute_model(scheduler_output, non_block=True)
            self._inflight = (scheduler_output, future)
            runner_output = previous[1].result() if previous is not None else None
        except Exception as exc:
            self._inflight = None
            return self._fail_step(exc)
        if previous is None or runner_output is None:
            return EngineCoreOutputs()
        return self.scheduler.update_from_output(previous[0], runner_output)

    def _step_pipelined(self) -> EngineCoreOutputs:
        """Pipeline parallelism: send a step while fewer than ``max_batches`` are in the pipe and the
        scheduler has one (it leaves out requests whose sample is in the pipe); else fold in the oldest.
        Each step call does one of the two, so outputs of a step come out as soon as it is folded."""
        if len(self._batches) < self.max_batches and self.scheduler.has_unfinished_requests():
            scheduler_output = self.scheduler.schedule()
            if scheduler_output.total_num_scheduled_tokens:
                try:
                    self._batches.append((scheduler_output, self.executor.submit_step(scheduler_output)))
                except Exception as exc:
                    return self._fail_step(exc)
                if len(self._batches) < self.max_batches:
                    return EngineCoreOutputs()
            else:
                self.scheduler.keep_finished(scheduler_output)
        if not self._batches:
            return EngineCoreOutputs()
        return self._fold_oldest_batch()

    def _fold_oldest_batch(self) -> EngineCoreOutputs:
        """Wait for the oldest step in the pipe and fold its output in."""
        scheduler_output, future = self._batches.popleft()
        try:
            runner_output = future.result()
        except Exception as exc:
            self._batches.clear()  # their requests fail with this step's
            return self._fail_step(exc)
        if runner_output is None:
            return EngineCoreOutputs()
        outputs = self.scheduler.update_from_output(scheduler_output, runner_output)
        self.grammars.after_step(outputs)
        return outputs

    def _finish_inflight(self) -> EngineCoreOutputs:
        previous, self._inflight = self._inflight, None
        assert previous is not None
        try:
            runner_output = previous[1].result()
        except Exception as exc:
            return self._fail_step(exc)
        if runner_output is None:
            return EngineCoreOutputs()
        return self.scheduler.update_from_output(previous[0], runner_output)

    def _fail_step(self, exc: Exception) -> EngineCoreOutputs:
        """A step that raised fails the requests of every step not yet folded in, not the engine."""
        if isinstance(exc, ExecutorDeadError):
            raise exc  # a dead or hung worker ends the engine; its process exits and fails every request
        ids = self.scheduler.fail_unfolded_steps()
        self.grammars.abort(ids)
        self.grammars.take_faulted()  # their requests are in the failed step
        #: The latest failure, for in-process callers (``LLM.generate``) to raise with its cause.
        self.last_step_error: Exception | None = exc
        logger.exception("model step failed; failing the %d requests in it", len(ids))
        message = f"internal error while running the model: {type(exc).__name__}"
        outs = [EngineCoreOutput(r, [], finish_reason=FinishReason.ERROR, error=message) for r in ids]
        return EngineCoreOutputs(outputs=outs)

    def shutdown(self) -> None:
        self.grammars.shutdown()
        self.executor.shutdown()
        gc.unfreeze()
