"""From engine outputs to user outputs: incremental text, stop strings, logprobs, n>1 aggregation."""

from __future__ import annotations

import enum
import logging
import time
from dataclasses import dataclass, field
from typing import Any, Protocol

from transformers import PreTrainedTokenizerBase

from infercore.frontend.detokenizer import IncrementalDetokenizer, make_detokenizer
from infercore.frontend.input_processor import ProcessedRequest
from infercore.frontend.logprobs import LogprobsConverter
from infercore.frontend.stop_checker import StopChecker
from infercore.outputs import CompletionOutput, Logprob, PromptLogprobs, RequestOutput, SampleLogprobs
from infercore.sampling_params import SamplingParams
from infercore.wire.messages import EngineCoreOutput, FinishReason
from infercore.wire.pooled import PooledTensor

logger = logging.getLogger(__name__)


class RequestOutputKind(enum.Enum):
    """What each RequestOutput of a request holds."""

    #: Everything so far (text, tokens, logprobs), on every step.
    CUMULATIVE = 0
    #: Only what is new since the previous output: for streaming.
    DELTA = 1
    #: One output, when the request has finished.
    FINAL_ONLY = 2


class OutputQueue(Protocol):
    """Where a request's outputs go instead of being returned (an ``asyncio.Queue`` fits)."""

    def put_nowait(self, item: Any) -> None: ...


@dataclass
class ProcessedOutputs:
    """One batch of engine outputs, processed.

    ``reqs_to_abort`` are engine request ids that finished here (a stop string matched, or their output
    could not be processed) while the engine still runs them: the caller must abort them in the engine.
    """

    request_outputs: list[RequestOutput] = field(default_factory=list)
    reqs_to_abort: list[str] = field(default_factory=list)


class _Sequence:
    """The output of one engine request (one of the ``n`` samples): tokens, text, logprobs, finish."""

    def __init__(self, index: int, engine_id: str, params: SamplingParams, prompt_token_ids: list[int],
                 tokenizer: PreTrainedTokenizerBase | None, converter: LogprobsConverter) -> None:
        self.index = index
        self.engine_id = engine_id
        self.params = params
        self.converter = converter
        self.detokenizer: IncrementalDetokenizer | None = None
        if tokenizer is not None and params.detokenize:
            self.detokenizer = make_detokenizer(tokenizer, prompt_token_ids, params.skip_special_tokens,
                                                params.spaces_between_special_tokens)
        self.stop_checker = StopChecker(params.stop or [], params.include_stop_str_in_output)
        self.token_ids: list[int] = []
        self.logprobs: SampleLogprobs | None = [] if params.logprobs is not None else None
        self.cumulative_logprob: float | None = 0.0 if params.logprobs is not None else None
        self.text = ""
        self.finish_reason: str | None = None
        self.stop_reason: int | str | None = None
        self._sent_text = 0
        self._sent_tokens = 0

    @property
    def finished(self) -> bool:
        return self.finish_reason is not None

    def update(self, out: EngineCoreOutput) -> bool:
        """Take one step's tokens; True if a stop string finished the sequence."""
        new_ids = out.new_token_ids
        if self.detokenizer is None and self.logprobs is None:
            # Token ids only (detokenize=False or no tokenizer): nothing to decode or check.
            self.token_ids.extend(new_ids)
            if out.finish_reason is not None:
                self.finish(str(out.finish_reason), out.stop_reason)
            return False
        # An EOS or stop-token finish: its token is kept in token_ids but its text is not shown.
        hide_last = (out.finish_reason == FinishReason.STOP and not isinstance(out.stop_reason, str)
                     and not self.params.include_stop_str_in_output)
        for k, token_id in enumerate(new_ids):
            self.token_ids.append(token_id)
            self._add_logprobs(out, k)
            if self.detokenizer is None or (hide_last and k == len(new_ids) - 1):
                continue
            new_from = len(self.text)
            self.text += self.detokenizer.step(token_id)
            if self.stop_checker.stops and len(self.token_ids) >= self.params.min_tokens:
                match = self.stop_checker.find(self.text, new_from)
                if match is not None:
                    self.text = self.text[:match.text_end]
                    self.finish("stop", match.stop)
                    return True
        if out.finish_reason is not None:
            self.finish(str(out.finish_reason), out.stop_reason)
        return False

    def _add_logprobs(self, out: EngineCoreOutput, k: int) -> None:
        if self.logprobs is None or out.new_logprobs is None or k >= len(out.new_logprobs.token_ids):
            return
        self.logprobs.append(self.converter.position(out.new_logprobs, k))
        self.cumulative_logprob = (self.cumulative_logprob or 0.0) + out.new_logprobs.logprobs[k][0]

    def finish(self, reason: str, stop_reason: int | str | None = None) -> None:
        self.finish_reason = reason
        self.stop_reason = stop_reason

    def completion(self, delta: bool) -> CompletionOutput:
        """This sequence's output: all of it, or (``delta``) what is new since the last delta."""
        shown = len(self.text) if self.finished else len(self.text) - self.stop_checker.holdback(self.text)
        shown = max(shown, self._sent_text)
        text_from, tokens_from = (self._sent_text, self._sent_tokens) if delta else (0, 0)
        if delta:
            self._sent_text, self._sent_tokens = shown, len(self.token_ids)
        return CompletionOutput(
            index=self.index, text=self.text[text_from:shown], token_ids=self.token_ids[tokens_from:],
            cumulative_logprob=self.cumulative_logprob,
            logprobs=None if self.logprobs is None else self.logprobs[tokens_from:],
            finish_reason=self.finish_reason, stop_reason=self.stop_reason)


