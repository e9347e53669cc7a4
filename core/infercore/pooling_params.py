"""PoolingParams: what one pooling request asks for. Field names and meanings follow vLLM's."""

from __future__ import annotations

from typing import Literal

import msgspec

#: What a pooling request is for, as vLLM names the tasks.
PoolingTask = Literal["embed", "classify", "score", "encode", "token_embed", "token_classify"]
POOLING_TASKS: tuple[str, ...] = ("embed", "classify", "score", "encode", "token_embed", "token_classify")


class PoolingParamsError(ValueError):
    """A pooling parameter is out of range; the message names the parameter and what is allowed."""

    def __init__(self, message: str, param: str | None = None) -> None:
        super().__init__(message)
        self.param = param


class PoolingParams(msgspec.Struct, omit_defaults=True, kw_only=True):
    """Parameters of one pooling request.

    ``dimensions`` keeps the first that many features of an embedding (Matryoshka truncation; only for
    models that support it). ``normalize`` (embeddings) and ``activation`` (classification scores:
    sigmoid for one label, softmax for several) default to the model's pooler config when None.
    ``softmax`` is vLLM's older name of ``activation``. The front end fills ``task`` and resolves the
    defaults before the request reaches the engine, so the engine reads only concrete values.
    """

    task: PoolingTask | None = None
    dimensions: int | None = None
    normalize: bool | None = None
    activation: bool | None = None
    softmax: bool | None = None
    truncate_prompt_tokens: int | None = None

    def __post_init__(self) -> None:
        if self.task is not None and self.task not in POOLING_TASKS:
            raise PoolingParamsError(f"task must be one of {', '.join(POOLING_TASKS)}, got {self.task!r}", "task")
        if self.dimensions is not None and self.dimensions < 1:
            raise PoolingParamsError(f"dimensions must be a positive integer, got {self.dimensions}", "dimensions")
        if self.truncate_prompt_tokens is not None and self.truncate_prompt_tokens < -1:
            raise PoolingParamsError("truncate_prompt_tokens must be -1 (the model's limit) or a positive "
                                     f"number of tokens, got {self.truncate_prompt_tokens}", "truncate_prompt_tokens")
        if self.softmax is not None and self.activation is None:
            self.activation = self.softmax

    def clone(self, **changes: object) -> PoolingParams:
        return msgspec.structs.replace(self, **changes)
