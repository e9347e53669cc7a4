"""What completions and chat share: model check, request → SamplingParams, error mapping, disconnects, SSE."""

from __future__ import annotations

import asyncio
import functools
import json
from collections.abc import AsyncGenerator, AsyncIterator, Awaitable
from typing import Any, TypeVar

from starlette.requests import Request

from infercore.config import InfercoreConfig
from infercore.engine.latency_trace import now_ns, request_stamps
from infercore.entrypoints.openai.disconnect import cancelled_on_disconnect
from infercore.entrypoints.openai.errors import APIError, error_body
from infercore.entrypoints.openai.offload import off_loop
from infercore.entrypoints.openai.protocol import GenerateRequest
from infercore.frontend.async_llm import AsyncLLM, EngineShuttingDownError, QueueFullError
from infercore.frontend.core_client import EngineDeadError
from infercore.lora.request import LoRARequest
from infercore.plugins import get_plugin_manager
from infercore.sampling_params import SamplingParams, SamplingParamsError, StructuredOutputsParams
from infercore.tokenizer import TEMPLATE_TIMEOUT_S, apply_chat_template

T = TypeVar("T")
#: How often a non-streaming request checks whether its client is still connected.
DISCONNECT_POLL_S = 0.25
RETRY_AFTER_S = "1"
#: Seconds a render may run past the template's own deadline before the request is answered anyway
#: (the sandbox checks its deadline between template operations, not inside one).
RENDER_GRACE_S = 2.0
#: Seconds tokenizing one prompt may take (prompts are bounded in characters before this starts).
TOKENIZE_TIMEOUT_S = 30.0


def to_api_error(exc: BaseException) -> APIError:
    """The HTTP error for an exception raised while accepting or running a request."""
    if isinstance(exc, APIError):
        return exc
    if isinstance(exc, QueueFullError):
        return APIError(503, str(exc), headers={"Retry-After": RETRY_AFTER_S})
    if isinstance(exc, EngineShuttingDownError):
        return APIError(503, str(exc), headers={"Retry-After": RETRY_AFTER_S})
    if isinstance(exc, EngineDeadError):
        return APIError(503, f"{exc}; the server is stopping")
    if isinstance(exc, ValueError):  # InputError, SamplingParamsError, ChatTemplateError
        return APIError(400, str(exc), getattr(exc, "param", None))
    raise exc


