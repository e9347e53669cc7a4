"""The HTTP routes of the OpenAI-compatible server."""

from __future__ import annotations

from fastapi import APIRouter, Request
from fastapi.responses import JSONResponse, Response

from infercore.entrypoints.openai.errors import ERROR_RESPONSES, APIError, error_response
from infercore.entrypoints.openai.protocol import (
    ChatCompletionRequest,
    ChatCompletionResponse,
    CompletionRequest,
    CompletionResponse,
    DetokenizeRequest,
    DetokenizeResponse,
    ErrorResponse,
    HealthResponse,
    ModelCard,
    ModelList,
    TokenizeChatRequest,
    TokenizeRequest,
    TokenizeResponse,
    VersionResponse,
)
from infercore.entrypoints.openai.routes_pooling import refuse_generation
from infercore.entrypoints.openai.serving_chat import message_dicts
from infercore.entrypoints.openai.state import ServerState
from infercore.version import __version__

router = APIRouter()


def _state(request: Request) -> ServerState:
    return request.app.state.server


@router.get("/health", response_model=HealthResponse, responses={503: {"model": ErrorResponse}})
async def health(request: Request) -> Response:
    """200 ``{"status": "ok"}`` while the engine is alive; 503 once it has died or the server is draining."""
    engine = _state(request).engine
    if not engine.is_healthy:
        return error_response(503, engine.dead_reason or "the engine is not running")
    return JSONResponse(HealthResponse().model_dump())


@router.get("/version", response_model=VersionResponse)
async def version() -> VersionResponse:
    return VersionResponse(version=__version__)


def _model_card(state: ServerState) -> ModelCard:
    return ModelCard(id=state.model_name, root=state.config.model.model,
                     max_model_len=state.engine.model_info.max_model_len)


@router.get("/v1/models", response_model=ModelList, responses=ERROR_RESPONSES)
async def list_models(request: Request) -> ModelList:
    """The served model, then the LoRA adapters served on it (each with the base model as ``parent``)."""
    state = _state(request)
    base = _model_card(state)
    adapters = [ModelCard(id=a.lora_name, root=a.lora_path, parent=base.id, max_model_len=base.max_model_len)
                for a in state.engine.adapters.all()]
    return ModelList(data=[base, *adapters])


@router.get("/v1/models/{model_id:path}", response_model=ModelCard, responses=ERROR_RESPONSES)
async def retrieve_model(model_id: str, request: Request) -> ModelCard:
    """One served model by its id (the served name or the model path); 404 for any other id."""
    state = _state(request)
    adapter = state.chat.check_model(model_id)
    base = _model_card(state)
    if adapter is None:
        return base
    return ModelCard(id=adapter.lora_name, root=adapter.lora_path, parent=base.id, max_model_len=base.max_model_len)


@router.post("/v1/completions", response_model=CompletionResponse, responses=ERROR_RESPONSES)
async def create_completion(body: CompletionRequest, request: Request) -> Response:
    refuse_generation(request)  # a pooling model generates nothing (infercore.entrypoints.openai.routes_pooling)
    return await _state(request).completion.create(body, request)


@router.post("/v1/chat/completions", response_model=ChatCompletionResponse, responses=ERROR_RESPONSES)
async def create_chat_completion(body: ChatCompletionRequest, request: Request) -> Response:
    refuse_generation(request)  # a pooling model generates nothing (infercore.entrypoints.openai.routes_pooling)
    return await _state(request).chat.create(body, request)


@router.post("/tokenize", response_model=TokenizeResponse, responses=ERROR_RESPONSES)
async def tokenize(body: TokenizeRequest, request: Request) -> TokenizeResponse:
    state = _state(request)
    state.chat.check_model(body.model)
    tokenizer = state.engine.tokenizer
    if tokenizer is None:
        raise APIError(400, "the server runs without a tokenizer (--skip-tokenizer-init)")
    if isinstance(body, TokenizeChatRequest):
        text = await state.chat.render_chat(message_dicts(body.messages), chat_template=state.chat.chat_template,
                                            add_generation_prompt=body.add_generation_prompt,
                                            chat_template_kwargs=body.chat_template_kwargs)
        ids = await state.chat.tokenize(text, add_special_tokens=False, param="messages")
    else:
        ids = await state.chat.tokenize(body.prompt, add_special_tokens=body.add_special_tokens)
    return TokenizeResponse(count=len(ids), max_model_len=state.engine.model_info.max_model_len, tokens=ids)


@router.post("/detokenize", response_model=DetokenizeResponse, responses=ERROR_RESPONSES)
async def detokenize(body: DetokenizeRequest, request: Request) -> DetokenizeResponse:
    state = _state(request)
    state.chat.check_model(body.model)
    vocab = state.engine.model_info.vocab_size
    bad = next((t for t in body.tokens if t >= vocab), None)
    if bad is not None:
        raise APIError(400, f"token id {bad} is outside the vocabulary of {vocab} tokens", "tokens")
    if state.engine.tokenizer is None:
        raise APIError(400, "the server runs without a tokenizer (--skip-tokenizer-init)")
    return DetokenizeResponse(prompt=state.engine.tokenizer.decode(body.tokens))


@router.get("/metrics", response_class=Response, responses=ERROR_RESPONSES)
async def metrics(request: Request) -> Response:
    return Response(_state(request).metrics.render(), media_type="text/plain; version=0.0.4; charset=utf-8")


@router.get("/debug/kv_cache", responses=ERROR_RESPONSES)
async def kv_cache(request: Request) -> JSONResponse:
    """The engine's latest KV-cache and queue figures."""
    stats = _state(request).engine.stats
    return JSONResponse({"num_free_blocks": stats.num_free_blocks, "num_total_blocks": stats.num_total_blocks,
                         "kv_cache_usage": stats.kv_cache_usage, "num_running": stats.num_running,
                         "num_waiting": stats.num_waiting})
