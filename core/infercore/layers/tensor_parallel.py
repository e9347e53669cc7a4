"""This process's place in the tensor-parallel group, read by the sharded layers when built."""

from __future__ import annotations

from dataclasses import dataclass

import torch


@dataclass(frozen=True)
class TensorParallelState:
    """Rank of this process within its tensor-parallel group, and the group's size."""

    rank: int = 0
    size: int = 1

    def all_reduce(self, x: torch.Tensor) -> torch.Tensor:
        """Sum ``x`` over the group in place (nothing to do for one rank)."""
        if self.size > 1:
            torch.distributed.all_reduce(x)
        return x


_state = TensorParallelState()


def get_tp_state() -> TensorParallelState:
    return _state


def set_tp_state(rank: int, size: int) -> None:
    """Set by a worker before it builds the model; layers built afterwards shard for this rank."""
    global _state
    if not 0 <= rank < size:
        raise ValueError(f"tensor-parallel rank {rank} is outside a group of size {size}")
    _state = TensorParallelState(rank, size)


def divide(numerator: int, denominator: int, what: str) -> int:
    """``numerator / denominator``, with an error naming ``what`` when it does not divide evenly."""
    if numerator % denominator:
        raise ValueError(f"{what} ({numerator}) is not divisible by the tensor-parallel size ({denominator}); "
                         "choose a tensor_parallel_size that divides it")
    return numerator // denominator