class _Request:
    """A user request: its prompt, its sequences and where its outputs go."""

    def __init__(self, processed: ProcessedRequest, kind: RequestOutputKind, queue: OutputQueue | None,
                 tokenizer: PreTrainedTokenizerBase | None, converter: LogprobsConverter) -> None:
        self.request_id = processed.request_id
        self.prompt = processed.prompt
        self.prompt_token_ids = processed.prompt_token_ids
        self.kind = kind
        self.queue = queue
        self.converter = converter
        self.sequences = [
            _Sequence(i, req.request_id, req.sampling_params, processed.prompt_token_ids, tokenizer, converter)
            for i, req in enumerate(processed.engine_requests)
        ]
        # The first prompt token has no logprob (nothing precedes it): a request that asked for
        # prompt logprobs starts with [None], even if its prompt is that one token.
        wants = processed.params.prompt_logprobs is not None
        self.prompt_logprobs: PromptLogprobs | None = [None] if wants else None
        self._sent_prompt_logprobs = 0
        self.num_cached_tokens = 0
        self.pooled: PooledTensor | None = None  # a pooling request's result (infercore.pooling)
        arrival = processed.engine_requests[0].arrival_time if processed.engine_requests else time.time()
        self.metrics: dict[str, float] = {"arrival_time": arrival}

    @property
    def finished(self) -> bool:
        sequences = self.sequences
        if len(sequences) == 1:
            return sequences[0].finish_reason is not None
        return all(seq.finished for seq in sequences)

    def add_prompt_logprobs(self, positions: list[dict[int, Logprob]]) -> None:
        if self.prompt_logprobs is None:
            self.prompt_logprobs = [None]
        self.prompt_logprobs.extend(positions)

    def make_output(self, changed: list[_Sequence]) -> RequestOutput | None:
        """The RequestOutput to publish after a step that touched ``changed``, or None."""
        finished = self.finished
        if self.kind is RequestOutputKind.FINAL_ONLY and not finished:
            return None
        delta = self.kind is RequestOutputKind.DELTA
        sequences = changed if delta else self.sequences
        prompt_logprobs = self.prompt_logprobs
        if delta and prompt_logprobs is not None:
            prompt_logprobs = prompt_logprobs[self._sent_prompt_logprobs:]
            self._sent_prompt_logprobs += len(prompt_logprobs)
        now = time.time()
        self.metrics.setdefault("first_token_time", now)
        self.metrics["last_token_time"] = now
        return RequestOutput(
            request_id=self.request_id, prompt=self.prompt, prompt_token_ids=self.prompt_token_ids,
            prompt_logprobs=prompt_logprobs, outputs=[seq.completion(delta) for seq in sequences],
            finished=finished, num_cached_tokens=self.num_cached_tokens, metrics=dict(self.metrics),
            pooled=self.pooled)


