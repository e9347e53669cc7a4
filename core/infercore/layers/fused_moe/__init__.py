"""Mixture of experts: the fused-MoE layer, its router, its weight methods and its checkpoint names."""

from infercore.layers.fused_moe.checkpoint import MIXTRAL_EXPERT_NAMES, ExpertNames, ExpertWeightLoader
from infercore.layers.fused_moe.layer import FusedMoE, moe_method_for
from infercore.layers.fused_moe.method import FusedMoEMethod, FusedMoEWeightSpec, UnquantizedFusedMoEMethod
from infercore.layers.fused_moe.router import select_experts

__all__ = [
    "MIXTRAL_EXPERT_NAMES",
    "ExpertNames",
    "ExpertWeightLoader",
    "FusedMoE",
    "FusedMoEMethod",
    "FusedMoEWeightSpec",
    "UnquantizedFusedMoEMethod",
    "moe_method_for",
    "select_experts",
]
