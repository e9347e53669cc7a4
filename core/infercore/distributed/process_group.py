"""Joining a worker to its tensor-parallel process group, through the platform's collective backend."""

from __future__ import annotations

import datetime
import socket

import torch
import torch.distributed as dist

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


def destroy_tensor_parallel() -> None:
    """Leave the process group (if joined) and go back to a single rank."""
    if dist.is_initialized():
        dist.destroy_process_group()
    set_tp_state(0, 1)
