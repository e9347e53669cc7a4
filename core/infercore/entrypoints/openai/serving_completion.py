"""POST /v1/completions: text or token-id prompts, one or many, streamed or not.

With ``echo`` the prompt comes back in front of each choice's text, and with ``logprobs`` too the
prompt's tokens lead the logprobs lists (the first without a logprob, as nothing precedes it), which
is how evaluation harnesses score a text; ``echo`` with ``max_tokens=0`` scores the prompt only.
"""

from __future__ import annotations

from collections.abc import AsyncIterator, Sequence
from dataclasses import dataclass, field

from fastapi.responses import JSONResponse, Response
from starlette.requests import Request

from infercore.entrypoints.openai.errors import APIError
from infercore.entrypoints.openai.event_stream import EventStreamResponse
from infercore.entrypoints.openai.protocol import (
    CompletionChoice,
    CompletionLogprobs,
    CompletionRequest,
    CompletionResponse,
    PromptLogprob,
    PromptLogprobsList,
    PromptTokensDetails,
    UsageInfo,
    random_id,
)
from infercore.entrypoints.openai.serving_base import (
    SSE_DONE,
    OpenAIServing,
    merge,
    sse,
    sse_error,
    to_api_error,
    until_disconnected,
)
from infercore.entrypoints.openai.stream_chunks import completion_chunk
from infercore.outputs import Logprob, RequestOutput

#: JSON has no -inf; a token the model rules out gets this logprob instead (as vLLM does).
MIN_LOGPROB = -9999.0
Position = dict[int, Logprob] | None


def _finite(logprob: float) -> float:
    return max(logprob, MIN_LOGPROB)


def prompt_logprobs_answer(token_ids: Sequence[int], positions: Sequence[Position], k: int) -> PromptLogprobsList:
    """The answer to ``prompt_logprobs=k``: per prompt position, its token and the ``k`` most likely ones."""
    return [None if position is None else {
        t: PromptLogprob(logprob=_finite(p.logprob), rank=p.rank, decoded_token=p.decoded_token)
        for t, p in position.items() if t == token_id or (p.rank or 0) <= k}
        for token_id, position in zip(token_ids, positions)]


@dataclass
class _Prompt:
    """What one prompt of the request has gathered: its tokens, cache hits and prompt logprobs."""

    token_ids: list[int] = field(default_factory=list)
    num_cached_tokens: int = 0
    logprobs: list[Position] = field(default_factory=list)


@dataclass
class _Choice:
    """What one choice has accumulated so far."""

    text: list[str] = field(default_factory=list)
    num_tokens: int = 0
    logprobs: CompletionLogprobs | None = None
    offset: int = 0
    finish_reason: str | None = None
    stop_reason: int | str | None = None


