"""Moving routed tokens to the ranks that hold their experts and their outputs back: the dispatcher
interface and its plain all-to-all implementation.

A dispatcher is the ``expert_dispatcher`` custom op (an op whose implementation is a class): core
registers :class:`AllToAllExpertDispatcher` as the reference, and a platform plugin may register a faster class (fused permute-and-send kernels,
NVSHMEM-style low-latency exchanges…) under the same name with ``platform=NAME``. Each
expert-parallel fused-MoE layer builds one with ``cls(rank, size)`` and sets its :attr:`~ExpertDispatcher.group`.
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Protocol

import torch
import torch.distributed as dist

if TYPE_CHECKING:
    from infercore.layers.fused_moe.placement import ExpertPlacement


@dataclass
class DispatchedTokens:
    """What this rank's experts receive in one exchange.

    ``hidden`` [R, H]: one row per (token, chosen expert) pair routed here from any rank;
    ``local_ids`` [R] (int32): each row's expert as an index into this rank's stacked weights;
    ``state``: whatever the dispatcher's :meth:`~ExpertDispatcher.combine` needs to send the rows back.
    """

    hidden: torch.Tensor
    local_ids: torch.Tensor
    state: Any = None


class ExchangeGroup(Protocol):
    """The collectives of an expert-parallel group a dispatcher exchanges over (what
    :class:`~infercore.layers.expert_parallel_group.ExpertParallelGroup` provides)."""

    rank: int
    size: int

    def all_to_all_single(self, out: torch.Tensor, x: torch.Tensor, out_splits: list[int],
                          in_splits: list[int]) -> None:
        """Rows of ``x`` out (``in_splits[r]`` to rank ``r``), rows into ``out`` (``out_splits[r]`` from ``r``)."""
        ...


class ExpertDispatcher(ABC):
    """Exchanges tokens between the ranks of an expert-parallel group.

    :attr:`group` is the group to exchange over, set by the layer after it builds the dispatcher
    (None: the default process group, the tensor-parallel group); with data-parallel engines it spans
    every engine's ranks and is not the default group, so an exchange must go through it.

    Contract: :meth:`dispatch` and :meth:`combine` are collective (every rank calls them, in the
    same order, each with its own tokens, possibly none); ``combine(f(d.hidden, d.local_ids), d)``
    with ``d = dispatch(x, w, ids, placement)`` returns, for each of the caller's tokens ``t``,
    ``sum_j w[t, j] * f(x[t], ids[t, j])`` in ``x``'s dtype (the sum taken in float32), where ``f`` is
    expert ``ids[t, j]`` run on its owner rank.
    """

    #: The process group of the exchange (None: the default group). The fused-MoE layer sets it to the
    #: tensor-parallel group after construction, which differs from the default one under pipeline stages.
    group: Any = None

    def __init__(self, rank: int, size: int) -> None:
        if not 0 <= rank < size:
            raise ValueError(f"expert-parallel rank {rank} is outside a group of size {size}")
        self.rank, self.size = rank, size
        self.group: ExchangeGroup | None = None

    @abstractmethod
    def dispatch(self, hidden: torch.Tensor, topk_weights: torch.Tensor, topk_ids: torch.Tensor,
                 placement: ExpertPlacement) -> DispatchedTokens:
        """Send each of this rank's tokens ``hidden`` [T, H] to the owners of its experts ``topk_ids``
        [T, k] (global ids; weights ``topk_weights`` [T, k] float32 stay for :meth:`combine`); return the
        rows this rank's experts must run."""

    @abstractmethod
    def combine(self, expert_out: torch.Tensor, dispatched: DispatchedTokens) -> torch.Tensor:
        """Send the expert outputs ``expert_out`` [R, H] (rows as :meth:`dispatch` gave them) back to
        their tokens' ranks and return this rank's weighted sums [T, H]."""


@dataclass
class _ExchangeState:
    """How this rank's (token, expert) pairs were ordered and split for one all-to-all exchange."""

    order: torch.Tensor
    send_splits: list[int]
    recv_splits: list[int]
    topk_weights: torch.Tensor


class AllToAllExpertDispatcher(ExpertDispatcher):
    """The plain exchange: an ``all_to_all_single`` over :attr:`group` (NCCL on GPUs, gloo on the
    CPU), three calls out (the counts, the rows, their expert slots) and one
    back. It reads the counts on the host, so a step that uses it cannot be captured in a device graph.

    Each (token, expert) pair travels as its own row (a token whose two experts share an owner is sent
    twice); the weighting happens on :meth:`combine`, on the token's own rank.
    """

    def __init__(self, rank: int, size: int) -> None:
        super().__init__(rank, size)
        self._maps: dict[tuple[int, torch.device], tuple[torch.Tensor, torch.Tensor]] = {}

    def _map(self, placement: ExpertPlacement, device: torch.device) -> tuple[torch.Tensor, torch.Tensor]:
        key = (id(placement), device)
        if key not in self._maps:
            self._maps[key] = (torch.tensor(placement.owner, dtype=torch.int64, device=device),
                               torch.tensor(placement.slots(), dtype=torch.int64, device=device))
        return self._maps[key]

    def _exchange(self, x: torch.Tensor, out_rows: int, out_splits: list[int], in_splits: list[int]) -> torch.Tensor:
        out = x.new_empty((out_rows, *x.shape[1:]))
        if self.size == 1:
            out.copy_(x)
        elif self.group is None:
            dist.all_to_all_single(out, x.contiguous(), out_splits, in_splits)
        else:
            self.group.all_to_all_single(out, x, out_splits, in_splits)
        return out

    def dispatch(self, hidden: torch.Tensor, topk_weights: torch.Tensor, topk_ids: torch.Tensor,
                 placement: ExpertPlacement) -> DispatchedTokens:
        if placement.ep_size != self.size:
            raise ValueError(f"an expert placement over {placement.ep_size} ranks cannot be dispatched over "
                             f"{self.size}")
        owner, slot = self._map(placement, hidden.device)
        k = topk_ids.shape[1]
        flat = topk_ids.reshape(-1).long()
        dest = owner[flat]
        order = torch.argsort(dest, stable=True)
        send_counts = torch.bincount(dest, minlength=self.size)
        recv_counts = self._exchange(send_counts, self.size, [1] * self.size, [1] * self.size)
        send_splits, recv_splits = send_counts.tolist(), recv_counts.tolist()
        rows = sum(recv_splits)
        recv_hidden = self._exchange(hidden[order // k], rows, recv_splits, send_splits)
        recv_slots = self._exchange(slot[flat[order]], rows, recv_splits, send_splits)
        state = _ExchangeState(order, send_splits, recv_splits, topk_weights)
        return DispatchedTokens(recv_hidden, recv_slots.to(torch.int32), state)

    def combine(self, expert_out: torch.Tensor, dispatched: DispatchedTokens) -> torch.Tensor:
        state: _ExchangeState = dispatched.state
        tokens, k = state.topk_weights.shape
        back = self._exchange(expert_out, tokens * k, state.send_splits, state.recv_splits)
        pairs = torch.empty_like(back)
        pairs[state.order] = back
        weighted = pairs.view(tokens, k, expert_out.shape[-1]).float() * state.topk_weights.float().unsqueeze(-1)
        return weighted.sum(dim=1).to(expert_out.dtype)
