"""Mixture of experts: the fused-MoE layer, its router, its weight methods and its checkpoint names."""

from infercore.layers.fused_moe.checkpoint import MIXTRAL_EXPERT_NAMES, ExpertNames, ExpertWeightLoader
from infercore.layers.fused_moe.expert_parallel import building_with_expert_parallel
from infercore.layers.fused_moe.layer import FusedMoE, moe_method_for
from infercore.layers.fused_moe.method import FusedMoEMethod, FusedMoEWeightSpec, UnquantizedFusedMoEMethod
from infercore.layers.fused_moe.placement import (
    ExpertPlacement,
    ExpertPlacementPolicy,
    contiguous_placement,
    placement_from_owners,
    set_expert_placement_policy,
)
from infercore.layers.fused_moe.router import select_experts

__all__ = [
    "MIXTRAL_EXPERT_NAMES",
    "ExpertNames",
    "ExpertPlacement",
    "ExpertPlacementPolicy",
    "ExpertWeightLoader",
    "FusedMoE",
    "FusedMoEMethod",
    "FusedMoEWeightSpec",
    "UnquantizedFusedMoEMethod",
    "building_with_expert_parallel",
    "contiguous_placement",
    "moe_method_for",
    "placement_from_owners",
    "select_experts",
    "set_expert_placement_policy",
]
