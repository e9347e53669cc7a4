"""AsyncLLM: the asyncio front end of an EngineCore running in its own process.

``generate`` tokenizes and validates a request, sends it to the engine and yields its outputs as
they come; an output-handler task reads the engine socket and routes each batch through the
OutputProcessor into per-request output streams (which merge deltas while a reader is behind, so a
slow reader costs one pending output, not one per step); a watcher task notices the engine process dying.
"""

from __future__ import annotations

import asyncio
import contextlib
import functools
import logging
import time
from collections.abc import AsyncIterator, Callable
from dataclasses import dataclass, field
from typing import Any

from infercore.config import InfercoreConfig
from infercore.engine.core_proc import DEFAULT_ENGINE_FACTORY
from infercore.engine.latency_trace import ApiTrace, now_ns, open_writer, request_stamps
from infercore.frontend.admission import AdmissionLimit
from infercore.frontend.core_client import EngineCoreClient, EngineDeadError
from infercore.frontend.dp_client import DataParallelClient, make_engine_client
from infercore.frontend.input_processor import InputProcessor
from infercore.frontend.output_processor import OutputProcessor, RequestOutputKind
from infercore.frontend.output_stream import OutputStream
from infercore.lora.request import LoRARequest
from infercore.lora.served import ServedAdapters
from infercore.multimodal.inputs import make_multimodal_inputs
from infercore.outputs import RequestOutput
from infercore.pooling.config import pooling_model_info
from infercore.pooling.front import check_request_kind
from infercore.sampling_params import SamplingParams
from infercore.tokenizer_loading import serving_tokenizer
from infercore.wire.messages import SchedulerStats
from infercore.wire.model_info import ModelInfo

logger = logging.getLogger("infercore.engine")


class QueueFullError(RuntimeError):
    """More requests are waiting than ``--max-num-queued-requests`` allows; retry later."""


class RequestAbortedError(RuntimeError):
    """The request was aborted with :meth:`AsyncLLM.abort` before it finished."""


class EngineShuttingDownError(RuntimeError):
    """The server is shutting down and takes no new requests."""


@dataclass
class RequestTiming:
    """When a request arrived, produced its first token and finished, and how many tokens it made."""

    arrival: float
    first_token: float | None = None
    finished: float | None = None
    num_prompt_tokens: int = 0
    num_output_tokens: int = 0
    finish_reasons: list[str] = field(default_factory=list)
    aborted: bool = False


class StatsListener:
    """What AsyncLLM tells the metrics layer: engine stats per batch and each finished request."""

    def on_engine_stats(self, stats: SchedulerStats) -> None:
        """Called with the stats of every batch of engine outputs."""

    def on_request_done(self, timing: RequestTiming) -> None:
        """Called once per request, finished or aborted."""


@dataclass
class _Tracked:
    stream: OutputStream
    engine_ids: list[str]


