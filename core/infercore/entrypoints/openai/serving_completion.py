"""POST /v1/completions: text or token-id prompts, one or many, streamed or not."""

from __future__ import annotations

from collections.abc import AsyncIterator
from dataclasses import dataclass, field

from fastapi.responses import JSONResponse, Response, StreamingResponse
from starlette.requests import Request

from infercore.entrypoints.openai.errors import APIError
from infercore.entrypoints.openai.protocol import (
    CompletionChoice,
    CompletionLogprobs,
    CompletionRequest,
    CompletionResponse,
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
from infercore.outputs import CompletionOutput, RequestOutput


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

    async def create(self, req: CompletionRequest, raw: Request) -> Response:
        self.check_model(req.model)
        if req.suffix:
            raise APIError(400, "suffix is not supported; put the whole text in the prompt", "suffix")
        if req.best_of is not None and req.best_of != (req.n or 1):
            raise APIError(400, "best_of other than n is not supported; use n", "best_of")
        prompts = self._prompts(req)
        self.check_fan_out(len(prompts), req.n or 1)
        params = self.sampling_params(req, req.max_tokens, req.logprobs, req.prompt_logprobs)
        request_id = random_id("cmpl")
        try:
            self.engine.check_capacity(params.n * len(prompts))
        except Exception as exc:
            raise to_api_error(exc) from None
        engine_prompts = [await self.engine_prompt(p) for p in prompts]
        streams = [self.engine.generate(p, params, f"{request_id}-{i}", priority=req.priority,
                                        cache_salt=req.cache_salt) for i, p in enumerate(engine_prompts)]
        merged = merge(streams)
        first = await self.first_output(raw, merged, params.structured_outputs is not None)
        if req.stream:
            return StreamingResponse(self._stream(req, request_id, params.n, first, merged),
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

    def _add_logprobs(self, choice: _Choice, out: CompletionOutput, new_text: str) -> None:
        if out.logprobs is None:
            return
        lp = choice.logprobs = choice.logprobs or CompletionLogprobs()
        for token_id, position in zip(out.token_ids, out.logprobs):
            chosen = position.get(token_id)
            token = self._token_text(token_id, chosen.decoded_token if chosen else None)
            lp.tokens.append(token)
            lp.token_logprobs.append(chosen.logprob if chosen else None)
            lp.top_logprobs.append({self._token_text(t, p.decoded_token): p.logprob for t, p in position.items()})
            lp.text_offset.append(choice.offset)
            choice.offset += len(token)
        choice.offset = max(choice.offset, len(new_text))

    def _token_text(self, token_id: int, decoded: str | None) -> str:
        if decoded is not None:
            return decoded
        return self.tokenizer.decode([token_id]) if self.tokenizer is not None else str(token_id)

    async def _collect(self, req: CompletionRequest, request_id: str, n: int,
                       first: tuple[int, RequestOutput], rest: AsyncIterator[tuple[int, RequestOutput]]
                       ) -> CompletionResponse:
        choices: dict[int, _Choice] = {}
        prompt_tokens: dict[int, int] = {}

        def absorb(prompt_index: int, out: RequestOutput) -> None:
            prompt_tokens[prompt_index] = len(out.prompt_token_ids)
            for o in out.outputs:
                index = prompt_index * n + o.index
                if index not in choices:
                    echo = self._prompt_text(out) if req.echo else ""
                    choices[index] = _Choice(text=[echo], offset=len(echo))
                choice = choices[index]
                choice.text.append(o.text)
                choice.num_tokens += len(o.token_ids)
                self._add_logprobs(choice, o, o.text)
                if o.finish_reason is not None:
                    choice.finish_reason, choice.stop_reason = o.finish_reason, o.stop_reason

        absorb(*first)
        async for prompt_index, out in rest:
            absorb(prompt_index, out)
        completion_tokens = sum(c.num_tokens for c in choices.values())
        usage = UsageInfo(prompt_tokens=sum(prompt_tokens.values()), completion_tokens=completion_tokens)
        return CompletionResponse(
            id=request_id, model=self.model_name, usage=usage,
            choices=[CompletionChoice(index=i, text="".join(c.text), logprobs=c.logprobs,
                                      finish_reason=c.finish_reason, stop_reason=c.stop_reason)
                     for i, c in sorted(choices.items())])

    async def _stream(self, req: CompletionRequest, request_id: str, n: int, first: tuple[int, RequestOutput],
                      rest: AsyncIterator[tuple[int, RequestOutput]]) -> AsyncIterator[str]:
        include_usage = bool(req.stream_options and req.stream_options.include_usage)
        choices: dict[int, _Choice] = {}
        prompt_tokens: dict[int, int] = {}
        try:
            item: tuple[int, RequestOutput] | None = first
            while item is not None:
                prompt_index, out = item
                prompt_tokens[prompt_index] = len(out.prompt_token_ids)
                for o in out.outputs:
                    index = prompt_index * n + o.index
                    text = o.text
                    if index not in choices:
                        choices[index] = _Choice()
                        if req.echo:
                            text = self._prompt_text(out) + text
                    choice = choices[index]
                    choice.num_tokens += len(o.token_ids)
                    choice.logprobs = None
                    self._add_logprobs(choice, o, text)
                    if text or o.finish_reason is not None or choice.logprobs is not None:
                        chunk = CompletionResponse(id=request_id, model=self.model_name, choices=[CompletionChoice(
                            index=index, text=text, logprobs=choice.logprobs, finish_reason=o.finish_reason,
                            stop_reason=o.stop_reason)])
                        yield sse(chunk.model_dump(exclude={"usage"}))
                item = await anext(rest, None)
            if include_usage:
                completion_tokens = sum(c.num_tokens for c in choices.values())
                usage = UsageInfo(prompt_tokens=sum(prompt_tokens.values()), completion_tokens=completion_tokens)
                yield sse(CompletionResponse(id=request_id, model=self.model_name, choices=[], usage=usage))
        except Exception as exc:
            yield sse_error(exc)
        yield SSE_DONE
