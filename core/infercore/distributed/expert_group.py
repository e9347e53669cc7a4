"""Joining the expert-parallel group that spans data-parallel engines (DP×TP ranks).

Each engine keeps its tensor-parallel group as the default process group; this group is built apart
from it, as a standalone backend (gloo on the CPU, NCCL on GPUs) over a prefix of the data-parallel
rendezvous store (:mod:`infercore.distributed.dp_rendezvous`), and installed with
:func:`~infercore.layers.expert_parallel_group.set_ep_group` for the fused-MoE layers.
"""

from __future__ import annotations

import datetime
from typing import Any

import torch
import torch.distributed as dist

from infercore.config import ParallelConfig
from infercore.distributed.dp_rendezvous import connect_store, spans_data_parallel
from infercore.distributed.process_group import COLLECTIVE_TIMEOUT_S
from infercore.layers.expert_parallel_group import ExpertParallelGroup, get_ep_group, set_ep_group


def init_expert_parallel_group(parallel: ParallelConfig, tp_rank: int, backend: str,
                               device: torch.device) -> ExpertParallelGroup:
    """Join the DP×TP expert-parallel group when ``parallel`` spreads experts over data-parallel engines
    (after the tensor-parallel group is set up; collective over every rank of every engine); otherwise
    the expert-parallel group stays the tensor-parallel one."""
    if not spans_data_parallel(parallel):
        return get_ep_group()
    tp_size = parallel.tensor_parallel_size
    rank, size = parallel.data_parallel_rank * tp_size + tp_rank, parallel.data_parallel_size * tp_size
    store = dist.PrefixStore("expert-parallel", connect_store(parallel, host=False))
    timeout = datetime.timedelta(seconds=COLLECTIVE_TIMEOUT_S)
    pg: Any
    if backend == "gloo":
        pg = dist.ProcessGroupGloo(store, rank, size, timeout)
    elif backend == "nccl":
        options = dist.ProcessGroupNCCL.Options()
        options._timeout = timeout
        pg = dist.ProcessGroupNCCL(store, rank, size, options)
    else:
        raise ValueError(f"expert parallelism across data-parallel engines needs the gloo or nccl backend, "
                         f"not {backend!r}")
    group = ExpertParallelGroup(rank, size, pg)
    # One exchange at start-up proves every rank of every engine reaches every other.
    ones = torch.ones(size, dtype=torch.int64, device=device)
    got = torch.zeros_like(ones)
    group.all_to_all_single(got, ones, [1] * size, [1] * size)
    if int(got.sum().item()) != size:
        raise RuntimeError(f"the expert-parallel group's first exchange gave {got.tolist()}, not {size} ones")
    set_ep_group(group)
    return group


def destroy_expert_parallel_group() -> None:
    """Leave the DP×TP group (if joined): the expert-parallel group is the tensor-parallel one again."""
    set_ep_group(None)
