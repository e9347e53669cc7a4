"""Which expert-parallel rank holds each expert of a fused-MoE layer: the static map and its policy hook.

Under expert parallelism every expert lives whole on exactly one rank. The map is fixed when the
model is built: the default policy gives each rank a contiguous run of experts (the first
``num_experts % ep_size`` ranks one more). A deployment that knows its experts' load (an EPLB-style
rebalancer fed by :attr:`FusedMoE.expert_load <infercore.layers.fused_moe.FusedMoE>` counts from an
earlier run, say) installs its own :class:`ExpertPlacementPolicy` with
:func:`set_expert_placement_policy` before the engine starts; each layer then asks it for its map.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Protocol


@dataclass(frozen=True)
class ExpertPlacement:
    """``owner[e]``: the expert-parallel rank that holds expert ``e`` (every rank in ``range(ep_size)``).

    Each rank stacks its experts in ascending expert id; :meth:`slot` is an expert's index in its
    owner's stacked weights.
    """

    owner: tuple[int, ...]
    ep_size: int
    _slots: tuple[int, ...] = field(init=False, repr=False, compare=False)

    def __post_init__(self) -> None:
        if self.ep_size < 1:
            raise ValueError(f"an expert placement needs at least one rank, not {self.ep_size}")
        bad = [(e, r) for e, r in enumerate(self.owner) if not 0 <= r < self.ep_size]
        if bad:
            expert, rank = bad[0]
            raise ValueError(f"expert placement puts expert {expert} on rank {rank}, outside the "
                             f"{self.ep_size} expert-parallel ranks")
        seen = [0] * self.ep_size
        slots = []
        for rank in self.owner:
            slots.append(seen[rank])
            seen[rank] += 1
        object.__setattr__(self, "_slots", tuple(slots))

    @property
    def num_experts(self) -> int:
        return len(self.owner)

    def local_experts(self, rank: int) -> list[int]:
        """The experts rank ``rank`` holds, in the order of its stacked weights."""
        return [e for e, r in enumerate(self.owner) if r == rank]

    def slot(self, expert: int) -> int:
        """Expert ``expert``'s index in its owner's stacked weights."""
        return self._slots[expert]

    def slots(self) -> tuple[int, ...]:
        """:meth:`slot` of every expert, indexed by expert id."""
        return self._slots


def contiguous_placement(num_experts: int, ep_size: int) -> ExpertPlacement:
    """Rank ``r`` holds a contiguous run of experts; the first ``num_experts % ep_size`` runs are one longer."""
    base, extra = divmod(num_experts, ep_size)
    owner: list[int] = []
    for rank in range(ep_size):
        owner += [rank] * (base + (1 if rank < extra else 0))
    return ExpertPlacement(tuple(owner), ep_size)


def placement_from_owners(owner: Sequence[int], ep_size: int) -> ExpertPlacement:
    """An :class:`ExpertPlacement` from any expert → rank list (what a rebalancing policy computes)."""
    return ExpertPlacement(tuple(int(r) for r in owner), ep_size)


class ExpertPlacementPolicy(Protocol):
    """Chooses each fused-MoE layer's expert → rank map when the model is built (the extension point
    for load-aware placement). Called once per layer on every rank; it must give every rank the same map."""

    def __call__(self, layer_prefix: str, num_experts: int, ep_size: int) -> ExpertPlacement:
        """The map of layer ``layer_prefix`` (e.g. ``model.layers.3.mlp.experts``) over ``ep_size`` ranks."""
        ...


def _contiguous_policy(layer_prefix: str, num_experts: int, ep_size: int) -> ExpertPlacement:
    return contiguous_placement(num_experts, ep_size)


_policy: ExpertPlacementPolicy = _contiguous_policy


def set_expert_placement_policy(policy: ExpertPlacementPolicy | None) -> None:
    """Install ``policy`` for models built from now on in this process (None: back to contiguous).

    Worker processes build the model, so set it where they run: in a plugin's ``configure`` hook (which
    every worker process calls) rather than only in the engine's front end.
    """
    global _policy
    _policy = policy if policy is not None else _contiguous_policy


def placement_for(layer_prefix: str, num_experts: int, ep_size: int) -> ExpertPlacement:
    """The current policy's map for one layer, checked against the layer's expert count and rank count.
    A rank may hold no expert (fewer experts than ranks); it still takes part in every exchange."""
    placement = _policy(layer_prefix, num_experts, ep_size)
    if not isinstance(placement, ExpertPlacement):
        raise TypeError(f"the expert placement policy returned a {type(placement).__name__} for {layer_prefix!r}; "
                        "it must return an ExpertPlacement (see placement_from_owners)")
    if placement.num_experts != num_experts or placement.ep_size != ep_size:
        raise ValueError(f"the expert placement policy placed {placement.num_experts} experts over "
                         f"{placement.ep_size} ranks for {layer_prefix!r}, which has {num_experts} experts over "
                         f"{ep_size} ranks")
    return placement
