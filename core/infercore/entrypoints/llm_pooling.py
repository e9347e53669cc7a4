"""The offline pooling API of ``LLM``: ``embed``, ``classify``, ``score``, ``encode`` and ``reward``, as in vLLM."""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

import torch.nn.functional as F

from infercore.pooling.config import PoolingModelInfo, pooling_model_info
from infercore.pooling.front import pooling_sampling_params, resolve_pooling_params
from infercore.pooling.outputs import (
    ClassificationOutput,
    PoolingOutput,
    PoolingRequestOutput,
    ScoringOutput,
    as_classification,
    as_embedding,
    as_pooling,
    pooled_tensor,
)
from infercore.pooling_params import PoolingParams

if TYPE_CHECKING:
    from infercore.config import InfercoreConfig
    from infercore.outputs import RequestOutput
    from infercore.pooling.outputs import EmbeddingOutput
    from infercore.sampling_params import SamplingParams

PromptType = str | list[int] | dict[str, Any]


class PoolingAPI:
    """Pooling methods of :class:`~infercore.LLM` (mixed in; they run through its ``generate``)."""

    config: InfercoreConfig

    def generate(self, prompts: Any, sampling_params: SamplingParams | Sequence[SamplingParams] | None = None,
                 use_tqdm: bool = True, priority: list[int] | None = None) -> list[RequestOutput]:
        raise NotImplementedError

    @property
    def pooling_info(self) -> PoolingModelInfo | None:
        """The served model's pooling settings (None: it generates)."""
        if not hasattr(self, "_pooling_info"):
            self._pooling_info = pooling_model_info(self.config)
        return self._pooling_info

    def _pool(self, prompts: PromptType | Sequence[PromptType], task: str, pooling_params: PoolingParams | None,
              use_tqdm: bool) -> list[RequestOutput]:
        params = resolve_pooling_params(pooling_params, task, self.pooling_info)
        return self.generate(prompts, pooling_sampling_params(params), use_tqdm=use_tqdm)

    def encode(self, prompts: PromptType | Sequence[PromptType], pooling_params: PoolingParams | None = None,
               use_tqdm: bool = True, pooling_task: str = "encode") -> list[PoolingRequestOutput[PoolingOutput]]:
        """Pool every prompt for ``pooling_task`` and return the raw results as tensors."""
        return [as_pooling(o) for o in self._pool(prompts, pooling_task, pooling_params, use_tqdm)]

    def embed(self, prompts: PromptType | Sequence[PromptType], pooling_params: PoolingParams | None = None,
              use_tqdm: bool = True) -> list[PoolingRequestOutput[EmbeddingOutput]]:
        """One embedding per prompt (normalized and truncated as ``pooling_params`` and the model say)."""
        return [as_embedding(o) for o in self._pool(prompts, "embed", pooling_params, use_tqdm)]

    def classify(self, prompts: PromptType | Sequence[PromptType], pooling_params: PoolingParams | None = None,
                 use_tqdm: bool = True) -> list[PoolingRequestOutput[ClassificationOutput]]:
        """Class probabilities per prompt (a sequence-classification model)."""
        return [as_classification(o) for o in self._pool(prompts, "classify", pooling_params, use_tqdm)]

    def reward(self, prompts: PromptType | Sequence[PromptType], pooling_params: PoolingParams | None = None,
               use_tqdm: bool = True) -> list[PoolingRequestOutput[PoolingOutput]]:
        """A reward model's pooled outputs per prompt."""
        return self.encode(prompts, pooling_params, use_tqdm)

    def score(self, data_1: str | Sequence[str], data_2: str | Sequence[str], use_tqdm: bool = True,
              pooling_params: PoolingParams | None = None) -> list[PoolingRequestOutput[ScoringOutput]]:
        """Scores of text pairs: 1 to N, or N to N pairwise. An embedding model scores by the cosine of
        the two embeddings; a cross-encoder (classification model) by its score of the pair."""
        left, right = _pairs(data_1, data_2)
        info = self.pooling_info
        if info is not None and "classify" in info.tasks:
            from infercore.pooling.cross_encoder import pair_prompts

            prompts = pair_prompts(self, left, right)
            outs = self._pool(prompts, "score", pooling_params, use_tqdm)
            return [PoolingRequestOutput(o.request_id, ScoringOutput(float(pooled_tensor(o).reshape(-1)[0])),
                                         o.prompt_token_ids) for o in outs]
        outs = self._pool(list(left) + list(right), "embed", pooling_params, use_tqdm)
        n = len(left)
        scores = []
        for i in range(n):
            a, b = outs[i], outs[n + i]
            cosine = F.cosine_similarity(pooled_tensor(a).float(), pooled_tensor(b).float(), dim=0)
            scores.append(PoolingRequestOutput(f"{a.request_id}_{b.request_id}", ScoringOutput(float(cosine)),
                                               a.prompt_token_ids + b.prompt_token_ids))
        return scores


def _pairs(data_1: str | Sequence[str], data_2: str | Sequence[str]) -> tuple[list[str], list[str]]:
    """The (left, right) texts of each pair: one left text against every right one, or pairwise."""
    left = [data_1] if isinstance(data_1, str) else list(data_1)
    right = [data_2] if isinstance(data_2, str) else list(data_2)
    if not left or not right:
        raise ValueError("score needs at least one text on each side")
    if len(left) == 1:
        left = left * len(right)
    if len(left) != len(right):
        raise ValueError(f"score pairs {len(left)} texts with {len(right)}: give one text, or as many as on "
                         "the other side")
    return left, right

