"""What pooling requests return, shaped as vLLM's output types."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Generic, TypeVar

import torch

from infercore.outputs import RequestOutput

T = TypeVar("T")


@dataclass
class PoolingOutput:
    """A pooled result as a tensor: an embedding [H], class scores [labels] or token rows [L, H]."""

    data: torch.Tensor


@dataclass
class EmbeddingOutput:
    """One embedding."""

    embedding: list[float]

    @property
    def hidden_size(self) -> int:
        return len(self.embedding)


@dataclass
class ClassificationOutput:
    """Class probabilities (or logits, without activation)."""

    probs: list[float]

    @property
    def num_classes(self) -> int:
        return len(self.probs)


@dataclass
class ScoringOutput:
    """One similarity or relevance score."""

    score: float


@dataclass
class PoolingRequestOutput(Generic[T]):
    """The result of one pooling request: its id, prompt tokens and output."""

    request_id: str
    outputs: T
    prompt_token_ids: list[int]
    num_cached_tokens: int = 0
    finished: bool = True


EmbeddingRequestOutput = PoolingRequestOutput[EmbeddingOutput]
ClassificationRequestOutput = PoolingRequestOutput[ClassificationOutput]
ScoringRequestOutput = PoolingRequestOutput[ScoringOutput]


def pooled_tensor(out: RequestOutput) -> torch.Tensor:
    """The pooled result a finished request carries; an error naming the request if it has none."""
    if out.pooled is None:
        reason = out.outputs[0].finish_reason if out.outputs else None
        raise RuntimeError(f"request {out.request_id} finished without a pooled result (finish reason {reason})")
    return out.pooled.to_tensor()


def as_pooling(out: RequestOutput) -> PoolingRequestOutput[PoolingOutput]:
    return PoolingRequestOutput(out.request_id, PoolingOutput(pooled_tensor(out)), out.prompt_token_ids,
                                out.num_cached_tokens)


def as_embedding(out: RequestOutput) -> PoolingRequestOutput[EmbeddingOutput]:
    return PoolingRequestOutput(out.request_id, EmbeddingOutput(pooled_tensor(out).tolist()), out.prompt_token_ids,
                                out.num_cached_tokens)


def as_classification(out: RequestOutput) -> PoolingRequestOutput[ClassificationOutput]:
    return PoolingRequestOutput(out.request_id, ClassificationOutput(pooled_tensor(out).tolist()),
                                out.prompt_token_ids, out.num_cached_tokens)
