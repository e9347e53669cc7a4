"""The pooling handlers of the server: embeddings, pooling, score, rerank and classify.

Every input of a request becomes one engine request, all sent at once, so the engine batches them with
whatever else it runs (as it batches generation). A request the model cannot serve (embeddings from a
generating model, scores from an embedder without a cross-encoder head where one is needed, ``dimensions``
on a model without Matryoshka embeddings) is a 400 that says what the model serves.
"""

from __future__ import annotations

import asyncio
import base64
from collections.abc import AsyncIterator, Sequence
from typing import Any

import numpy as np
from starlette.requests import Request

from infercore.config import InfercoreConfig
from infercore.entrypoints.openai.errors import APIError
from infercore.entrypoints.openai.protocol import random_id
from infercore.entrypoints.openai.protocol_pooling import (
    ClassificationData,
    ClassificationRequest,
    ClassificationResponse,
    EmbeddingChatRequest,
    EmbeddingData,
    EmbeddingRequest,
    EmbeddingResponse,
    PoolingChatRequest,
    PoolingData,
    PoolingRequest,
    PoolingResponse,
    PoolingUsage,
    RerankDocument,
    RerankRequest,
    RerankResponse,
    RerankResult,
    RerankUsage,
    ScoreData,
    ScoreRequest,
    ScoreResponse,
)
from infercore.entrypoints.openai.serving_base import OpenAIServing, to_api_error, until_disconnected
from infercore.frontend.async_llm import AsyncLLM
from infercore.outputs import RequestOutput
from infercore.pooling.config import pooling_model_info
from infercore.pooling.cross_encoder import pair_token_ids
from infercore.pooling.front import pooling_sampling_params, resolve_pooling_params, served_tasks
from infercore.pooling_params import PoolingParams, PoolingParamsError


def _encode(vector: np.ndarray, encoding_format: str) -> list[Any] | str:
    """A result as JSON numbers, or (``base64``) as the base64 of its little-endian float32 bytes."""
    if encoding_format == "base64":
        return base64.b64encode(np.ascontiguousarray(vector, dtype="<f4").tobytes()).decode("ascii")
    return vector.tolist()


def _usage(outputs: Sequence[RequestOutput]) -> PoolingUsage:
    tokens = sum(len(o.prompt_token_ids) for o in outputs)
    return PoolingUsage(prompt_tokens=tokens, total_tokens=tokens)


def _cosine(left: np.ndarray, right: np.ndarray, eps: float = 1e-8) -> float:
    """Cosine similarity of two vectors in float32, each norm kept above ``eps`` (torch's
    ``cosine_similarity``, without torch in the API server)."""
    a, b = np.asarray(left, np.float32).reshape(-1), np.asarray(right, np.float32).reshape(-1)
    norms = max(float(np.linalg.norm(a)), eps) * max(float(np.linalg.norm(b)), eps)
    return float(np.dot(a, b)) / norms


def _result(out: RequestOutput) -> np.ndarray:
    if out.pooled is None:
        reason = out.outputs[0].stop_reason if out.outputs else None
        raise APIError(500, f"the engine finished the request without a result ({reason or 'no reason given'})")
    return out.pooled.to_numpy()


