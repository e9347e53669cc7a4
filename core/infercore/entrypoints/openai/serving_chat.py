"""POST /v1/chat/completions: messages → chat template → engine → assistant message, streamed or not."""

from __future__ import annotations

from collections.abc import AsyncIterator
from dataclasses import dataclass, field
from typing import Any

import msgspec
from fastapi.responses import JSONResponse, Response
from starlette.requests import Request

from infercore.entrypoints.openai.chat_parsing import ChatParsers, ChoiceParser, tool_choice_constraint
from infercore.entrypoints.openai.errors import APIError
from infercore.entrypoints.openai.event_stream import EventStreamResponse
from infercore.entrypoints.openai.offload import off_loop
from infercore.entrypoints.openai.protocol import (
    ChatChoice,
    ChatChunkChoice,
    ChatCompletionChunk,
    ChatCompletionRequest,
    ChatCompletionResponse,
    ChatLogprobs,
    ChatMessage,
    DeltaMessage,
    GenerateRequest,
    PromptTokensDetails,
    ResponseMessage,
    TokenLogprob,
    TopLogprob,
    UsageInfo,
    random_id,
)
from infercore.entrypoints.openai.serving_base import (
    SSE_DONE,
    OpenAIServing,
    sse,
    sse_error,
    to_api_error,
    until_disconnected,
)
from infercore.entrypoints.openai.serving_completion import prompt_logprobs_answer
from infercore.entrypoints.openai.stream_chunks import chat_chunk
from infercore.entrypoints.openai.template_process import TemplateProcessPool
from infercore.multimodal.chat_content import chat_forms
from infercore.multimodal.media import MediaError
from infercore.outputs import CompletionOutput, Logprob, RequestOutput
from infercore.sampling_params import StructuredOutputsParams
from infercore.tokenizer import TEMPLATE_TIMEOUT_S

#: Seconds to load (fetch, decode) and process a request's images.
MEDIA_TIMEOUT_S = 60.0


def message_dicts(messages: list[ChatMessage]) -> list[dict[str, Any]]:
    """Messages as the chat template expects them, with text content parts joined; 400 on other parts (image
    parts too: :func:`messages_and_images` takes those)."""
    return messages_and_images(messages, None)[0]


def messages_and_images(messages: list[ChatMessage], placeholder: str | None
                        ) -> tuple[list[dict[str, Any]], list[Any], list[dict[str, Any]]]:
    """The messages as the chat template expects them (content parts joined, each image part as the model's
    ``placeholder`` text), the image URLs in order, and the messages with image parts kept as
    ``{"type": "image"}`` (:mod:`infercore.multimodal.chat_content`); 400 on parts the server can't take."""
    try:
        return chat_forms([m.model_dump(exclude_none=True) for m in messages], placeholder)
    except MediaError as exc:
        raise APIError(400, str(exc), "messages") from None


@dataclass
class _Choice:
    text: list[str] = field(default_factory=list)
    logprobs: list[TokenLogprob] = field(default_factory=list)
    num_tokens: int = 0
    finish_reason: str | None = None
    stop_reason: int | str | None = None
    started: bool = False
    parser: ChoiceParser | None = None


