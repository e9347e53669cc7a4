"""Per-step state that layers read without it being threaded through every model call."""

from __future__ import annotations

from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from typing import Any


@dataclass
class ForwardContext:
    """What one forward pass needs beyond its inputs: the attention backend's metadata.

    ``attn_metadata`` is the first KV cache group's (the only one for most models); with several groups
    (:mod:`infercore.kv_cache.groups`), ``group_attn_metadata[g - 1]`` is group ``g``'s: the same step
    over that group's slot mapping and block table.

    ``split_at_attention`` is set only while a forward pass is captured in pieces
    (:mod:`infercore.worker.mixed_graphs`): attention layers then hand it their backend call and its
    tensors, ``split_at_attention(call, tensors)``, instead of running ``call(attn_metadata, *tensors)``.
    """

    attn_metadata: Any
    num_tokens: int
    split_at_attention: Callable[[Callable[..., None], tuple[Any, ...]], None] | None = None
    group_attn_metadata: tuple[Any, ...] = ()


_context: ForwardContext | None = None


@contextmanager
def set_forward_context(ctx: ForwardContext) -> Iterator[ForwardContext]:
    global _context
    prev, _context = _context, ctx
    try:
        yield ctx
    finally:
        _context = prev


def get_forward_context() -> ForwardContext:
    if _context is None:
        raise RuntimeError("attention ran outside a forward context; the model runner sets one per step")
    return _context
