"""This process's pipeline stage: which decoder layers it holds, and the hand-over of the residual stream
to the next stage.

A model of ``L`` decoder layers over ``P`` stages gives each stage a contiguous run of layers
(:func:`stage_layer_ranges`); the first stage also holds the token embedding, the last the final norm
and the LM head. A stage other than the first receives the hidden states and the residual of the
step's tokens from the stage before it, and every stage but the last sends its own on, point to point
in the pipeline group (gloo on the CPU, NCCL on GPUs), rank ``pp_rank * tp + tp_rank`` to the rank
of the same tensor-parallel rank in the next stage (ranks are world ranks; the group is the pipeline
group of that tensor-parallel rank).

A send is started without waiting for the receiver (``isend``); the stage waits for it before its
next send, so a stage may run one step ahead of the next one: that is what lets the engine keep
several micro-batches in the pipe.
"""

from __future__ import annotations

import os
import time
from dataclasses import dataclass, field
from typing import Any

import torch
import torch.distributed as dist
from torch import nn

#: Environment variable overriding the layers per stage: ``"a,b,..."``, one count per stage.
PARTITION_ENV = "INFERCORE_PP_LAYER_PARTITION"


def stage_layer_counts(num_layers: int, num_stages: int) -> list[int]:
    """Decoder layers of each stage: ``INFERCORE_PP_LAYER_PARTITION`` when set, else an even split whose
    extra layers go to the stages before the last, last-but-one first (the first stage holds the
    embedding and the last the head, so the layers they do not get balance the work)."""
    override = os.environ.get(PARTITION_ENV)
    if override:
        try:
            counts = [int(part) for part in override.split(",")]
        except ValueError:
            raise ValueError(f"{PARTITION_ENV}={override!r} is not a comma-separated list of layer counts") from None
        if len(counts) != num_stages or sum(counts) != num_layers or min(counts) < 1:
            raise ValueError(f"{PARTITION_ENV}={override!r} must give {num_stages} positive layer counts "
                             f"summing to the model's {num_layers} layers")
        return counts
    if num_layers < num_stages:
        raise ValueError(f"a model of {num_layers} decoder layers cannot be split into {num_stages} pipeline "
                         "stages; lower --pipeline-parallel-size")
    counts = [num_layers // num_stages] * num_stages
    for i in range(num_layers % num_stages):
        counts[-2 - i] += 1
    return counts


def stage_layer_ranges(num_layers: int, num_stages: int) -> list[tuple[int, int]]:
    """``[start, end)`` of every stage's decoder layers, in stage order."""
    ranges, start = [], 0
    for count in stage_layer_counts(num_layers, num_stages):
        ranges.append((start, start + count))
        start += count
    return ranges


class MissingLayer(nn.Identity):
    """Stands in for a module another pipeline stage holds: no parameters, and the loader skips the
    checkpoint tensors under its name."""


@dataclass
class PipelineState:
    """This process's stage, the number of stages, and the ranks it receives from and sends to (world
    ranks, in its pipeline group; None at the ends of the pipe)."""

    rank: int = 0
    size: int = 1
    prev_rank: int | None = None
    next_rank: int | None = None
    #: The process group of this tensor-parallel rank's stages (None with one stage).
    group: Any = None
    #: When the last hand-over was received (monotonic seconds; for the stage trace).
    last_recv: float = 0.0
    #: Sends started and not yet waited for, with the tensors they read.
    _pending: list[tuple[Any, torch.Tensor]] = field(default_factory=list)

    @property
    def is_first(self) -> bool:
        return self.rank == 0

    @property
    def is_last(self) -> bool:
        return self.rank == self.size - 1

    def layer_range(self, num_layers: int) -> tuple[int, int]:
        """``[start, end)`` of the decoder layers this stage holds."""
        return stage_layer_ranges(num_layers, self.size)[self.rank]

    def recv(self, num_tokens: int, hidden_size: int, dtype: torch.dtype,
             device: torch.device) -> tuple[torch.Tensor, torch.Tensor]:
        """The hidden states and the residual [num_tokens, hidden_size] of the step, from the stage before."""
        assert self.prev_rank is not None, "the first stage receives nothing"
        both = torch.empty((2, num_tokens, hidden_size), dtype=dtype, device=device)
        dist.recv(both, src=self.prev_rank, group=self.group)
        self.last_recv = time.monotonic()
        return both[0], both[1]

    def send(self, hidden: torch.Tensor, residual: torch.Tensor) -> None:
        """Start sending the step's hidden states and residual to the next stage (waiting first for the
        send before it: at most one step of this stage runs ahead of the next)."""
        assert self.next_rank is not None, "the last stage sends nothing"
        self.wait_sends()
        both = torch.stack((hidden, residual)).contiguous()
        self._pending.append((dist.isend(both, dst=self.next_rank, group=self.group), both))

    def gather_objects(self, value: Any) -> list[Any]:
        """Every stage's ``value``, in stage order (collective over the pipeline group)."""
        if self.size == 1:
            return [value]
        values: list[Any] = [None] * self.size
        dist.all_gather_object(values, value, group=self.group)
        return values

    def wait_sends(self) -> None:
        """Wait for every send started."""
        pending, self._pending = self._pending, []
        for work, _ in pending:
            work.wait()


_state = PipelineState()


def get_pp_state() -> PipelineState:
    return _state


def set_pp_state(state: PipelineState) -> None:
    """Set by a worker before it builds the model; models built afterwards hold this stage's layers."""
    global _state
    _state = state