class AsyncLLM:
    """Serve requests through an EngineCore in a separate process; see the module docstring."""

    def __init__(self, config: InfercoreConfig, client: EngineCoreClient, model_info: ModelInfo,
                 tokenizer: Any, listener: StatsListener | None = None) -> None:
        self.config = config
        self.client = client
        self.model_info = model_info
        self.tokenizer = tokenizer
        self.listener = listener or StatsListener()
        self.input_processor = InputProcessor(tokenizer, model_info.max_model_len, model_info.vocab_size,
                                              config.model.max_logprobs, model_info.eos_token_id,
                                              model_info.generation_stop_ids,
                                              make_multimodal_inputs(config, tokenizer))
        self.output_processor = OutputProcessor(tokenizer)
        #: The adapters offered as models (``--lora-modules``; loaded and unloaded at run time).
        self.adapters = ServedAdapters(config)
        #: What a pooling model serves (None: it generates); requests of the other kind are refused with a 400.
        self.pooling_info = pooling_model_info(config)
        self.stats = client.initial_stats or SchedulerStats(num_total_blocks=model_info.num_kv_blocks,
                                                            num_free_blocks=model_info.num_kv_blocks)
        self.dead_reason: str | None = None
        self.on_engine_dead: Callable[[str], None] | None = None
        self._requests: dict[str, _Tracked] = {}
        self._num_sequences = 0
        self._accepting = True
        #: Sequences this process sent since the engine's latest stats (which count every API server's).
        self._sent_since_stats = 0
        self._tasks: list[asyncio.Task[None]] = []
        writer = open_writer("api")
        #: The latency trace's stamps (``INFERCORE_TRACE_LATENCY=1``); None when it is off.
        self.trace = ApiTrace(writer) if writer is not None else None

    @classmethod
    async def start(cls, config: InfercoreConfig, engine_factory: str = DEFAULT_ENGINE_FACTORY,
                    listener: StatsListener | None = None,
                    client: EngineCoreClient | DataParallelClient | None = None,
                    tokenizer_class: str | None = None) -> AsyncLLM:
        """Start the engine process (or, given a ``client`` of engines another process started, reach
        them) and wait for it; raises EngineStartupError with the engine's reason. ``tokenizer_class`` is
        the class ``AutoTokenizer`` picks for the model where another process already named it (the
        ``--api-server-count`` launcher): the tokenizer then loads with it, asking no helper process."""
        client = client or make_engine_client(config, engine_factory)
        # Beside the engine's start; without torch in this process where transformers allows it.
        load: Callable[[Any], Any] = ((lambda _: None) if config.model.skip_tokenizer_init
                                      else functools.partial(serving_tokenizer, class_name=tokenizer_class))
        tokenizer_task = asyncio.get_running_loop().run_in_executor(None, load, config.model)
        try:
            model_info = await client.start()
            tokenizer = await tokenizer_task
            llm = cls(config, client, model_info, tokenizer, listener)
            llm.listener.on_engine_stats(llm.stats)
        except BaseException:
            # The tokenizer's own failure, if it comes, is not the error to report: take it quietly. A started
            # engine must not outlive a start that failed after it.
            tokenizer_task.add_done_callback(lambda task: task.cancelled() or task.exception())
            client.close()
            raise
        llm._tasks = [asyncio.create_task(llm._output_loop()), asyncio.create_task(llm._watch_engine())]
        return llm

    @property
    def is_healthy(self) -> bool:
        return self.dead_reason is None

    @property
    def num_in_flight(self) -> int:
        return len(self._requests)

    def stop_accepting(self) -> None:
        """Refuse new requests from now on (draining before shutdown)."""
        self._accepting = False

    def check_capacity(self, num_sequences: int) -> None:
        """Raise QueueFullError if ``num_sequences`` more would pass ``max_num_seqs`` running plus
        ``--max-num-queued-requests`` waiting (see :mod:`infercore.frontend.admission`).

        The queue is the engines', shared by every API server: their latest reported running and waiting
        counts plus what this process sent since count, as does this process's own in-flight count.
        """
        limit = self.config.scheduler.max_num_queued_requests
        if limit is None:
            return
        running_slots = self.config.scheduler.max_num_seqs * self.config.parallel.data_parallel_size
        refusal = AdmissionLimit(running_slots, limit).refusal(
            engine_running=self.stats.num_running, engine_waiting=self.stats.num_waiting,
            sent_since_stats=self._sent_since_stats, own_in_flight=self._num_sequences, num_new=num_sequences)
        if refusal is not None:
            raise QueueFullError(refusal)

    async def generate(self, prompt: str | list[int] | dict[str, Any], params: SamplingParams, request_id: str,
                       *, priority: int = 0, cache_salt: str | None = None,
                       lora_request: LoRARequest | None = None) -> AsyncIterator[RequestOutput]:
        """Yield the request's outputs (deltas) until it finishes; abort it if the caller stops early."""
        if self.dead_reason is not None:
            raise EngineDeadError(self.dead_reason)
        if not self._accepting:
            raise EngineShuttingDownError("the server is shutting down and takes no new requests")
        if request_id in self._requests:
            raise ValueError(f"request id {request_id!r} is already in use")
        self.check_capacity(params.n)
        check_request_kind(params, self.pooling_info)
        timing = RequestTiming(arrival=time.monotonic())
        self.adapters.checker.check(lora_request)
        processed = self.input_processor.process(request_id, prompt, params, priority=priority,
                                                 cache_salt=cache_salt, lora_request=lora_request)
        tracked = _Tracked(OutputStream(), [r.request_id for r in processed.engine_requests])
        self.output_processor.add_request(processed, RequestOutputKind.DELTA, queue=tracked.stream)
        self._requests[request_id] = tracked
        self._num_sequences += len(tracked.engine_ids)
        self._sent_since_stats += len(tracked.engine_ids)
        if self.trace is not None:
            self.trace.begin(request_id, tracked.engine_ids, {**(request_stamps.get() or {}), "validated": now_ns()})
        finished = False
        try:
            for engine_request in processed.engine_requests:
                await self.client.add_request(engine_request)
            if self.trace is not None:
                self.trace.stamp(request_id, "handed")
            while not finished:
                item = await tracked.stream.get()
                self._record(timing, item)
                finished = item.finished
                yield item
        finally:
            self._requests.pop(request_id, None)
            self._num_sequences -= len(tracked.engine_ids)
            if not finished:
                self._abort_now(request_id, tracked.engine_ids)
            timing.aborted = not finished
            timing.finished = time.monotonic()
            self.listener.on_request_done(timing)
            if self.trace is not None:
                self.trace.finish(request_id, tracked.engine_ids, aborted=not finished)

    @staticmethod
    def _record(timing: RequestTiming, output: RequestOutput) -> None:
        new_tokens = sum(len(o.token_ids) for o in output.outputs)
        if new_tokens and timing.first_token is None:
            timing.first_token = time.monotonic()
        timing.num_prompt_tokens = len(output.prompt_token_ids)
        timing.num_output_tokens += new_tokens
        timing.finish_reasons.extend(o.finish_reason for o in output.outputs if o.finish_reason)

    def _abort_now(self, request_id: str, engine_ids: list[str]) -> None:
        ids = self.output_processor.abort_request(request_id) or engine_ids
        if self.dead_reason is None:
            task = asyncio.ensure_future(self.client.abort_requests(list(ids)))
            task.add_done_callback(_log_failure)

    async def abort(self, request_id: str) -> None:
        """Stop a request: its generator raises RequestAbortedError and the engine frees its blocks."""
        tracked = self._requests.get(request_id)
        if tracked is not None:
            tracked.stream.put_nowait(RequestAbortedError(f"request {request_id} was aborted"))

    def abort_all(self, reason: str) -> None:
        """End every in-flight request with EngineShuttingDownError(``reason``); the engine frees them."""
        for tracked in self._requests.values():
            tracked.stream.put_nowait(EngineShuttingDownError(reason))

    async def _output_loop(self) -> None:
        try:
            while True:
                outputs = await self.client.get_outputs()
                if self.trace is not None:
                    self.trace.received(outputs.outputs, now_ns())
                if outputs.stats is not None:
                    self.stats = outputs.stats
                    self._sent_since_stats = 0
                    self.listener.on_engine_stats(outputs.stats)
                if outputs.outputs:
                    processed = self.output_processor.process_outputs(outputs.outputs)
                    if processed.reqs_to_abort:
                        await self.client.abort_requests(processed.reqs_to_abort)
        except EngineDeadError as exc:
            self._fail(f"the engine failed: {exc}")
        except asyncio.CancelledError:
            raise
        except Exception as exc:
            logger.exception("output handler failed")
            self._fail(f"the engine's output handler failed ({type(exc).__name__})")

    async def _watch_engine(self) -> None:
        code = await self.client.wait_dead()
        self._fail(f"the engine process exited unexpectedly (exit code {code})")

    def _fail(self, reason: str) -> None:
        """The engine is gone: fail every in-flight request and tell the server."""
        if self.dead_reason is not None:
            return
        self.dead_reason = reason
        logger.error("%s; failing %d in-flight requests", reason, len(self._requests))
        for tracked in self._requests.values():
            tracked.stream.put_nowait(EngineDeadError(reason))
        if self.on_engine_dead is not None:
            self.on_engine_dead(reason)

    async def shutdown(self) -> None:
        """Stop the handler tasks and the engine process."""
        for task in self._tasks:
            task.cancel()
        for task in self._tasks:
            with contextlib.suppress(asyncio.CancelledError):
                await task
        self.client.close()
        if self.trace is not None:
            self.trace.writer.close()


def _log_failure(task: asyncio.Future[None]) -> None:
    if not task.cancelled() and task.exception() is not None:
        logger.warning("could not send an abort to the engine: %s", task.exception())