class OutputProcessor:
    """Keeps the state of every unfinished request and turns engine outputs into RequestOutputs.

    A failure while processing one request's output (a detokenizer error, say) finishes that request
    with finish_reason "error"; other requests go on.
    """

    def __init__(self, tokenizer: PreTrainedTokenizerBase | None) -> None:
        self.tokenizer = tokenizer
        self._converter = LogprobsConverter(tokenizer)
        self._requests: dict[str, _Request] = {}
        self._sequences: dict[str, tuple[_Request, _Sequence]] = {}

    @property
    def num_unfinished_requests(self) -> int:
        return len(self._requests)

    def has_unfinished_requests(self) -> bool:
        return bool(self._requests)

    def add_request(self, processed: ProcessedRequest,
                    output_kind: RequestOutputKind = RequestOutputKind.CUMULATIVE,
                    queue: OutputQueue | None = None) -> None:
        """Track a request; its outputs go to ``queue`` if given, else they are returned by process_outputs."""
        if processed.request_id in self._requests:
            raise ValueError(f"request id {processed.request_id!r} is already in use; use a unique id")
        request = _Request(processed, output_kind, queue, self.tokenizer, self._converter)
        self._requests[request.request_id] = request
        for seq in request.sequences:
            self._sequences[seq.engine_id] = (request, seq)

    def abort_request(self, request_id: str) -> list[str]:
        """Forget a request (no more outputs); returns the engine ids of its unfinished sequences."""
        request = self._requests.pop(request_id, None)
        if request is None:
            return []
        for seq in request.sequences:
            self._sequences.pop(seq.engine_id, None)
        return [seq.engine_id for seq in request.sequences if not seq.finished]

    def process_outputs(self, outputs: list[EngineCoreOutput]) -> ProcessedOutputs:
        """Apply one step's engine outputs; outputs of unknown (aborted) requests are ignored."""
        result = ProcessedOutputs()
        changed: dict[str, tuple[_Request, list[_Sequence]]] = {}
        for out in outputs:
            entry = self._sequences.get(out.request_id)
            if entry is None or entry[1].finished:
                continue  # aborted, or a sample that a stop string ended while the engine still ran it
            request, seq = entry
            if self._apply(request, seq, out):
                result.reqs_to_abort.append(seq.engine_id)
            if request.kind is RequestOutputKind.FINAL_ONLY and seq.finish_reason is None:
                continue  # nothing to publish until every sequence of the request has finished
            changed.setdefault(request.request_id, (request, []))[1].append(seq)
        for request, seqs in changed.values():
            self._publish(request, seqs, result)
        return result

    def _apply(self, request: _Request, seq: _Sequence, out: EngineCoreOutput) -> bool:
        """Apply one output to ``seq``; True if the engine must now abort it."""
        if out.num_cached_tokens:
            request.num_cached_tokens = out.num_cached_tokens
        if out.pooled is not None:
            request.pooled = out.pooled
        if out.error is not None:
            seq.finish("error", out.error)
            return False
        try:
            if out.prompt_logprobs is not None and seq.index == 0:
                request.add_prompt_logprobs(self._converter.convert(out.prompt_logprobs))
            stopped = seq.update(out)
        except Exception as exc:
            logger.exception("processing the output of request %s failed", seq.engine_id)
            seq.finish("error", f"processing the model's output failed: {type(exc).__name__}")
            return not out.finished
        return stopped and not out.finished

    def _publish(self, request: _Request, seqs: list[_Sequence], result: ProcessedOutputs) -> None:
        output = request.make_output(seqs)
        if request.finished:
            self.abort_request(request.request_id)
        if output is None:
            return
        if request.queue is not None:
            request.queue.put_nowait(output)
        else:
            result.request_outputs.append(output)
