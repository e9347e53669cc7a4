"""Request and response bodies of the OpenAI-compatible API, as pydantic models (they are the OpenAPI schema).

Bounds that protect the server (n, logprobs, logit_bias size, list lengths, integer widths) live here so
a hostile body is refused before any work; finer range checks are SamplingParams' and give the same 400.
Request models validate strictly (``STRICT``): a field the schema types as a boolean takes only true or
false, an integer field no boolean or string, so what /openapi.json says is what is accepted.
"""

from __future__ import annotations

import time
import uuid
from typing import Annotated, Any, Literal

from pydantic import BaseModel, ConfigDict, Discriminator, Field, Tag, computed_field

Int64 = Annotated[int, Field(ge=-(2**63), le=2**63 - 1)]
TokenId = Annotated[int, Field(ge=0, le=2**31 - 1)]
Count = Annotated[int, Field(ge=-(2**31), le=2**31 - 1)]
StopList = Annotated[list[str], Field(max_length=64)]
ChoiceList = Annotated[list[str], Field(min_length=1, max_length=1024)]
MAX_PROMPTS = 256
MAX_N = 128
#: Text that must hold at least one character (an empty prompt is refused by the schema, not after it).
NonEmptyText = Annotated[str, Field(min_length=1)]
#: The configuration of every request model: no coercion the schema does not describe.
STRICT = ConfigDict(strict=True)


def random_id(prefix: str) -> str:
    return f"{prefix}-{uuid.uuid4().hex}"


class GenerateRequest(BaseModel):
    """Fields common to completions and chat (OpenAI's and vLLM's sampling extras); unknown fields are ignored."""

    model_config = ConfigDict(extra="ignore", strict=True)

    model: str | None = None
    frequency_penalty: float | None = 0.0
    presence_penalty: float | None = 0.0
    logit_bias: Annotated[dict[str, float], Field(max_length=4096)] | None = None
    max_tokens: Count | None = None
    n: Annotated[int, Field(ge=1, le=MAX_N)] | None = 1
    seed: Int64 | None = None
    stop: str | StopList | None = None
    stream: bool | None = False
    stream_options: StreamOptions | None = None
    temperature: float | None = None
    top_p: float | None = None
    user: Annotated[str, Field(max_length=512)] | None = None
    # vLLM's sampling extras
    top_k: Count | None = None
    min_p: float | None = None
    repetition_penalty: float | None = None
    ignore_eos: bool = False
    min_tokens: Count = 0
    stop_token_ids: Annotated[list[TokenId], Field(max_length=64)] | None = None
    skip_special_tokens: bool = True
    spaces_between_special_tokens: bool = True
    include_stop_str_in_output: bool = False
    cache_salt: Annotated[str, Field(min_length=1, max_length=256)] | None = None
    priority: Count = 0
    # Constrained decoding (wired to a grammar backend plugin when one is installed)
    response_format: ResponseFormat | None = None
    structured_outputs: StructuredOutputsRequest | None = None
    guided_json: str | dict[str, Any] | None = None
    guided_regex: str | None = None
    guided_choice: ChoiceList | None = None
    guided_grammar: str | None = None


class StructuredOutputsRequest(BaseModel):
    """``structured_outputs``: exactly one constraint of ``json``, ``regex``, ``choice``, ``grammar``,
    ``json_object`` (vLLM's field names); other keys are refused."""

    model_config = ConfigDict(extra="forbid", strict=True)

    json_: str | dict[str, Any] | None = Field(None, alias="json")
    regex: str | None = None
    choice: ChoiceList | None = None
    grammar: str | None = None
    json_object: bool | None = None
    backend: str | None = None

    def constraint(self) -> dict[str, Any]:
        """The fields that were given, under their wire names."""
        return self.model_dump(by_alias=True, exclude_none=True)


class StreamOptions(BaseModel):
    """Streaming options: ``include_usage`` adds a last chunk with token counts, and
    ``continuous_usage_stats`` puts the counts so far on every chunk."""

    model_config = STRICT

    include_usage: bool | None = False
    continuous_usage_stats: bool | None = False