class OpenAIServingPooling(OpenAIServing):
    """Handlers of the pooling routes over one engine."""

    def __init__(self, engine: AsyncLLM, config: InfercoreConfig, model_name: str,
                 chat_template: str | None = None) -> None:
        super().__init__(engine, config, model_name)
        self.info = pooling_model_info(config)
        self.chat_template = chat_template
        #: A classifier's label names (read only for a pooling model: a generating one's API server never
        #: loads transformers' config code, nor torch under it).
        self.id2label: dict[int, str] = {}
        if self.info is not None:
            from infercore.models.hf_config import get_hf_config

            labels = getattr(get_hf_config(config.model), "id2label", None) or {}
            self.id2label = {int(k): v for k, v in labels.items()}

    # -- shared steps ----------------------------------------------------------------------------
    def params(self, task: str, **fields: Any) -> PoolingParams:
        """The request's pooling params for ``task``; 400 naming the field when the model cannot serve it."""
        try:
            return resolve_pooling_params(PoolingParams(**{k: v for k, v in fields.items() if v is not None}),
                                          task, self.info)
        except PoolingParamsError as exc:
            raise APIError(400, str(exc), exc.param) from None

    def check_serves(self, task: str, what: str) -> None:
        if self.info is None or task not in self.info.tasks:
            raise APIError(400, f"this model serves {served_tasks(self.info)}, not {what}", "model")

    def _truncate(self, ids: list[int], truncate: int | None) -> list[int]:
        if truncate is None:
            return ids
        limit = self.engine.model_info.max_model_len if truncate == -1 else truncate
        return ids[:limit]

    async def prompts(self, inputs: Any, add_special_tokens: bool, truncate: int | None) -> list[dict[str, Any]]:
        """The engine prompts of ``input``: a string, strings, token ids or lists of token ids."""
        if isinstance(inputs, str) or (isinstance(inputs, list) and inputs and isinstance(inputs[0], int)):
            inputs = [inputs]
        if not inputs:
            raise APIError(400, "input is an empty list; send at least one text or list of token ids", "input")
        prompts = []
        for item in inputs:
            prompt = await self.engine_prompt(item, add_special_tokens, param="input")
            prompt["prompt_token_ids"] = self._truncate(list(prompt["prompt_token_ids"]), truncate)
            prompts.append(prompt)
        return prompts

    async def chat_prompt(self, body: EmbeddingChatRequest) -> list[dict[str, Any]]:
        """The conversation rendered with the chat template (no generation prompt by default) and tokenized."""
        text = await self.render_chat(body.messages, chat_template=body.chat_template or self.chat_template,
                                      add_generation_prompt=body.add_generation_prompt,
                                      chat_template_kwargs=body.chat_template_kwargs)
        ids = await self.tokenize(text, add_special_tokens=body.add_special_tokens, param="messages")
        return [{"prompt": text, "prompt_token_ids": self._truncate(ids, body.truncate_prompt_tokens)}]

    async def run(self, request: Request, prompts: list[dict[str, Any]], params: PoolingParams,
                  priority: int = 0) -> list[RequestOutput]:
        """Send every prompt to the engine at once and wait for all results."""
        self.check_fan_out(len(prompts), 1)
        sampling = pooling_sampling_params(params)
        base = random_id("pool")

        async def final(i: int) -> RequestOutput:
            stream: AsyncIterator[RequestOutput] = self.engine.generate(prompts[i], sampling, f"{base}-{i}",
                                                                        priority=priority)
            last = None
            try:
                async for out in stream:
                    last = out
            finally:
                await stream.aclose()
            assert last is not None
            return last

        try:
            return list(await until_disconnected(request, asyncio.gather(*(final(i) for i in range(len(prompts))))))
        except APIError:
            raise
        except Exception as exc:
            raise to_api_error(exc) from None

    # -- routes ----------------------------------------------------------------------------------
    async def embed(self, body: EmbeddingRequest | EmbeddingChatRequest, request: Request) -> EmbeddingResponse:
        self.check_model(body.model)
        params = self.params("embed", dimensions=body.dimensions, normalize=body.normalize)
        prompts = await self._body_prompts(body)
        outs = await self.run(request, prompts, params, body.priority)
        data = [EmbeddingData(index=i, embedding=_encode(_result(o), body.encoding_format))
                for i, o in enumerate(outs)]
        return EmbeddingResponse(id=random_id("embd"), model=self.model_name, data=data, usage=_usage(outs))

    async def pool(self, body: PoolingRequest | PoolingChatRequest, request: Request) -> PoolingResponse:
        self.check_model(body.model)
        task = body.task or (self.info.tasks[0] if self.info is not None else "embed")
        params = self.params(task, dimensions=body.dimensions, normalize=body.normalize)
        outs = await self.run(request, await self._body_prompts(body), params, body.priority)
        data = [PoolingData(index=i, data=_encode(_result(o), body.encoding_format)) for i, o in enumerate(outs)]
        return PoolingResponse(id=random_id("pool"), model=self.model_name, data=data, usage=_usage(outs))

    async def _body_prompts(self, body: EmbeddingRequest | EmbeddingChatRequest) -> list[dict[str, Any]]:
        if isinstance(body, EmbeddingChatRequest):
            return await self.chat_prompt(body)
        return await self.prompts(body.input, body.add_special_tokens, body.truncate_prompt_tokens)

    async def classify(self, body: ClassificationRequest, request: Request) -> ClassificationResponse:
        self.check_model(body.model)
        params = self.params("classify", activation=body.activation)
        prompts = await self.prompts(body.input, body.add_special_tokens, body.truncate_prompt_tokens)
        outs = await self.run(request, prompts, params, body.priority)
        data = []
        for i, out in enumerate(outs):
            probs = _result(out).reshape(-1)
            label = self.id2label.get(int(probs.argmax())) if len(probs) else None
            data.append(ClassificationData(index=i, label=label, probs=probs.tolist(), num_classes=len(probs)))
        return ClassificationResponse(id=random_id("classify"), model=self.model_name, data=data, usage=_usage(outs))

    async def scores(self, request: Request, left: Any, right: Any, truncate: int | None,
                     activation: bool | None, priority: int) -> tuple[list[float], int]:
        """Scores of the pairs (``left`` against each of ``right``, or pairwise) and the tokens computed."""
        if self.info is None:
            self.check_serves("score", "scores")
        assert self.info is not None
        lefts = [left] if isinstance(left, str) else list(left or [])
        rights = [right] if isinstance(right, str) else list(right or [])
        if not lefts or not rights:
            raise APIError(400, "scoring needs at least one text on each side (text_1 and text_2)", "text_2")
        if len(lefts) != 1 and len(lefts) != len(rights):
            raise APIError(400, f"text_1 has {len(lefts)} texts and text_2 {len(rights)}: give one text_1, or as "
                           "many as text_2", "text_1")
        if "classify" in self.info.tasks:
            params = self.params("score", activation=activation)
            pairs = [{"prompt_token_ids": self._truncate(ids, truncate)}
                     for ids in pair_token_ids(self.tokenizer, lefts * (len(rights) if len(lefts) == 1 else 1), rights)]
            outs = await self.run(request, pairs, params, priority)
            return [float(_result(o).reshape(-1)[0]) for o in outs], sum(len(o.prompt_token_ids) for o in outs)
        params = self.params("embed")
        prompts = await self.prompts(lefts + rights, True, truncate)
        outs = await self.run(request, prompts, params, priority)
        vectors = [_result(o) for o in outs]
        lv, rv = vectors[: len(lefts)], vectors[len(lefts):]
        scores = [_cosine(lv[0 if len(lv) == 1 else j], rv[j]) for j in range(len(rv))]
        return scores, sum(len(o.prompt_token_ids) for o in outs)

    async def score(self, body: ScoreRequest, request: Request) -> ScoreResponse:
        self.check_model(body.model)
        left, right = body.sides()
        scores, tokens = await self.scores(request, left, right, body.truncate_prompt_tokens, body.activation,
                                           body.priority)
        data = [ScoreData(index=i, score=s) for i, s in enumerate(scores)]
        return ScoreResponse(id=random_id("score"), model=self.model_name, data=data,
                             usage=PoolingUsage(prompt_tokens=tokens, total_tokens=tokens))

    async def rerank(self, body: RerankRequest, request: Request) -> RerankResponse:
        self.check_model(body.model)
        if not body.documents:
            raise APIError(400, "documents is an empty list; send at least one document to rank", "documents")
        scores, tokens = await self.scores(request, body.query, body.documents, body.truncate_prompt_tokens,
                                           body.activation, body.priority)
        order = sorted(range(len(scores)), key=lambda i: -scores[i])
        if body.top_n:
            order = order[: body.top_n]
        results = [RerankResult(index=i, relevance_score=scores[i],
                                document=RerankDocument(text=body.documents[i]) if body.return_documents else None)
                   for i in order]
        return RerankResponse(id=random_id("rerank"), model=self.model_name, usage=RerankUsage(total_tokens=tokens),
                              results=results)
