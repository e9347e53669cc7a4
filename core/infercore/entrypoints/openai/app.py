"""Build the FastAPI application of the OpenAI-compatible server around a running AsyncLLM."""

from __future__ import annotations

from pathlib import Path

from fastapi import FastAPI
from starlette.middleware.cors import CORSMiddleware

from infercore.config import InfercoreConfig
from infercore.engine.latency_trace import trace_enabled
from infercore.entrypoints.openai.errors import install_error_handlers
from infercore.entrypoints.openai.lora_routes import lora_router
from infercore.entrypoints.openai.metrics import ServerMetrics
from infercore.entrypoints.openai.middleware import GuardMiddleware
from infercore.entrypoints.openai.routes import router
from infercore.entrypoints.openai.routes_pooling import pooling_router
from infercore.entrypoints.openai.serving_chat import OpenAIServingChat
from infercore.entrypoints.openai.serving_completion import OpenAIServingCompletion
from infercore.entrypoints.openai.serving_pooling import OpenAIServingPooling
from infercore.entrypoints.openai.state import DrainState, ServerState
from infercore.frontend.async_llm import AsyncLLM
from infercore.version import __version__


def load_chat_template(value: str | None) -> str | None:
    """``--chat-template`` is a file path or the template itself."""
    if value is None:
        return None
    path = Path(value)
    if len(value) < 4096 and "{" not in value and path.is_file():
        return path.read_text()
    if "{" not in value:
        raise ValueError(f"--chat-template {value!r} is neither a readable file nor a Jinja template; "
                         "pass a template file or the template text")
    return value


def build_app(config: InfercoreConfig, engine: AsyncLLM, metrics: ServerMetrics, model_name: str) -> FastAPI:
    """The app with its routes, error handlers, CORS and guards; ``app.state.server`` holds the shared state."""
    app = FastAPI(title="infercore", version=__version__,
                  description="OpenAI-compatible API of the infercore engine")
    chat_template = load_chat_template(config.serve.chat_template)
    state = ServerState(
        config=config, engine=engine, metrics=metrics, model_name=model_name,
        completion=OpenAIServingCompletion(engine, config, model_name),
        chat=OpenAIServingChat(engine, config, model_name, chat_template=chat_template), drain=DrainState())
    app.state.server = state
    app.include_router(router)
    app.include_router(lora_router)
    # Embeddings, pooling, score, rerank, classify (infercore.entrypoints.openai.serving_pooling).
    app.state.pooling = OpenAIServingPooling(engine, config, model_name, chat_template=chat_template)
    app.include_router(pooling_router)
    install_error_handlers(app)
    if config.serve.allowed_origins:
        app.add_middleware(CORSMiddleware, allow_origins=config.serve.allowed_origins, allow_methods=["*"],
                           allow_headers=["*"])
    app.add_middleware(GuardMiddleware, api_key=config.serve.api_key,
                       max_body_bytes=config.serve.max_request_body_bytes, drain=state.drain,
                       trace_latency=trace_enabled())
    return app