class JsonSchemaFormat(BaseModel):
    """A named JSON schema for ``response_format``."""

    model_config = STRICT

    name: str = "response"
    description: str | None = None
    schema_: dict[str, Any] | None = Field(None, alias="schema")
    strict: bool | None = None


class ResponseFormat(BaseModel):
    """``{"type": "text" | "json_object" | "json_schema", "json_schema": {...}}``."""

    model_config = STRICT

    type: Literal["text", "json_object", "json_schema"]
    json_schema: JsonSchemaFormat | None = None


class CompletionRequest(GenerateRequest):
    """POST /v1/completions. ``prompt`` is text, a list of texts, token ids, or a list of token-id lists."""

    prompt: (NonEmptyText | Annotated[list[NonEmptyText], Field(min_length=1, max_length=MAX_PROMPTS)]
             | Annotated[list[TokenId], Field(min_length=1)]
             | Annotated[list[Annotated[list[TokenId], Field(min_length=1)]], Field(min_length=1, max_length=MAX_PROMPTS)])
    echo: bool | None = False
    logprobs: Annotated[int, Field(ge=0, le=1024)] | None = None
    prompt_logprobs: Annotated[int, Field(ge=0, le=1024)] | None = None
    best_of: Annotated[int, Field(ge=1, le=MAX_N)] | None = None
    suffix: str | None = None
    max_tokens: Annotated[int, Field(ge=0, le=2**31 - 1, description=(
        "most tokens to generate; 0 (with echo) scores the prompt only"))] | None = 16


class ContentPart(BaseModel):
    """One part of a message's content: ``{"type": "text", "text": ...}``, or ``{"type": "image_url", "image_url":
    {"url": ...}}`` for a model that takes images (:mod:`infercore.multimodal.chat_content`)."""

    model_config = ConfigDict(extra="allow", strict=True)

    type: str
    text: str | None = None


class FunctionCall(BaseModel):
    """A function name and its JSON-encoded arguments."""

    model_config = STRICT

    name: str
    arguments: str


class ToolCall(BaseModel):
    """A tool call an assistant made."""

    model_config = STRICT

    id: str = Field(default_factory=lambda: random_id("call"))
    type: Literal["function"] = "function"
    function: FunctionCall


class ChatMessage(BaseModel):
    """One message of the conversation."""

    model_config = ConfigDict(extra="allow", strict=True)

    role: Literal["system", "developer", "user", "assistant", "tool"]
    content: str | Annotated[list[ContentPart], Field(max_length=1024)] | None = None
    name: str | None = None
    tool_calls: list[ToolCall] | None = None
    tool_call_id: str | None = None
    reasoning_content: str | None = None


class FunctionDefinition(BaseModel):
    """A function the model may call."""

    model_config = STRICT

    name: str
    description: str | None = None
    parameters: dict[str, Any] | None = None
    strict: bool | None = None


class ToolDefinition(BaseModel):
    """A tool offered to the model."""

    model_config = STRICT

    type: Literal["function"] = "function"
    function: FunctionDefinition


class NamedFunction(BaseModel):
    """The function a named tool choice forces."""

    model_config = STRICT

    name: str


class NamedToolChoice(BaseModel):
    """Force a call of one named function."""

    model_config = STRICT

    type: Literal["function"] = "function"
    function: NamedFunction


class ChatCompletionRequest(GenerateRequest):
    """POST /v1/chat/completions."""

    messages: Annotated[list[ChatMessage], Field(min_length=1, max_length=4096)]
    logprobs: bool | None = False
    top_logprobs: Annotated[int, Field(ge=0, le=1024)] | None = None
    prompt_logprobs: Annotated[int, Field(ge=0, le=1024)] | None = None
    max_tokens: Annotated[int, Field(ge=1, le=2**31 - 1)] | None = None
    max_completion_tokens: Annotated[int, Field(ge=1, le=2**31 - 1)] | None = None
    tools: Annotated[list[ToolDefinition], Field(max_length=512)] | None = None
    tool_choice: Literal["none", "auto", "required"] | NamedToolChoice | None = None
    parallel_tool_calls: bool | None = True
    include_reasoning: bool = True
    echo: bool = False
    add_generation_prompt: bool = True
    continue_final_message: bool = False
    chat_template: str | None = None
    chat_template_kwargs: dict[str, Any] | None = None


