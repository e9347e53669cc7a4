"""This process's place in the tensor-parallel group, read by the sharded layers when built."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import torch


@dataclass(frozen=True)
class TensorParallelState:
    """Rank of this process within its tensor-parallel group, the group's size, and the process group
    its collectives run in (None: the default group, which is the tensor-parallel group unless pipeline
    stages share the world)."""

    rank: int = 0
    size: int = 1
    group: Any = None

    def all_reduce(self, x: torch.Tensor) -> torch.Tensor:
        """Sum ``x`` over the group in place (nothing to do for one rank)."""
        if self.size > 1:
            torch.distributed.all_reduce(x, group=self.group)
        return x

    def all_gather(self, parts: list[torch.Tensor], x: torch.Tensor) -> None:
        """Every rank's ``x`` into ``parts``, in rank order (collective)."""
        torch.distributed.all_gather(parts, x, group=self.group)


_state = TensorParallelState()


def get_tp_state() -> TensorParallelState:
    return _state


def set_tp_state(rank: int, size: int, group: Any = None) -> None:
    """Set by a worker before it builds the model; layers built afterwards shard for this rank.
    ``group`` is the tensor-parallel process group when it is not the default one (pipeline stages)."""
    global _state
    if not 0 <= rank < size:
        raise ValueError(f"tensor-parallel rank {rank} is outside a group of size {size}")
    _state = TensorParallelState(rank, size, group)


def divide(numerator: int, denominator: int, what: str) -> int:
    """``numerator / denominator``, with an error naming ``what`` when it does not divide evenly."""
    if numerator % denominator:
        raise ValueError(f"{what} ({numerator}) is not divisible by the tensor-parallel size ({denominator}); "
                         "choose a tensor_parallel_size that divides it")
    return numerator // denominator


def check_shardable(text_config: Any, size: int, *, expert_parallel: bool = False) -> None:
    """Raise (before any worker starts) if a model of this config cannot be split over ``size`` ranks:
    attention heads, KV heads (or ranks per KV head), intermediate size (and experts' intermediate size,
    unless ``expert_parallel`` keeps experts whole) and hidden size must divide."""
    if size == 1:
        return
    heads = text_config.num_attention_heads
    kv_heads = getattr(text_config, "num_key_value_heads", None) or heads
    divide(heads, size, "number of attention heads")
    kv_heads_per_rank(kv_heads, size)
    intermediate = getattr(text_config, "intermediate_size", None)  # plugin models' configs may name it otherwise
    if intermediate:
        divide(intermediate, size, "intermediate size")
    moe_intermediate = getattr(text_config, "moe_intermediate_size", None)
    if moe_intermediate and not expert_parallel:
        divide(moe_intermediate, size, "expert intermediate size")


def kv_heads_per_rank(kv_heads: int, size: int) -> int:
    """KV heads each rank holds: a share of them, or one (replicated) when there are fewer than ranks."""
    if kv_heads >= size:
        return divide(kv_heads, size, "number of KV heads")
    if size % kv_heads:
        raise ValueError(f"{size} tensor-parallel ranks cannot share {kv_heads} KV heads evenly; choose a "
                         f"tensor_parallel_size that divides {kv_heads} or is a multiple of it")
    return 1
