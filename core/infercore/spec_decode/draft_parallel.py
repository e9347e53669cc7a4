"""How a draft-side model is split and configured: unsharded inside a tensor-parallel worker, its own checkpoint."""

from __future__ import annotations

import contextlib
from collections.abc import Iterator
from typing import Any


@contextlib.contextmanager
def tensor_parallel_size(size: int | None) -> Iterator[None]:
    """Build or run a model unsharded (``size == 1``) inside a tensor-parallel worker; ``None`` (or
    the worker's own size) keeps the worker's sharding."""
    from infercore.layers import tensor_parallel as tp

    previous = tp.get_tp_state()
    if size is None or size == previous.size:
        yield
        return
    if size != 1:
        raise ValueError(f"draft_tensor_parallel_size {size} is neither 1 nor the target's tensor_parallel_size "
                         f"({previous.size}); a draft is either split like the target or whole on every rank")
    tp.set_tp_state(0, 1)
    try:
        yield
    finally:
        tp._state = previous


def replace_model(config: Any, model: str, overrides: dict[str, Any] | None = None) -> Any:
    """``config`` with ``config.model.model`` (the checkpoint) replaced by ``model`` (its own config,
    changed by ``overrides``)."""
    return config.model_copy(update={"model": config.model.model_copy(
        update={"model": model, "tokenizer": None, "hf_overrides": overrides, "quantization": None})})


def position_overrides(config: Any, max_model_len: int) -> dict[str, Any] | None:
    """``max_position_embeddings`` raised to ``max_model_len`` where a draft's config has fewer (its
    rotary tables must cover every position the target reaches; public EAGLE heads say 2048)."""
    have = getattr(config, "max_position_embeddings", None)
    return {"max_position_embeddings": max_model_len} if have is not None and have < max_model_len else None
