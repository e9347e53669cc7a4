"""This process's place in the expert-parallel group: the ranks a fused-MoE layer's experts are spread
over, and that group's collectives.

Without data parallelism the group is the tensor-parallel group (the default process group, one per
engine). With ``data_parallel_size > 1`` and expert parallelism on it spans every rank of every
data-parallel engine, DP×TP ranks (rank ``dp_rank * tp_size + tp_rank``), while attention and the dense
layers stay inside each engine's tensor-parallel group; a worker joins it
(:func:`infercore.distributed.expert_group.init_expert_parallel_group`) before it builds the model.
Fused-MoE layers reach it through :func:`get_ep_group`, never through the default group.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import torch
import torch.distributed as dist

from infercore.layers.tensor_parallel import get_tp_state


@dataclass(frozen=True)
class ExpertParallelGroup:
    """This process's rank in the expert-parallel group, the group's size and its collectives.

    ``backend`` is a standalone c10d backend (a group that spans data-parallel engines, built apart
    from each engine's default group), or None: the default process group (the tensor-parallel group;
    nothing to call with one rank)."""

    rank: int = 0
    size: int = 1
    backend: Any = None

    def all_to_all_single(self, out: torch.Tensor, x: torch.Tensor, out_splits: list[int],
                          in_splits: list[int]) -> None:
        """Send rows of ``x`` (``in_splits[r]`` of them to rank ``r``) and receive into ``out``
        (``out_splits[r]`` from rank ``r``); collective over the group."""
        if self.size == 1:
            out.copy_(x)
        elif self.backend is None:
            # The tensor-parallel group: under pipeline parallelism the default group spans every stage.
            dist.all_to_all_single(out, x.contiguous(), out_splits, in_splits, group=get_tp_state().group)
        else:
            self.backend.alltoall_base(out, x.contiguous(), out_splits, in_splits).wait()

    @property
    def spans_engines(self) -> bool:
        """Whether the group reaches past this engine's tensor-parallel ranks (to other data-parallel
        engines)."""
        return self.backend is not None


_group: ExpertParallelGroup | None = None


def get_ep_group() -> ExpertParallelGroup:
    """The expert-parallel group of this process: the one set by :func:`set_ep_group`, else the
    tensor-parallel group."""
    if _group is not None:
        return _group
    tp = get_tp_state()
    return ExpertParallelGroup(tp.rank, tp.size)


def set_ep_group(group: ExpertParallelGroup | None) -> None:
    """Set by a worker that joined a group spanning data-parallel engines, before it builds the model
    (None: back to the tensor-parallel group)."""
    global _group
    _group = group