class OpenAIServingCompletion(OpenAIServing):
    """Runs completion requests through the engine and shapes OpenAI responses."""

    def _prompts(self, req: CompletionRequest) -> list[str | list[int]]:
        prompt = req.prompt
        if isinstance(prompt, str):
            return [prompt]
        if prompt and isinstance(prompt[0], int):
            return [list(prompt)]  # type: ignore[arg-type]
        return list(prompt)  # type: ignore[arg-type]

    @staticmethod
    def _engine_prompt_logprobs(req: CompletionRequest) -> int | None:
        """How many prompt logprobs the engine computes: what ``prompt_logprobs`` asks, and with ``echo``
        at least what ``logprobs`` asks (the echoed prompt tokens carry logprobs too)."""
        wanted = [k for k in (req.prompt_logprobs, req.logprobs if req.echo else None) if k is not None]
        return max(wanted) if wanted else None

    async def create(self, req: CompletionRequest, raw: Request) -> Response:
        self.stamp_parsed()
        lora = self.check_model(req.model)
        if req.suffix:
            raise APIError(400, "suffix is not supported; put the whole text in the prompt", "suffix")
        if req.best_of is not None and req.best_of != (req.n or 1):
            raise APIError(400, "best_of other than n is not supported; use n", "best_of")
        prompts = self._prompts(req)
        self.check_fan_out(len(prompts), req.n or 1)
        params = self.sampling_params(req, req.max_tokens, req.logprobs, self._engine_prompt_logprobs(req),
                                      score_only=bool(req.echo))
        request_id = random_id("cmpl")
        try:
            self.engine.check_capacity(params.n * len(prompts))
        except Exception as exc:
            raise to_api_error(exc) from None
        engine_prompts = [await self.engine_prompt(p) for p in prompts]
        streams = [self.engine.generate(p, params, f"{request_id}-{i}", priority=req.priority,
                                        cache_salt=req.cache_salt, lora_request=lora)
                   for i, p in enumerate(engine_prompts)]
        merged = merge(streams)
        first = await self.first_output(raw, merged, params.structured_outputs is not None)
        if req.stream:
            return EventStreamResponse(self._stream(req, request_id, params.n, first, merged),
                                     media_type="text/event-stream")
        try:
            body = await until_disconnected(raw, self._collect(req, request_id, params.n, first, merged))
        except APIError:
            raise
        except Exception as exc:
            raise to_api_error(exc) from None
        return JSONResponse(body.model_dump())

    def _prompt_text(self, out: RequestOutput) -> str:
        if out.prompt is not None:
            return out.prompt
        return self.tokenizer.decode(out.prompt_token_ids) if self.tokenizer is not None else ""

    def _token_text(self, token_id: int, decoded: str | None) -> str:
        if decoded is not None:
            return decoded
        return self.tokenizer.decode([token_id]) if self.tokenizer is not None else str(token_id)

    def _add_positions(self, lp: CompletionLogprobs, choice: _Choice, token_ids: Sequence[int],
                       positions: Sequence[Position], top: int) -> None:
        """Append tokens with their logprobs: the chosen token's, and the ``top`` most likely by rank."""
        for token_id, position in zip(token_ids, positions):
            chosen = position.get(token_id) if position is not None else None
            token = self._token_text(token_id, chosen.decoded_token if chosen else None)
            lp.tokens.append(token)
            lp.text_offset.append(choice.offset)
            choice.offset += len(token)
            lp.token_logprobs.append(_finite(chosen.logprob) if chosen else None)
            lp.top_logprobs.append(None if position is None else {
                self._token_text(t, p.decoded_token): _finite(p.logprob)
                for t, p in position.items() if t == token_id or (p.rank or 0) <= top})

    def _echo(self, req: CompletionRequest, out: RequestOutput, prompt: _Prompt) -> tuple[str, _Choice]:
        """A new choice of ``out``: its echoed prompt text and, with logprobs, the prompt's tokens."""
        choice = _Choice()
        if not req.echo:
            return "", choice
        text = self._prompt_text(out)
        if req.logprobs is not None:
            choice.logprobs = CompletionLogprobs()
            self._add_positions(choice.logprobs, choice, out.prompt_token_ids, prompt.logprobs, req.logprobs)
        choice.offset = max(choice.offset, len(text))
        return text, choice

    def _add_generated(self, req: CompletionRequest, choice: _Choice, token_ids: Sequence[int],
                       positions: Sequence[Position] | None) -> None:
        if positions is None or req.logprobs is None:
            return
        lp = choice.logprobs = choice.logprobs or CompletionLogprobs()
        self._add_positions(lp, choice, token_ids, positions, req.logprobs)

    @staticmethod
    def _absorb_prompt(prompts: dict[int, _Prompt], prompt_index: int, out: RequestOutput) -> _Prompt:
        prompt = prompts.setdefault(prompt_index, _Prompt())
        prompt.token_ids = out.prompt_token_ids
        prompt.num_cached_tokens = max(prompt.num_cached_tokens, out.num_cached_tokens)
        prompt.logprobs.extend(out.prompt_logprobs or [])
        return prompt

    @staticmethod
    def _prompt_logprobs(req: CompletionRequest, prompt: _Prompt) -> PromptLogprobsList | None:
        if req.prompt_logprobs is None:
            return None
        return prompt_logprobs_answer(prompt.token_ids, prompt.logprobs, req.prompt_logprobs)

    @staticmethod
    def _usage(prompts: dict[int, _Prompt], choices: dict[int, _Choice]) -> UsageInfo:
        return UsageInfo(
            prompt_tokens=sum(len(p.token_ids) for p in prompts.values()),
            completion_tokens=sum(c.num_tokens for c in choices.values()),
            prompt_tokens_details=PromptTokensDetails(
                cached_tokens=sum(p.num_cached_tokens for p in prompts.values())))

    async def _collect(self, req: CompletionRequest, request_id: str, n: int,
                       first: tuple[int, RequestOutput], rest: AsyncIterator[tuple[int, RequestOutput]]
                       ) -> CompletionResponse:
        choices: dict[int, _Choice] = {}
        prompts: dict[int, _Prompt] = {}
        prompt_of: dict[int, int] = {}
        outputs: list[tuple[int, RequestOutput]] = [first]
        async for item in rest:
            outputs.append(item)
        for prompt_index, out in outputs:
            self._absorb_prompt(prompts, prompt_index, out)
        # Prompt logprobs may arrive after a sibling's first tokens: echo once all outputs are in.
        for prompt_index, out in outputs:
            for o in out.outputs:
                index = prompt_index * n + o.index
                if index not in choices:
                    echo, choices[index] = self._echo(req, out, prompts[prompt_index])
                    choices[index].text.append(echo)
                    prompt_of[index] = prompt_index
                choice = choices[index]
                choice.text.append(o.text)
                choice.num_tokens += len(o.token_ids)
                self._add_generated(req, choice, o.token_ids, o.logprobs)
                if o.finish_reason is not None:
                    choice.finish_reason, choice.stop_reason = o.finish_reason, o.stop_reason
        return CompletionResponse(
            id=request_id, model=self.model_name, usage=self._usage(prompts, choices),
            choices=[CompletionChoice(index=i, text="".join(c.text), logprobs=c.logprobs,
                                      finish_reason=c.finish_reason, stop_reason=c.stop_reason,
                                      prompt_logprobs=self._prompt_logprobs(req, prompts[prompt_of[i]]))
                     for i, c in sorted(choices.items())])

    async def _stream(self, req: CompletionRequest, request_id: str, n: int, first: tuple[int, RequestOutput],
                      rest: AsyncIterator[tuple[int, RequestOutput]]) -> AsyncIterator[bytes]:
        """SSE events: every chunk ready for the request at one moment goes out in one write."""
        options = req.stream_options
        include_usage = bool(options and options.include_usage)
        continuous_usage = include_usage and bool(options and options.continuous_usage_stats)
        choices: dict[int, _Choice] = {}
        prompts: dict[int, _Prompt] = {}
        batch: list[bytes] = []
        try:
            item: tuple[int, RequestOutput] | None = first
            while item is not None:
                prompt_index, out = item
                prompt = self._absorb_prompt(prompts, prompt_index, out)
                for o in out.outputs:
                    index = prompt_index * n + o.index
                    text, prompt_logprobs = o.text, None
                    if index not in choices:
                        echo, choices[index] = self._echo(req, out, prompt)
                        text = echo + text
                        prompt_logprobs = self._prompt_logprobs(req, prompt)
                    else:
                        choices[index].logprobs = None
                    choice = choices[index]
                    choice.num_tokens += len(o.token_ids)
                    self._add_generated(req, choice, o.token_ids, o.logprobs)
                    # Without a tokenizer there is no text: new tokens still make a chunk, so clients see progress.
                    progress = text or (self.tokenizer is None and o.token_ids)
                    if not (progress or o.finish_reason is not None or choice.logprobs is not None):
                        continue
                    if choice.logprobs is None and prompt_logprobs is None and not continuous_usage:
                        batch.append(completion_chunk(request_id, self.model_name, index, text, o.finish_reason,
                                                      o.stop_reason))
                        continue
                    chunk = CompletionResponse(id=request_id, model=self.model_name, choices=[CompletionChoice(
                        index=index, text=text, logprobs=choice.logprobs, finish_reason=o.finish_reason,
                        stop_reason=o.stop_reason, prompt_logprobs=prompt_logprobs)],
                        usage=self._usage(prompts, choices) if continuous_usage else None)
                    batch.append(sse(chunk.model_dump(exclude=None if continuous_usage else {"usage"})).encode())
                if batch:
                    if self.engine.trace is not None:
                        self.engine.trace.sse_written(f"{request_id}-{prompt_index}", len(batch),
                                                      sum(c.num_tokens for c in choices.values()))
                    yield b"".join(batch)
                    batch.clear()
                item = await anext(rest, None)
            if include_usage:
                batch.append(sse(CompletionResponse(id=request_id, model=self.model_name, choices=[],
                                                    usage=self._usage(prompts, choices))).encode())
        except Exception as exc:
            batch.append(sse_error(exc).encode())
        batch.append(SSE_DONE.encode())
        yield b"".join(batch)
