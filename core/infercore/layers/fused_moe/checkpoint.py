"""Checkpoint names of expert weights, and loading them into the fused-MoE layers' stacked parameters.

Two layouts are read: one tensor per expert and projection (``<layer>.{e}.gate_proj.weight``, or
Mixtral's ``w1``/``w3``/``w2``), and every expert stacked in one tensor (``<layer>.gate_up_proj``
[E, 2I, H] and ``<layer>.down_proj`` [E, H, I], the layout transformers 5 keeps in memory).
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field

import torch
from torch import nn

from infercore.layers.fused_moe.layer import SHARD_GROUP, FusedMoE

_PER_EXPERT = re.compile(r"^(?P<layer>.+)\.(?P<expert>\d+)\.(?P<proj>\w+)\.(?P<param>\w+)$")
_STACKED = re.compile(r"^(?P<layer>.+)\.(?P<proj>gate_up_proj|down_proj)$")
_STACKED_SHARD = {"gate_up_proj": "w13", "down_proj": "w2"}


@dataclass(frozen=True)
class ExpertNames:
    """What a checkpoint calls each expert's gate (``w1``), up (``w3``) and down (``w2``) projection."""

    gate: str = "gate_proj"
    up: str = "up_proj"
    down: str = "down_proj"

    def shard_of(self, projection: str) -> str | None:
        return {self.gate: "w1", self.up: "w3", self.down: "w2"}.get(projection)


#: Mixtral's ``block_sparse_moe.experts.{e}.w1/w3/w2``.
MIXTRAL_EXPERT_NAMES = ExpertNames(gate="w1", up="w3", down="w2")


@dataclass
class ExpertWeightLoader:
    """Loads the expert tensors of a checkpoint into a model's :class:`FusedMoE` layers and says which
    expert parameters no tensor filled. Passed to :func:`~infercore.models.weight_loading.load_checkpoint_weights`."""

    model: nn.Module
    names: ExpertNames = field(default_factory=ExpertNames)

    def __post_init__(self) -> None:
        self._layers = {name: m for name, m in self.model.named_modules() if isinstance(m, FusedMoE)}
        #: (parameter name, expert, shard) triples filled so far.
        self._filled: set[tuple[str, int, str]] = set()

    def owns(self, param_name: str) -> bool:
        """Whether ``param_name`` (a model parameter) is an expert parameter this loader fills."""
        layer, _, _ = param_name.rpartition(".")
        return layer in self._layers

    def load(self, name: str, tensor: torch.Tensor) -> bool:
        """Load checkpoint tensor ``name`` if it holds expert weights; False when it does not."""
        match = _STACKED.match(name)
        if match and match["layer"] in self._layers:
            shard = _STACKED_SHARD[match["proj"]]
            self._load(match["layer"], "weight", tensor, shard, None)
            return True
        match = _PER_EXPERT.match(name)
        if match is None or match["layer"] not in self._layers:
            return False
        shard = self.names.shard_of(match["proj"])
        if shard is None:
            raise ValueError(f"checkpoint tensor {name!r} names expert projection {match['proj']!r}; expected "
                             f"{self.names.gate}, {self.names.up} or {self.names.down}")
        self._load(match["layer"], match["param"], tensor, shard, int(match["expert"]))
        return True

    def _load(self, layer_name: str, param: str, tensor: torch.Tensor, shard: str, expert: int | None) -> None:
        layer = self._layers[layer_name]
        group = "w13" if shard == "w13" else SHARD_GROUP[shard]
        param_name = f"{group}_{param}"
        target = getattr(layer, param_name, None)
        if not isinstance(target, nn.Parameter):
            raise ValueError(f"checkpoint expert tensor {param!r} of {layer_name!r} has no parameter "
                             f"{param_name!r} in the model; the checkpoint's quantization does not match")
        with torch.no_grad():
            target.weight_loader(target, tensor, shard, expert)
        experts = range(layer.num_experts) if expert is None else [expert]
        shards = ("w1", "w3") if shard == "w13" else (shard,)
        self._filled.update((f"{layer_name}.{param_name}", e, s) for e in experts for s in shards)

    def missing(self) -> list[str]:
        """Expert parameters (``<param>[expert e, shard]``) of the experts held here that no checkpoint
        tensor filled."""
        out = []
        for layer_name, layer in self._layers.items():
            for param_name, _ in layer.named_parameters(recurse=False):
                shards = ("w1", "w3") if param_name.startswith("w13_") else ("w2",)
                full = f"{layer_name}.{param_name}"
                out.extend(f"{full}[expert {e}, {s}]" for e in layer.local_expert_ids for s in shards
                           if (full, e, s) not in self._filled)
        return out
