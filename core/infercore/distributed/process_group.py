"""Joining a worker to its process groups, through the platform's collective backend.

Ranks are laid out stage by stage: world rank ``pp_rank * tp + tp_rank``. With one pipeline stage the
world is the tensor-parallel group; with several, each stage's ranks form a tensor-parallel group and
the ranks of one tensor-parallel rank across the stages a pipeline group (the stages' hand-over is
point to point in it)."""

from __future__ import annotations

import datetime
import socket

import torch
import torch.distributed as dist

from infercore.layers.pipeline_parallel import PipelineState, set_pp_state
from infercore.layers.tensor_parallel import set_tp_state

#: Longest a collective may wait for a peer before it fails (a dead peer must not hang the rest).
COLLECTIVE_TIMEOUT_S = 120.0


def free_port(host: str = "127.0.0.1") -> int:
    """A TCP port free on ``host`` now (for the group's rendezvous)."""
    with socket.socket() as s:
        s.bind((host, 0))
        return int(s.getsockname()[1])


def init_tensor_parallel(rank: int, world_size: int, backend: str, init_method: str,
                         device: torch.device) -> None:
    """Set this process's tensor-parallel rank; with more than one rank, join the process group
    (``backend`` is the platform's ``dist_backend``: NCCL on CUDA, gloo on CPU…)."""
    set_tp_state(rank, world_size)
    if world_size == 1 or dist.is_initialized():
        return
    kwargs = {"device_id": device} if device.type != "cpu" else {}
    dist.init_process_group(backend, init_method=init_method, rank=rank, world_size=world_size,
                            timeout=datetime.timedelta(seconds=COLLECTIVE_TIMEOUT_S), **kwargs)
    # One collective at start-up proves every rank can reach every other before the model loads.
    probe = torch.ones(1, device=device)
    dist.all_reduce(probe)
    if int(probe.item()) != world_size:
        raise RuntimeError(f"the tensor-parallel group's first all-reduce gave {probe.item()}, not {world_size}")


def init_parallel(rank: int, tp_size: int, pp_size: int, backend: str, init_method: str,
                  device: torch.device) -> None:
    """Join the world of ``tp_size * pp_size`` ranks; set this process's tensor-parallel rank (and group)
    and its pipeline stage. One stage is :func:`init_tensor_parallel`."""
    if pp_size == 1:
        init_tensor_parallel(rank, tp_size, backend, init_method, device)
        set_pp_state(PipelineState())
        return
    world = tp_size * pp_size
    init_tensor_parallel(rank, world, backend, init_method, device)  # the world, and a probe of it
    pp_rank, tp_rank = divmod(rank, tp_size)
    tp_group = pp_group = None
    for stage in range(pp_size):  # every rank creates every group, in the same order
        group = dist.new_group(list(range(stage * tp_size, (stage + 1) * tp_size)))
        if stage == pp_rank:
            tp_group = group
    for column in range(tp_size):
        group = dist.new_group(list(range(column, world, tp_size)))
        if column == tp_rank:
            pp_group = group
    set_tp_state(tp_rank, tp_size, tp_group if tp_size > 1 else None)
    set_pp_state(PipelineState(pp_rank, pp_size, rank - tp_size if pp_rank > 0 else None,
                               rank + tp_size if pp_rank < pp_size - 1 else None, group=pp_group))


def destroy_tensor_parallel() -> None:
    """Leave the process group (if joined) and go back to a single rank and stage."""
    if dist.is_initialized():
        dist.destroy_process_group()
    set_tp_state(0, 1)
    set_pp_state(PipelineState())
