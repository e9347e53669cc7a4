"""What the routes share: the engine, the handlers, metrics and the served model's name."""

from __future__ import annotations

from dataclasses import dataclass

from infercore.config import InfercoreConfig
from infercore.entrypoints.openai.metrics import ServerMetrics
from infercore.entrypoints.openai.serving_chat import OpenAIServingChat
from infercore.entrypoints.openai.serving_completion import OpenAIServingCompletion
from infercore.frontend.async_llm import AsyncLLM


@dataclass
class DrainState:
    """Whether the server is draining, and how many HTTP requests it is serving."""

    draining: bool = False
    in_flight: int = 0


@dataclass
class ServerState:
    """One server's shared objects, hung on ``app.state.server``."""

    config: InfercoreConfig
    engine: AsyncLLM
    metrics: ServerMetrics
    model_name: str
    completion: OpenAIServingCompletion
    chat: OpenAIServingChat
    drain: DrainState
