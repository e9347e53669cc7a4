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


def replace_model(config: Any, model: str) -> Any:
    """``config`` with ``config.model.model`` (the checkpoint) replaced by ``model``."""
    return config.model_copy(update={"model": config.model.model_copy(
        update={"model": model, "tokenizer": None, "hf_overrides": None, "quantization": None})})
