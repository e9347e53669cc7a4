"""Expert parallelism's token ownership: which fused-MoE layers split experts over ranks, and which of
a step's tokens each rank routes.

The expert-parallel group (:func:`~infercore.layers.expert_parallel_group.get_ep_group`) is the
tensor-parallel group, or, with several data-parallel engines, every rank of every engine. The
loader turns expert parallelism on around model construction (:func:`building_with_expert_parallel`),
as it sets the quantization config; fused-MoE layers built inside read :func:`expert_parallel_size`.

Attention stays tensor-parallel, so every rank of an engine's tensor-parallel group holds the same
hidden states (its engine's batch). Each of those ranks routes only its own contiguous share of them
(:func:`token_range`), sends them to their experts' ranks (in any engine) and, after the exchange
back, the shares are gathered again over the tensor-parallel group (:func:`gather_token_shares`) so
that every rank goes on with its engine's whole batch.
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager

import torch

from infercore.layers.expert_parallel_group import get_ep_group
from infercore.layers.tensor_parallel import get_tp_state

_enabled = False


@contextmanager
def building_with_expert_parallel(enabled: bool) -> Iterator[None]:
    """Fused-MoE layers created inside this block split their experts over the expert-parallel ranks
    (when ``enabled`` and there is more than one rank) instead of sharding every expert."""
    global _enabled
    previous, _enabled = _enabled, enabled
    try:
        yield
    finally:
        _enabled = previous


def expert_parallel_size() -> int:
    """Ranks the experts of a layer built now are spread over (1: no expert parallelism)."""
    return get_ep_group().size if _enabled else 1


def token_range(num_tokens: int, rank: int, size: int) -> tuple[int, int]:
    """``[start, stop)`` of the tokens rank ``rank`` routes: contiguous shares, the first
    ``num_tokens % size`` one token longer."""
    base, extra = divmod(num_tokens, size)
    start = rank * base + min(rank, extra)
    return start, start + base + (1 if rank < extra else 0)


def gather_token_shares(own: torch.Tensor, num_tokens: int, rank: int, size: int) -> torch.Tensor:
    """Every tensor-parallel rank's share ``own`` [share, H] (each from :func:`token_range`) put back in
    order: [num_tokens, H] on every rank (collective over the tensor-parallel group)."""
    if size == 1:
        return own
    width = -(-num_tokens // size)
    padded = own.new_zeros((width, *own.shape[1:]))
    padded[:own.shape[0]] = own
    parts = [torch.empty_like(padded) for _ in range(size)]
    get_tp_state().all_gather(parts, padded)
    pieces = []
    for r, part in enumerate(parts):
        start, stop = token_range(num_tokens, r, size)
        pieces.append(part[:stop - start])
    return torch.cat(pieces)