class OpenAIServingChat(OpenAIServing):
    """Runs chat requests through the chat template and the engine, and splits replies into reasoning,
    content and tool calls with the server's parsers."""

    def __init__(self, *args: Any, chat_template: str | None = None, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.chat_template = chat_template
        self.parsers = ChatParsers(self.config.serve, self.tokenizer)
        #: Where templates sent with a request render (killed at their deadline).
        self.request_templates = TemplateProcessPool()

    def _check_features(self, req: ChatCompletionRequest) -> None:
        """Refuse, with what to do, what this server can't serve (automatic tool calls need a parser)."""
        if req.top_logprobs and not req.logprobs:
            raise APIError(400, "top_logprobs needs logprobs set to true", "top_logprobs")
        if req.prompt_logprobs is not None and req.stream:
            raise APIError(400, "prompt_logprobs are answered only without stream on chat; drop one of them",
                           "prompt_logprobs")
        serve = self.config.serve
        if (req.tools and req.tool_choice in (None, "auto")
                and not (serve.enable_auto_tool_choice and serve.tool_call_parser)):
            raise APIError(400, '"auto" tool choice needs the server started with --enable-auto-tool-choice and '
                           "--tool-call-parser NAME (parsers ship in infercore-tool-parsers)", "tool_choice")

    def structured_outputs(self, req: GenerateRequest) -> StructuredOutputsParams | None:
        """The request's own constraint, or the one its ``tool_choice`` implies (not both)."""
        own = super().structured_outputs(req)
        implied = tool_choice_constraint(req) if isinstance(req, ChatCompletionRequest) else None
        if own is not None and implied is not None:
            raise APIError(400, "tool_choice 'required' or a named function constrains the reply already; drop "
                           "response_format, structured_outputs and guided_* from the request", "tool_choice")
        return implied or own

    async def render_prompt(self, req: ChatCompletionRequest) -> tuple[str, list[Any]]:
        """The request's messages through the chat template, rendered off the event loop (a template sent
        with the request in a worker process that is killed at its deadline), and the image URLs of its
        image parts (each rendered as the model's placeholder text)."""
        mm = self.engine.input_processor.mm
        messages, images, structured = messages_and_images(req.messages,
                                                           mm.placeholder_text if mm is not None else None)
        if mm is not None:
            try:
                mm.check_count(len(images))
            except MediaError as exc:
                raise APIError(400, str(exc), "messages") from None
        kwargs: dict[str, Any] = dict(
            add_generation_prompt=req.add_generation_prompt,
            tools=[t.model_dump(exclude_none=True) for t in req.tools] if req.tools else None,
            chat_template_kwargs=req.chat_template_kwargs, continue_final_message=req.continue_final_message)

        async def render(messages: list[dict[str, Any]]) -> str:
            if not req.chat_template:
                return await self.render_chat(messages, chat_template=self.chat_template, **kwargs)
            try:
                return await self.request_templates.render(self.tokenizer, messages, chat_template=req.chat_template,
                                                           timeout_s=TEMPLATE_TIMEOUT_S, **kwargs)
            except ValueError as exc:
                raise APIError(400, str(exc), "messages") from None

        if not images:
            return await render(messages), images
        assert mm is not None
        try:  # the checkpoint's template may take image parts as such
            rich: str | None = await render(structured)
        except APIError:
            rich = None
        if rich is not None and rich.count(mm.placeholder_text) == len(images):
            return rich, images
        return await render(messages), images

    async def with_images(self, engine_prompt: dict[str, Any], images: list[Any]) -> dict[str, Any]:
        """The prompt with its images loaded and processed off the event loop (within a time bound): its
        placeholders expanded and its features ready for the engine."""
        mm = self.engine.input_processor.mm
        assert mm is not None
        try:
            ids, features = await off_loop(mm.load_and_process, engine_prompt["prompt_token_ids"], images,
                                           kind="media", timeout_s=MEDIA_TIMEOUT_S,
                                           what="loading and processing the images", param="messages")
        except MediaError as exc:
            raise APIError(400, str(exc), "messages") from None
        return {**engine_prompt, "prompt_token_ids": ids, "mm_features": features}

    def _check_parser_kwargs(self, req: ChatCompletionRequest) -> None:
        """Build the request's parsers once before generating, so ``chat_template_kwargs`` they can't take
        are a 400 now rather than a failure after the whole reply was generated."""
        try:
            self.parsers.for_request(req)
        except (TypeError, ValueError) as exc:
            raise APIError(400, f"chat_template_kwargs can't be given to the server's reasoning parser ({exc}); "
                           "remove the key it names", "chat_template_kwargs") from None

    async def create(self, req: ChatCompletionRequest, raw: Request) -> Response:
        self.stamp_parsed()
        lora = self.check_model(req.model)
        self._check_features(req)
        self.check_fan_out(1, req.n or 1)
        if self.tokenizer is None:
            raise APIError(400, "chat needs a tokenizer; the server runs with --skip-tokenizer-init", "messages")
        self._check_parser_kwargs(req)
        max_tokens = req.max_completion_tokens if req.max_completion_tokens is not None else req.max_tokens
        logprobs = (req.top_logprobs or 0) if req.logprobs else None
        params = self.sampling_params(req, max_tokens, logprobs, req.prompt_logprobs)
        if self.parsers.parses(req):
            # Parsers look for markers that many vocabularies hold as special tokens.
            params = msgspec.structs.replace(params, skip_special_tokens=False)
        prompt, images = await self.render_prompt(req)
        engine_prompt = await self.engine_prompt(prompt, add_special_tokens=False, param="messages")
        if images:
            engine_prompt = await self.with_images(engine_prompt, images)
        request_id = random_id("chatcmpl")
        stream = self.engine.generate(engine_prompt, params, request_id, priority=req.priority,
                                      cache_salt=req.cache_salt, lora_request=lora)
        first = await self.first_output(raw, stream, params.structured_outputs is not None)
        echo = ""
        if req.echo and req.messages[-1].role == "assistant" and isinstance(req.messages[-1].content, str):
            echo = req.messages[-1].content
        if req.stream:
            return EventStreamResponse(self._stream(req, request_id, first, stream, echo),
                                     media_type="text/event-stream")
        try:
            body = await until_disconnected(raw, self._collect(req, request_id, first, stream, echo))
        except APIError:
            raise
        except Exception as exc:
            raise to_api_error(exc) from None
        return JSONResponse(body.model_dump(exclude_none=True))

    def _logprobs(self, out: CompletionOutput, k: int) -> list[TokenLogprob]:
        """Chat logprobs of the new tokens: each chosen token and the ``k`` most likely ones (by rank)."""
        entries = []
        for token_id, position in zip(out.token_ids, out.logprobs or []):
            chosen = position.get(token_id)
            token = self._token_text(token_id, chosen.decoded_token if chosen else None)
            tops = [TopLogprob(token=(t := self._token_text(tid, p.decoded_token)), logprob=p.logprob,
                               bytes=list(t.encode()))
                    for tid, p in sorted(position.items(), key=lambda kv: kv[1].rank or 0)
                    if p.rank is not None and p.rank <= k]
            entries.append(TokenLogprob(token=token, logprob=chosen.logprob if chosen else float("-inf"),
                                        bytes=list(token.encode()), top_logprobs=tops))
        return entries

    def _token_text(self, token_id: int, decoded: str | None) -> str:
        return decoded if decoded is not None else self.tokenizer.decode([token_id])

    async def _collect(self, req: ChatCompletionRequest, request_id: str, first: RequestOutput,
                       rest: AsyncIterator[RequestOutput], echo: str) -> ChatCompletionResponse:
        choices: dict[int, _Choice] = {}
        out: RequestOutput | None = first
        prompt_tokens = len(first.prompt_token_ids)
        top_k = req.top_logprobs or 0
        prompt_positions: list[dict[int, Logprob] | None] = []
        cached_tokens = 0
        while out is not None:
            prompt_positions.extend(out.prompt_logprobs or [])
            cached_tokens = max(cached_tokens, out.num_cached_tokens)
            for o in out.outputs:
                choice = choices.setdefault(o.index, _Choice())
                choice.text.append(o.text)
                choice.num_tokens += len(o.token_ids)
                if o.logprobs is not None:
                    choice.logprobs.extend(self._logprobs(o, top_k))
                if o.finish_reason is not None:
                    choice.finish_reason, choice.stop_reason = o.finish_reason, o.stop_reason
            out = await anext(rest, None)
        answer = None
        if req.prompt_logprobs is not None:
            answer = prompt_logprobs_answer(first.prompt_token_ids, prompt_positions, req.prompt_logprobs)
        return ChatCompletionResponse(
            id=request_id, model=self.model_name, usage=_usage(prompt_tokens, cached_tokens, choices),
            choices=[self._choice(req, i, c, echo) for i, c in sorted(choices.items())], prompt_logprobs=answer)

    def _choice(self, req: ChatCompletionRequest, index: int, choice: _Choice, echo: str) -> ChatChoice:
        """One finished choice, its text split by the request's parsers."""
        parser = self.parsers.for_request(req)
        parsed = parser.parse("".join(choice.text), truncated=choice.finish_reason == "length")
        content = echo + (parsed.content or "")
        message = ResponseMessage(content=content or None, reasoning=parsed.reasoning,
                                  reasoning_content=parsed.reasoning, tool_calls=parsed.tool_calls)
        return ChatChoice(index=index, message=message,
                          logprobs=ChatLogprobs(content=choice.logprobs) if choice.logprobs else None,
                          finish_reason=parser.finish_reason(choice.finish_reason), stop_reason=choice.stop_reason)

    def _chunk(self, request_id: str, index: int, delta: DeltaMessage, finish_reason: str | None = None,
               logprobs: list[TokenLogprob] | None = None, stop_reason: int | str | None = None,
               usage: UsageInfo | None = None) -> bytes:
        """One SSE chunk; ``usage`` (the counts so far) only with ``continuous_usage_stats``. A delta of
        role and content alone, without logprobs or usage, takes the lean encoder."""
        if logprobs is None and usage is None and _role_and_content_only(delta):
            return chat_chunk(request_id, self.model_name, index, delta.role, delta.content, finish_reason,
                              stop_reason)
        choice = ChatChunkChoice(index=index, delta=delta, finish_reason=finish_reason, stop_reason=stop_reason,
                                 logprobs=ChatLogprobs(content=logprobs) if logprobs else None)
        chunk = ChatCompletionChunk(id=request_id, model=self.model_name, choices=[choice], usage=usage)
        return sse(chunk.model_dump(exclude=None if usage else {"usage"}, exclude_none=True)).encode()

    async def _stream(self, req: ChatCompletionRequest, request_id: str, first: RequestOutput,
                      rest: AsyncIterator[RequestOutput], echo: str) -> AsyncIterator[bytes]:
        """SSE events: every chunk ready for the request at one moment goes out in one write."""
        options = req.stream_options
        include_usage = bool(options and options.include_usage)
        continuous_usage = include_usage and bool(options and options.continuous_usage_stats)
        choices: dict[int, _Choice] = {}
        prompt_tokens = len(first.prompt_token_ids)
        cached_tokens = 0
        batch: list[bytes] = []
        try:
            out: RequestOutput | None = first
            while out is not None:
                cached_tokens = max(cached_tokens, out.num_cached_tokens)
                for o in out.outputs:
                    choice = choices.setdefault(o.index, _Choice(parser=self.parsers.for_request(req)))
                    choice.num_tokens += len(o.token_ids)
                    usage = _usage(prompt_tokens, cached_tokens, choices) if continuous_usage else None
                    if not choice.started:
                        choice.started = True
                        batch.append(self._chunk(request_id, o.index, DeltaMessage(role="assistant", content=echo),
                                                 usage=usage))
                    batch.extend(self._step_chunks(req, request_id, choice, o, usage))
                if batch:
                    yield b"".join(batch)
                    batch.clear()
                out = await anext(rest, None)
            if include_usage:
                batch.append(sse(ChatCompletionChunk(id=request_id, model=self.model_name, choices=[],
                                                     usage=_usage(prompt_tokens, cached_tokens, choices))).encode())
        except Exception as exc:
            batch.append(sse_error(exc).encode())
        batch.append(SSE_DONE.encode())
        yield b"".join(batch)

    def _step_chunks(self, req: ChatCompletionRequest, request_id: str, choice: _Choice,
                     o: CompletionOutput, usage: UsageInfo | None = None) -> list[bytes]:
        """The chunks one engine step of a choice streams: its parsed delta, and at the end what the
        parsers held back with the finish reason."""
        parser = choice.parser
        assert parser is not None
        logprobs = self._logprobs(o, req.top_logprobs or 0) if o.logprobs is not None else None
        delta = parser.feed(o.text, list(o.token_ids))
        step = ([self._chunk(request_id, o.index, delta or DeltaMessage(), logprobs=logprobs, usage=usage)]
                if delta or logprobs else [])
        if o.finish_reason is None:
            return step
        tail = parser.finish(truncated=o.finish_reason == "length")
        finish = parser.finish_reason(o.finish_reason)
        if tail is None:
            return [self._chunk(request_id, o.index, delta or DeltaMessage(), finish, logprobs, o.stop_reason, usage)]
        return [*step, self._chunk(request_id, o.index, tail, finish, None, o.stop_reason, usage)]


def _role_and_content_only(delta: DeltaMessage) -> bool:
    """Whether nothing but the role and content of ``delta`` is set (no tool calls, no reasoning)."""
    return all(value is None for name, value in delta if name not in ("role", "content"))


def _usage(prompt_tokens: int, cached_tokens: int, choices: dict[int, _Choice]) -> UsageInfo:
    """The request's token counts so far, with its prefix-cache hits."""
    return UsageInfo(prompt_tokens=prompt_tokens, completion_tokens=sum(c.num_tokens for c in choices.values()),
                     prompt_tokens_details=PromptTokensDetails(cached_tokens=cached_tokens))
