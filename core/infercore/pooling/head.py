"""The pooler's head: what a request's pooled hidden state becomes for its task.

embed: the first ``dimensions`` features (Matryoshka), then L2-normalized when ``normalize`` is set;
classify / score: the model's classifier, then sigmoid (one label) or softmax (several) when
``activation`` is set; encode: the pooled hidden states as they are.
"""

from __future__ import annotations

from collections.abc import Callable

import torch
import torch.nn.functional as F

from infercore.pooling_params import PoolingParams

Classifier = Callable[[torch.Tensor], torch.Tensor]


def embed_head(pooled: torch.Tensor, params: PoolingParams) -> torch.Tensor:
    """One embedding [H] (or per-token rows [L, H]) truncated to ``dimensions`` and normalized if asked."""
    out = pooled.float()
    if params.dimensions is not None:
        out = out[..., : params.dimensions]
    if params.normalize:
        out = F.normalize(out, p=2, dim=-1)
    return out


def classify_activation(logits: torch.Tensor, activation: bool | None) -> torch.Tensor:
    """Scores from a classifier's logits [..., labels]: sigmoid for one label, softmax for several."""
    logits = logits.float()
    if not activation:
        return logits
    return torch.sigmoid(logits) if logits.shape[-1] == 1 else torch.softmax(logits, dim=-1)


def apply_heads(pooled: list[torch.Tensor], params: list[PoolingParams],
                classifier: Classifier | None) -> list[torch.Tensor]:
    """Each request's result from its pooled hidden states; classifier rows run as one batch."""
    out: list[torch.Tensor | None] = [None] * len(pooled)
    classify = [i for i, p in enumerate(params) if p.task in ("classify", "score", "token_classify")]
    if classify:
        if classifier is None:
            raise ValueError("this model has no classifier head; it serves embeddings, not classify or score")
        stacked = [pooled[i] for i in classify]
        if all(t.dim() == 1 for t in stacked):
            logits = classifier(torch.stack(stacked))
            for j, i in enumerate(classify):
                out[i] = classify_activation(logits[j], params[i].activation)
        else:
            for i in classify:
                out[i] = classify_activation(classifier(pooled[i]), params[i].activation)
    for i, p in enumerate(params):
        if out[i] is None:
            out[i] = embed_head(pooled[i], p) if p.task in ("embed", "token_embed", None) else pooled[i].float()
    return [t for t in out if t is not None]