class OpenAIServing:
    """Base of the completion and chat handlers."""

    def __init__(self, engine: AsyncLLM, config: InfercoreConfig, model_name: str) -> None:
        self.engine = engine
        self.config = config
        self.model_name = model_name
        self.tokenizer = engine.tokenizer

    @staticmethod
    def stamp_parsed() -> None:
        """Latency trace: the request's body is parsed and validated into its request model."""
        stamps = request_stamps.get()
        if stamps is not None:
            stamps["parsed"] = now_ns()

    def check_fan_out(self, num_prompts: int, n: int) -> None:
        """400 when one request asks for more sequences (prompts x n) than ``--max-sequences-per-request``."""
        limit = self.config.serve.max_sequences_per_request
        if num_prompts * n > limit:
            raise APIError(400, f"the request asks for {num_prompts * n} sequences ({num_prompts} prompt(s) x n={n}), "
                           f"over the server's limit of {limit} (--max-sequences-per-request); send fewer prompts "
                           "or a smaller n", "n")

    async def render_chat(self, messages: list[dict[str, Any]], **kwargs: Any) -> str:
        """The chat template rendered in the worker pool (never on the event loop); 400 on any failure."""
        render = functools.partial(apply_chat_template, self.tokenizer, messages, **kwargs)
        try:
            return await off_loop(render, kind="template", timeout_s=TEMPLATE_TIMEOUT_S + RENDER_GRACE_S,
                                  what="rendering the chat template", param="messages")
        except ValueError as exc:
            raise APIError(400, str(exc), "messages") from None

    async def tokenize(self, text: str, add_special_tokens: bool, param: str = "prompt") -> list[int]:
        """``text``'s token ids, computed in the worker pool once its length and encoding are checked."""
        if self.tokenizer is None:
            raise APIError(400, "the server runs without a tokenizer (--skip-tokenizer-init); send token ids", param)
        try:
            self.engine.input_processor.check_text(text, param)
        except ValueError as exc:
            raise APIError(400, str(exc), param) from None
        encode = functools.partial(self.tokenizer.encode, text, add_special_tokens=add_special_tokens)
        return list(await off_loop(encode, kind="tokenize", timeout_s=TOKENIZE_TIMEOUT_S,
                                   what="tokenizing the prompt", param=param))

    async def engine_prompt(self, prompt: str | list[int], add_special_tokens: bool = True,
                            param: str = "prompt") -> dict[str, Any]:
        """The prompt as the engine takes it, a text prompt tokenized here (off the event loop)."""
        if isinstance(prompt, str):
            if not prompt:
                raise APIError(400, "the prompt is empty; send at least one character", param)
            return {"prompt": prompt, "prompt_token_ids": await self.tokenize(prompt, add_special_tokens, param)}
        return {"prompt_token_ids": prompt}

    def check_model(self, model: str | None) -> LoRARequest | None:
        """The adapter ``model`` names (None: the base model); 404 for a model the server doesn't serve."""
        accepted = {self.model_name, self.config.model.model}
        if model is None or model in accepted:
            return None
        adapter = self.engine.adapters.get(model)
        if adapter is None:
            names = ", ".join(repr(n) for n in [self.model_name, *(a.lora_name for a in self.engine.adapters.all())])
            raise APIError(404, f"the model {model[:200]!r} does not exist; this server serves {names}", "model")
        return adapter

    def sampling_params(self, req: GenerateRequest, max_tokens: int | None, logprobs: int | None,
                        prompt_logprobs: int | None = None, score_only: bool = False) -> SamplingParams:
        """Build and validate SamplingParams; raises APIError(400) naming the bad field.

        ``max_tokens`` 0 (compute the prompt, generate nothing) is allowed only with ``score_only``.
        """
        if max_tokens is not None and max_tokens < 1 and not (score_only and max_tokens == 0):
            raise APIError(400, f"max_tokens must be at least 1, got {max_tokens} (0 is allowed with echo=true on "
                           "/v1/completions, to score the prompt)", "max_tokens")
        try:
            bias = {int(k): v for k, v in (req.logit_bias or {}).items()}
        except ValueError:
            raise APIError(400, "logit_bias keys must be token ids written as integers", "logit_bias") from None
        fields: dict[str, Any] = dict(
            n=req.n or 1, presence_penalty=req.presence_penalty or 0.0,
            frequency_penalty=req.frequency_penalty or 0.0, logit_bias=bias or None, stop=req.stop,
            stop_token_ids=req.stop_token_ids, ignore_eos=req.ignore_eos, max_tokens=max_tokens,
            min_tokens=req.min_tokens, logprobs=logprobs, prompt_logprobs=prompt_logprobs, seed=req.seed,
            skip_special_tokens=req.skip_special_tokens,
            spaces_between_special_tokens=req.spaces_between_special_tokens,
            include_stop_str_in_output=req.include_stop_str_in_output,
            structured_outputs=self.structured_outputs(req))
        optional = {"temperature": req.temperature, "top_p": req.top_p, "top_k": req.top_k, "min_p": req.min_p,
                    "repetition_penalty": req.repetition_penalty}
        fields.update({k: v for k, v in optional.items() if v is not None})
        try:
            return SamplingParams(**fields)
        except SamplingParamsError as exc:
            raise APIError(400, str(exc), exc.param) from None

    def structured_outputs(self, req: GenerateRequest) -> StructuredOutputsParams | None:
        """The decoding constraint a request asks for, if any; 400 when no grammar backend is installed."""
        spec: dict[str, Any] = {}
        fmt = req.response_format
        if fmt is not None and fmt.type == "json_object":
            spec["json_object"] = True
        elif fmt is not None and fmt.type == "json_schema":
            if fmt.json_schema is None or fmt.json_schema.schema_ is None:
                raise APIError(400, "response_format json_schema needs a 'json_schema.schema' object", "response_format")
            spec["json"] = fmt.json_schema.schema_
        guided = {"json": req.guided_json, "regex": req.guided_regex, "choice": req.guided_choice,
                  "grammar": req.guided_grammar}
        spec.update({k: v for k, v in guided.items() if v is not None})
        if req.structured_outputs is not None:
            spec.update(req.structured_outputs.constraint())
        if not spec:
            return None
        if not get_plugin_manager().registry("structured_output_backend").names():
            raise APIError(400, "constrained decoding (response_format, structured_outputs, guided_*) needs a grammar "
                           "backend; install infercore-structured-output", "response_format")
        try:
            return StructuredOutputsParams(**spec)
        except SamplingParamsError as exc:
            raise APIError(400, str(exc), exc.param) from None
        except TypeError as exc:
            raise APIError(400, f"structured_outputs: {exc}", "structured_outputs") from None

    async def first_output(self, request: Request, stream: AsyncGenerator[T, None], constrained: bool) -> T:
        """The first item of ``stream`` (so request errors become HTTP errors before any SSE is sent).

        A request that fails before its first token is answered with an error status: 400 when it is
        constrained (its grammar could not be built), 500 otherwise.
        """
        try:
            first = await until_disconnected(request, anext(stream))
        except Exception as exc:
            raise to_api_error(exc) from None
        output = first[1] if isinstance(first, tuple) else first
        failed = [o for o in output.outputs if o.finish_reason == "error" and not o.token_ids]
        if failed:
            await stream.aclose()
            raise APIError(400 if constrained else 500, str(failed[0].stop_reason or "the request failed"),
                           "structured_outputs" if constrained else None)
        return first


