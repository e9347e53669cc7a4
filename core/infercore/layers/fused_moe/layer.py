"""The fused mixture-of-experts layer: route each token to its top-k SwiGLU experts and sum their outputs."""

from __future__ import annotations

import torch
from torch import nn

from infercore.layers.checkpoint_slice import materialize
from infercore.layers.fused_moe.expert_parallel import expert_parallel_size, gather_token_shares, token_range
from infercore.layers.fused_moe.method import FusedMoEMethod, FusedMoEWeightSpec, UnquantizedFusedMoEMethod
from infercore.layers.fused_moe.placement import ExpertPlacement, placement_for
from infercore.layers.fused_moe.router import select_experts
from infercore.layers.tensor_parallel import divide, get_tp_state
from infercore.ops import get_op
from infercore.ops.expert_dispatch import ExpertDispatcher
from infercore.quantization import current_quantization, layout_of

#: Checkpoint projection → the stacked parameter group it fills (``w1`` gate, ``w3`` up, ``w2`` down).
SHARD_GROUP = {"w1": "w13", "w3": "w13", "w2": "w2"}


def moe_method_for(prefix: str) -> FusedMoEMethod:
    """The method a fused-MoE layer named ``prefix`` gets in the model being built."""
    config = current_quantization()
    if config is None or (prefix and config.is_ignored(prefix)):
        return UnquantizedFusedMoEMethod()
    method = config.moe_method(prefix)
    if not isinstance(method, FusedMoEMethod):
        raise TypeError(f"quantization {config.name!r} gave the fused-MoE layer {prefix!r} a "
                        f"{type(method).__name__}, which is not a FusedMoEMethod")
    return method


