"""The front end's side of pooling: check a request against what the model serves and resolve its
options to concrete values before it reaches the engine."""

from __future__ import annotations

from infercore.pooling.config import PoolingModelInfo
from infercore.pooling_params import PoolingParams, PoolingParamsError
from infercore.sampling_params import SamplingParams

_TASK_WORDS = {"embed": "embeddings", "classify": "classification", "score": "scores", "encode": "pooled hidden "
               "states", "token_embed": "token embeddings", "token_classify": "token classification"}


def served_tasks(info: PoolingModelInfo | None) -> str:
    """What the model serves, in words, for error messages."""
    if info is None:
        return "text generation (completions and chat)"
    return ", ".join(_TASK_WORDS.get(t, t) for t in info.tasks)


def resolve_pooling_params(params: PoolingParams | None, task: str, info: PoolingModelInfo | None) -> PoolingParams:
    """``params`` for ``task`` with the model's defaults filled in; raises :class:`PoolingParamsError`
    naming the field when the model cannot serve it."""
    params = params or PoolingParams()
    if info is None:
        raise PoolingParamsError(f"this model serves {served_tasks(info)}, not {_TASK_WORDS.get(task, task)}; "
                                 "serve an embedding or classification model (or pass --runner pooling)", "model")
    if task not in info.tasks:
        raise PoolingParamsError(f"this model serves {served_tasks(info)}, not {_TASK_WORDS.get(task, task)}",
                                 "model")
    pooler = info.pooler
    if params.dimensions is not None:
        if task not in ("embed", "token_embed"):
            raise PoolingParamsError("dimensions applies to embeddings only", "dimensions")
        if not pooler.is_matryoshka:
            raise PoolingParamsError("this model does not support Matryoshka embeddings, so dimensions cannot "
                                     f"shorten them; leave dimensions out (its embeddings have {info.hidden_size})",
                                     "dimensions")
        if pooler.matryoshka_dimensions and params.dimensions not in pooler.matryoshka_dimensions:
            raise PoolingParamsError(f"dimensions must be one of {list(pooler.matryoshka_dimensions)} for this "
                                     f"model, got {params.dimensions}", "dimensions")
        if params.dimensions > info.hidden_size:
            raise PoolingParamsError(f"dimensions is {params.dimensions} but the model's embeddings have "
                                     f"{info.hidden_size}; ask for at most {info.hidden_size}", "dimensions")
    return params.clone(
        task=task,
        normalize=pooler.normalize if params.normalize is None else params.normalize,
        activation=pooler.activation if params.activation is None else params.activation,
        softmax=None)


def pooling_sampling_params(params: PoolingParams) -> SamplingParams:
    """The engine request of a pooling request: its prompt only (no sample, no detokenizing)."""
    return SamplingParams(max_tokens=0, detokenize=False, pooling_params=params)


def check_request_kind(params: SamplingParams, info: PoolingModelInfo | None) -> None:
    """Refuse a generation request to a pooling model and a pooling request to a generating one."""
    if info is not None and params.pooling_params is None:
        raise PoolingParamsError(f"this model serves {served_tasks(info)}, not text generation; use the "
                                 "embeddings, pooling, score or classify APIs", "model")
    if info is None and params.pooling_params is not None:
        raise PoolingParamsError(f"this model serves {served_tasks(info)}, not embeddings, scores or "
                                 "classification; serve a pooling model (or pass --runner pooling)", "model")