class PromptTokensDetails(BaseModel):
    """How the prompt tokens were spent: ``cached_tokens`` came from the prefix cache."""

    cached_tokens: int = 0


class UsageInfo(BaseModel):
    """Token counts of a request; ``total_tokens`` is their sum."""

    prompt_tokens: int = 0
    completion_tokens: int = 0
    prompt_tokens_details: PromptTokensDetails | None = None

    @computed_field  # type: ignore[prop-decorator]
    @property
    def total_tokens(self) -> int:
        return self.prompt_tokens + self.completion_tokens


class CompletionLogprobs(BaseModel):
    """Legacy completions logprobs: parallel lists per token (with ``echo``, the prompt's tokens first, the
    first of them without a logprob)."""

    text_offset: list[int] = Field(default_factory=list)
    token_logprobs: list[float | None] = Field(default_factory=list)
    tokens: list[str] = Field(default_factory=list)
    top_logprobs: list[dict[str, float] | None] = Field(default_factory=list)


class PromptLogprob(BaseModel):
    """The logprob of one token at one prompt position, its rank and its text (vLLM's ``Logprob``)."""

    logprob: float
    rank: int | None = None
    decoded_token: str | None = None


#: Per prompt position (the first is null), token id → its logprob; answers ``prompt_logprobs``.
PromptLogprobsList = list[dict[int, PromptLogprob] | None]


class CompletionChoice(BaseModel):
    """One generated text."""

    index: int
    text: str
    logprobs: CompletionLogprobs | None = None
    finish_reason: str | None = None
    stop_reason: int | str | None = None
    prompt_logprobs: PromptLogprobsList | None = None


class CompletionResponse(BaseModel):
    """Response of a non-streaming completion (and, with ``object`` unchanged, each streamed chunk)."""

    id: str
    object: str = "text_completion"
    created: int = Field(default_factory=lambda: int(time.time()))
    model: str
    choices: list[CompletionChoice]
    usage: UsageInfo | None = None


class TopLogprob(BaseModel):
    """An alternative token and its logprob."""

    token: str
    logprob: float
    bytes: list[int] | None = None


class TokenLogprob(TopLogprob):
    """A chosen token, its logprob and the most likely alternatives."""

    top_logprobs: list[TopLogprob] = Field(default_factory=list)


class ChatLogprobs(BaseModel):
    """Chat logprobs: one entry per generated token."""

    content: list[TokenLogprob] | None = None


class ResponseMessage(BaseModel):
    """The assistant's reply."""

    role: str = "assistant"
    content: str | None = None
    reasoning: str | None = None
    #: The same text as ``reasoning``, under the name DeepSeek's API uses.
    reasoning_content: str | None = None
    tool_calls: list[ToolCall] = Field(default_factory=list)


class ChatChoice(BaseModel):
    """One generated reply."""

    index: int
    message: ResponseMessage
    logprobs: ChatLogprobs | None = None
    finish_reason: str | None = None
    stop_reason: int | str | None = None


class ChatCompletionResponse(BaseModel):
    """Response of a non-streaming chat completion."""

    id: str
    object: str = "chat.completion"
    created: int = Field(default_factory=lambda: int(time.time()))
    model: str
    choices: list[ChatChoice]
    usage: UsageInfo
    prompt_logprobs: PromptLogprobsList | None = None


class DeltaFunctionCall(BaseModel):
    """A fragment of a streamed function call: the whole name once, then argument fragments."""

    name: str | None = None
    arguments: str | None = None


class DeltaToolCall(BaseModel):
    """A fragment of one streamed tool call; the first of a call carries ``id``, ``type`` and the name."""

    index: int
    id: str | None = None
    type: Literal["function"] | None = None
    function: DeltaFunctionCall | None = None