class FusedMoE(nn.Module):
    """``num_experts`` SwiGLU experts of which each token uses ``top_k``, chosen by router logits.

    Under tensor parallelism every rank holds every expert and a share of each expert's
    intermediate features (gate/up rows, down columns); the partial outputs are summed over the
    group. Built with expert parallelism on (see ``expert_parallel.py``), each rank instead holds
    whole experts, those :attr:`placement` gives it (:attr:`local_expert_ids`, stacked in that
    order), routes its share of the tokens and exchanges them with the experts' ranks through the
    platform's ``expert_dispatcher``. ``renormalize`` rescales each token's top-k weights to sum to
    one (Mixtral; Qwen3-MoE's ``norm_topk_prob``). Weights belong to ``quant_method`` (unquantized unless the model's format
    gives one); ``weight_loader(param, loaded, shard_id, expert_id)`` loads one expert's checkpoint
    projection (``expert_id`` None: ``loaded`` stacks every expert).
    """

    def __init__(self, num_experts: int, top_k: int, hidden_size: int, intermediate_size: int, *,
                 renormalize: bool, quant_method: FusedMoEMethod | None = None, prefix: str = "") -> None:
        super().__init__()
        tp = get_tp_state()
        self.tp_rank, self.tp_size = tp.rank, tp.size
        self.num_experts, self.top_k, self.renormalize = num_experts, top_k, renormalize
        if not 0 < top_k <= num_experts:
            raise ValueError(f"num_experts_per_tok ({top_k}) must be between 1 and the number of experts "
                             f"({num_experts}); the config is inconsistent")
        ep_size = expert_parallel_size()
        #: The expert → rank map (None: no expert parallelism, every rank holds a share of every expert).
        self.placement: ExpertPlacement | None = None
        self.dispatcher: ExpertDispatcher | None = None
        if ep_size > 1:
            self.placement = placement_for(prefix, num_experts, ep_size)
            self.dispatcher = get_op("expert_dispatcher")(tp.rank, ep_size)
            self.dispatcher.group = tp.group
            self.local_expert_ids = self.placement.local_experts(tp.rank)
            self.shard_rank, shards = 0, 1
        else:
            self.local_expert_ids = list(range(num_experts))
            self.shard_rank, shards = tp.rank, tp.size
        self._local_slot = {expert: slot for slot, expert in enumerate(self.local_expert_ids)}
        #: Tokens routed to each expert (global ids) from this rank since the model was built, counted
        #: under expert parallelism only: what a load-aware placement policy reads.
        self.expert_load = torch.zeros(num_experts, dtype=torch.int64) if ep_size > 1 else None
        self.intermediate_size = divide(intermediate_size, shards, "expert intermediate size")
        self.quant_method = quant_method or moe_method_for(prefix)
        self.quant_method.create_weights(self, FusedMoEWeightSpec(
            len(self.local_expert_ids), hidden_size, self.intermediate_size, torch.get_default_dtype(), shards))

    def forward(self, hidden: torch.Tensor, router_logits: torch.Tensor) -> torch.Tensor:
        """``hidden`` [T, H] and ``router_logits`` [T, E] → the weighted sum of each token's experts [T, H]."""
        if self.placement is not None:
            return self._forward_expert_parallel(hidden, router_logits)
        topk_weights, topk_ids = select_experts(router_logits, self.top_k, self.renormalize)
        out = self.quant_method.apply_experts(self, hidden, topk_weights, topk_ids)
        return get_tp_state().all_reduce(out)

    def _forward_expert_parallel(self, hidden: torch.Tensor, router_logits: torch.Tensor) -> torch.Tensor:
        """Route this rank's share of the tokens, run the experts held here over the rows sent to them,
        weight and sum on the way back, and gather every rank's share (collective)."""
        assert self.placement is not None and self.dispatcher is not None and self.expert_load is not None
        rank, size = self.tp_rank, self.placement.ep_size
        num_tokens = hidden.shape[0]
        start, stop = token_range(num_tokens, rank, size)
        topk_weights, topk_ids = select_experts(router_logits[start:stop], self.top_k, self.renormalize)
        self.expert_load += torch.bincount(topk_ids.reshape(-1).long(), minlength=self.num_experts).to(
            self.expert_load.device)
        dispatched = self.dispatcher.dispatch(hidden[start:stop], topk_weights, topk_ids, self.placement)
        rows = dispatched.hidden
        if rows.shape[0]:
            # Unweighted (weight one, one expert per row): the weights are applied on combine.
            ones = torch.ones(rows.shape[0], 1, dtype=torch.float32, device=rows.device)
            rows = self.quant_method.apply_experts(self, rows, ones, dispatched.local_ids.view(-1, 1))
        own = self.dispatcher.combine(rows, dispatched)
        return gather_token_shares(own, num_tokens, rank, size)

    def weight_loader(self, param: nn.Parameter, loaded: torch.Tensor, shard_id: str,
                      expert_id: int | None = None) -> None:
        """Copy this rank's share of projection ``shard_id`` (``w1`` gate, ``w3`` up, ``w2`` down; ``w13``
        gate and up stacked) of expert ``expert_id`` (None: all experts, stacked on a first dimension).
        Under expert parallelism an expert another rank holds is skipped (never read)."""
        if shard_id not in (*SHARD_GROUP, "w13"):
            raise ValueError(f"unknown expert projection {shard_id!r}; expected w1, w2, w3 or w13")
        if expert_id is None:
            if loaded.shape[0] != self.num_experts:
                raise ValueError(f"stacked expert tensor of shape {tuple(loaded.shape)} holds {loaded.shape[0]} "
                                 f"experts but the config has {self.num_experts}")
            if self.placement is not None:
                # Read only the experts held here (a lazy checkpoint slice reads just their rows).
                for expert in self.local_expert_ids:
                    self.weight_loader(param, materialize(loaded.narrow(0, expert, 1))[0], shard_id, expert)
                return
            # Read a lazy checkpoint slice once, not once per expert.
            stacked = materialize(loaded)
            for expert in range(self.num_experts):
                self.weight_loader(param, stacked[expert], shard_id, expert)
            return
        if not 0 <= expert_id < self.num_experts:
            raise ValueError(f"checkpoint holds expert {expert_id} but the config has {self.num_experts} experts")
        if expert_id not in self._local_slot:
            return  # another expert-parallel rank holds this expert
        if shard_id == "w13":
            half = loaded.shape[0] // 2
            self.weight_loader(param, loaded.narrow(0, 0, half), "w1", expert_id)
            self.weight_loader(param, loaded.narrow(0, half, half), "w3", expert_id)
            return
        target = param.data[self._local_slot[expert_id]]
        layout = layout_of(param)
        if shard_id == "w2":
            dim = None if layout.input_dim is None else layout.input_dim - 1
        else:
            dim = None if layout.output_dim is None else layout.output_dim - 1
            if dim is not None:
                rows = target.shape[dim] // 2
                target = target.narrow(dim, 0 if shard_id == "w1" else rows, rows)
        if dim is not None and dim < target.dim():
            size = target.shape[dim]
            loaded = loaded.narrow(dim, self.shard_rank * size, size)
        if tuple(target.shape) != tuple(loaded.shape):
            raise ValueError(f"expert {expert_id} {shard_id} tensor of shape {tuple(loaded.shape)} does not fit "
                             f"{tuple(target.shape)}; the config does not match the weights")
        target.copy_(loaded)
