"""Request and response bodies of the pooling APIs: ``/v1/embeddings`` (OpenAI's), ``/pooling``, ``/score``,
``/rerank`` (Jina/Cohere's shape) and ``/classify`` (vLLM's), as pydantic models."""

from __future__ import annotations

import time
from typing import Annotated, Any, Generic, Literal, TypeVar

from pydantic import BaseModel, ConfigDict, Field

from infercore.entrypoints.openai.protocol import MAX_PROMPTS, TokenId

#: One input: text, or token ids.
TokenIds = Annotated[list[TokenId], Field(min_length=1)]
Inputs = str | Annotated[list[str], Field(max_length=MAX_PROMPTS)] | TokenIds | Annotated[
    list[TokenIds], Field(max_length=MAX_PROMPTS)]
Texts = str | Annotated[list[str], Field(max_length=MAX_PROMPTS)]
#: What ``/pooling`` may be asked to compute instead of the model's own task.
_RequestedTask = Literal["embed", "classify", "encode", "token_embed", "token_classify"]
_DataT = TypeVar("_DataT")


class PoolingUsage(BaseModel):
    """Tokens a pooling request computed (there are no completion tokens)."""

    prompt_tokens: int = 0
    total_tokens: int = 0


class _ListResponse(BaseModel, Generic[_DataT]):
    """A pooling API's answer: one ``data`` item per input, with the tokens computed."""

    id: str
    object: Literal["list"] = "list"
    created: int = Field(default_factory=lambda: int(time.time()))
    model: str
    data: list[_DataT]
    usage: PoolingUsage


class _PoolingBase(BaseModel):
    model_config = ConfigDict(extra="ignore")

    model: str | None = None
    user: Annotated[str, Field(max_length=512)] | None = None
    #: Keep at most this many tokens of each input (-1: the model's limit); longer inputs are otherwise refused.
    truncate_prompt_tokens: Annotated[int, Field(ge=-1)] | None = None
    priority: int = 0


class _ChatInput(BaseModel):
    """Chat-style input (vLLM's): messages rendered with the chat template, then pooled."""

    messages: Annotated[list[dict[str, Any]], Field(min_length=1, max_length=1024)]
    chat_template: str | None = None
    chat_template_kwargs: dict[str, Any] | None = None
    add_generation_prompt: bool = False
    add_special_tokens: bool = False


class EmbeddingRequest(_PoolingBase):
    """OpenAI's embeddings request: ``input`` as a string, strings, token ids or lists of token ids."""

    input: Inputs
    encoding_format: Literal["float", "base64"] = "float"
    dimensions: Annotated[int, Field(ge=1)] | None = None
    add_special_tokens: bool = True
    normalize: bool | None = None


class EmbeddingChatRequest(_PoolingBase, _ChatInput):
    """An embedding of a conversation (vLLM's chat-style embeddings)."""

    encoding_format: Literal["float", "base64"] = "float"
    dimensions: Annotated[int, Field(ge=1)] | None = None
    normalize: bool | None = None


class EmbeddingData(BaseModel):
    index: int
    object: Literal["embedding"] = "embedding"
    embedding: list[float] | str


class EmbeddingResponse(_ListResponse[EmbeddingData]):
    pass


class PoolingRequest(EmbeddingRequest):
    """vLLM's ``/pooling``: the model's pooled output for each input (its task's, or ``task``'s)."""

    task: _RequestedTask | None = None


class PoolingChatRequest(EmbeddingChatRequest):
    task: _RequestedTask | None = None


class PoolingData(BaseModel):
    index: int
    object: Literal["pooling"] = "pooling"
    data: list[Any] | str


class PoolingResponse(_ListResponse[PoolingData]):
    pass


class ScoreRequest(_PoolingBase):
    """vLLM's ``/score``: ``text_1`` against each of ``text_2`` (or pairwise when both are lists of one length)."""

    text_1: Texts | None = None
    text_2: Texts | None = None
    #: Other names clients use for the two sides.
    queries: Texts | None = Field(default=None, exclude=True)
    documents: Texts | None = Field(default=None, exclude=True)
    activation: bool | None = None

    def sides(self) -> tuple[Texts | None, Texts | None]:
        return (self.text_1 if self.text_1 is not None else self.queries,
                self.text_2 if self.text_2 is not None else self.documents)


class ScoreData(BaseModel):
    index: int
    object: Literal["score"] = "score"
    score: float


class ScoreResponse(_ListResponse[ScoreData]):
    pass


class RerankRequest(_PoolingBase):
    """Jina's and Cohere's rerank request: ``documents`` ranked by relevance to ``query``."""

    query: str
    documents: Annotated[list[str], Field(max_length=MAX_PROMPTS)]
    top_n: Annotated[int, Field(ge=0)] | None = None
    return_documents: bool = True
    activation: bool | None = None


class RerankDocument(BaseModel):
    text: str


class RerankResult(BaseModel):
    index: int
    document: RerankDocument | None = None
    relevance_score: float


class RerankUsage(BaseModel):
    total_tokens: int = 0


class RerankResponse(BaseModel):
    id: str
    model: str
    usage: RerankUsage
    results: list[RerankResult]


class ClassificationRequest(_PoolingBase):
    """vLLM's ``/classify``: class probabilities of each input."""

    input: Inputs
    add_special_tokens: bool = True
    activation: bool | None = None


class ClassificationData(BaseModel):
    index: int
    label: str | None
    probs: list[float]
    num_classes: int


class ClassificationResponse(_ListResponse[ClassificationData]):
    pass