class DeltaMessage(BaseModel):
    """The new part of a streamed reply."""

    role: str | None = None
    content: str | None = None
    reasoning: str | None = None
    #: The same text as ``reasoning``, under the name DeepSeek's API uses.
    reasoning_content: str | None = None
    tool_calls: list[DeltaToolCall] | None = None


class ChatChunkChoice(BaseModel):
    """One choice of a streamed chat chunk."""

    index: int
    delta: DeltaMessage
    logprobs: ChatLogprobs | None = None
    finish_reason: str | None = None
    stop_reason: int | str | None = None


class ChatCompletionChunk(BaseModel):
    """One SSE chunk of a streamed chat completion."""

    id: str
    object: str = "chat.completion.chunk"
    created: int = Field(default_factory=lambda: int(time.time()))
    model: str
    choices: list[ChatChunkChoice]
    usage: UsageInfo | None = None


class ModelCard(BaseModel):
    """A served model."""

    id: str
    object: str = "model"
    created: int = Field(default_factory=lambda: int(time.time()))
    owned_by: str = "infercore"
    root: str | None = None
    #: The base model a LoRA adapter runs on (None for the base model itself).
    parent: str | None = None
    max_model_len: int | None = None


class ModelList(BaseModel):
    """GET /v1/models."""

    object: str = "list"
    data: list[ModelCard]


class TokenizePromptRequest(BaseModel):
    """POST /tokenize with a text prompt (and no ``messages``)."""

    model_config = STRICT

    model: str | None = None
    prompt: str
    messages: None = None
    add_special_tokens: bool = True


class TokenizeChatRequest(BaseModel):
    """POST /tokenize with chat messages, rendered by the chat template (and no ``prompt``)."""

    model_config = STRICT

    model: str | None = None
    prompt: None = None
    messages: Annotated[list[ChatMessage], Field(min_length=1, max_length=4096)]
    add_special_tokens: bool = True
    add_generation_prompt: bool = True
    chat_template_kwargs: dict[str, Any] | None = None


def _tokenize_kind(body: Any) -> str | None:
    """Which request a /tokenize body is: "prompt" or "messages" when it has exactly one of them."""
    if not isinstance(body, dict):
        return None
    given = [key for key in ("prompt", "messages") if body.get(key) is not None]
    return given[0] if len(given) == 1 else None


#: POST /tokenize: exactly one of a prompt and chat messages.
TokenizeRequest = Annotated[
    Annotated[TokenizePromptRequest, Tag("prompt")] | Annotated[TokenizeChatRequest, Tag("messages")],
    Discriminator(_tokenize_kind, custom_error_type="prompt_or_messages",
                  custom_error_message="send exactly one of prompt (text) and messages (chat)")]


class TokenizeResponse(BaseModel):
    """Token ids of the prompt and the model's length limit."""

    count: int
    max_model_len: int
    tokens: list[int]


class DetokenizeRequest(BaseModel):
    """POST /detokenize: token ids to text."""

    model_config = STRICT

    model: str | None = None
    tokens: Annotated[list[TokenId], Field(
        max_length=1_000_000, description="token ids, each below the model's vocabulary size; an id outside "
        "the vocabulary is a 400 that names it")]


class DetokenizeResponse(BaseModel):
    """The text of the token ids."""

    prompt: str


class HealthResponse(BaseModel):
    """GET /health while the engine runs."""

    status: Literal["ok"] = "ok"


class VersionResponse(BaseModel):
    """GET /version."""

    version: str


class ErrorInfo(BaseModel):
    """OpenAI's error object."""

    message: str
    type: str
    param: str | None = None
    code: int | str | None = None


class ErrorResponse(BaseModel):
    """Body of every error response: ``{"error": {...}}``."""

    error: ErrorInfo


GenerateRequest.model_rebuild()
CompletionRequest.model_rebuild()
ChatCompletionRequest.model_rebuild()
