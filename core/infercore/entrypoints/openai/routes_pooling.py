"""The HTTP routes of the pooling APIs: embeddings, pooling, score, rerank and classify."""

from __future__ import annotations

from fastapi import APIRouter, Request

from infercore.entrypoints.openai.errors import ERROR_RESPONSES, APIError
from infercore.entrypoints.openai.protocol_pooling import (
    ClassificationRequest,
    ClassificationResponse,
    EmbeddingChatRequest,
    EmbeddingRequest,
    EmbeddingResponse,
    PoolingChatRequest,
    PoolingRequest,
    PoolingResponse,
    RerankRequest,
    RerankResponse,
    ScoreRequest,
    ScoreResponse,
)
from infercore.entrypoints.openai.serving_pooling import OpenAIServingPooling
from infercore.pooling.front import served_tasks

pooling_router = APIRouter()


def _pooling(request: Request) -> OpenAIServingPooling:
    return request.app.state.pooling


def refuse_generation(request: Request) -> None:
    """400 for a completion or chat request to a pooling model, saying what the model serves."""
    pooling: OpenAIServingPooling | None = getattr(request.app.state, "pooling", None)
    if pooling is not None and pooling.info is not None:
        raise APIError(400, f"this model serves {served_tasks(pooling.info)}, not text generation (completions and "
                       "chat); use /v1/embeddings, /pooling, /score, /rerank or /classify", "model")


@pooling_router.post("/v1/embeddings", response_model=EmbeddingResponse, responses=ERROR_RESPONSES)
async def create_embedding(body: EmbeddingRequest | EmbeddingChatRequest, request: Request) -> EmbeddingResponse:
    """OpenAI's embeddings: one vector per input (or per conversation, given ``messages``)."""
    return await _pooling(request).embed(body, request)


@pooling_router.post("/pooling", response_model=PoolingResponse, responses=ERROR_RESPONSES)
async def create_pooling(body: PoolingRequest | PoolingChatRequest, request: Request) -> PoolingResponse:
    """The model's pooled output per input, for its task or ``task``."""
    return await _pooling(request).pool(body, request)


@pooling_router.post("/classify", response_model=ClassificationResponse, responses=ERROR_RESPONSES)
async def create_classification(body: ClassificationRequest, request: Request) -> ClassificationResponse:
    """Class probabilities per input (a sequence-classification model)."""
    return await _pooling(request).classify(body, request)


@pooling_router.post("/score", response_model=ScoreResponse, responses=ERROR_RESPONSES)
@pooling_router.post("/v1/score", response_model=ScoreResponse, responses=ERROR_RESPONSES)
async def create_score(body: ScoreRequest, request: Request) -> ScoreResponse:
    """Scores of text pairs: a cross-encoder's score, or the cosine of an embedding model's vectors."""
    return await _pooling(request).score(body, request)


@pooling_router.post("/rerank", response_model=RerankResponse, responses=ERROR_RESPONSES)
@pooling_router.post("/v1/rerank", response_model=RerankResponse, responses=ERROR_RESPONSES)
@pooling_router.post("/v2/rerank", response_model=RerankResponse, responses=ERROR_RESPONSES)
async def create_rerank(body: RerankRequest, request: Request) -> RerankResponse:
    """Documents ranked by relevance to the query (Jina's and Cohere's shape)."""
    return await _pooling(request).rerank(body, request)