async def until_disconnected(request: Request, work: Awaitable[T]) -> T:
    """Await ``work`` in the caller's task; if the client goes away first (the connection is polled every
    :data:`DISCONNECT_POLL_S`), cancel it (which aborts its engine requests) and raise a 499."""

    async def client_left() -> bool:
        while True:
            await asyncio.sleep(DISCONNECT_POLL_S)
            if await request.is_disconnected():
                return True

    async with cancelled_on_disconnect(client_left):
        return await work
    raise APIError(499, "the client closed the connection")


async def merge(streams: list[AsyncIterator[T]]) -> AsyncIterator[tuple[int, T]]:
    """Interleave several async iterators, yielding ``(index of the stream, item)`` as items arrive."""
    if len(streams) == 1:
        async for item in streams[0]:
            yield 0, item
        return
    queue: asyncio.Queue[tuple[int, Any]] = asyncio.Queue()
    done = object()

    async def pump(index: int, stream: AsyncIterator[T]) -> None:
        try:
            async for item in stream:
                await queue.put((index, item))
        except Exception as exc:
            await queue.put((index, exc))
        finally:
            await queue.put((index, done))

    tasks = [asyncio.create_task(pump(i, s)) for i, s in enumerate(streams)]
    remaining = len(tasks)
    try:
        while remaining:
            index, item = await queue.get()
            if item is done:
                remaining -= 1
            elif isinstance(item, Exception):
                raise item
            else:
                yield index, item
    finally:
        for task in tasks:
            task.cancel()
        await asyncio.gather(*tasks, return_exceptions=True)


def sse(payload: Any) -> str:
    """One server-sent event carrying ``payload`` (a pydantic model or a dict)."""
    if hasattr(payload, "model_dump_json"):
        return f"data: {payload.model_dump_json(exclude_unset=False)}\n\n"
    return f"data: {json.dumps(payload, ensure_ascii=False)}\n\n"


SSE_DONE = "data: [DONE]\n\n"


def sse_error(exc: BaseException) -> str:
    """The SSE event for an error that happened after streaming began."""
    try:
        err = to_api_error(exc)
    except BaseException:
        err = APIError(500, f"internal server error ({type(exc).__name__}); the server log has details")
    return sse(error_body(err.status, err.message, err.param))
