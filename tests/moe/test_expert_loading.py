"""Expert weights load from per-expert and stacked checkpoint layouts, sharded over tensor-parallel ranks."""

from __future__ import annotations

import pytest
import torch
from torch import nn

from infercore.layers.fused_moe import MIXTRAL_EXPERT_NAMES, ExpertWeightLoader, FusedMoE
from infercore.layers.tensor_parallel import set_tp_state
from infercore.models.weight_loading import load_checkpoint_weights

EXPERTS, HIDDEN, INTER = 4, 8, 6


class Block(nn.Module):
    """A router and its experts, named as in a Qwen3-MoE checkpoint."""

    def __init__(self) -> None:
        super().__init__()
        self.gate = nn.Linear(HIDDEN, EXPERTS, bias=False)
        self.experts = FusedMoE(EXPERTS, 2, HIDDEN, INTER, renormalize=True)


@pytest.fixture
def tp_rank():
    """``tp_rank(rank, size)`` sets this process's tensor-parallel place for layers built afterwards."""
    yield set_tp_state
    set_tp_state(0, 1)


def expert_tensors() -> tuple[torch.Tensor, torch.Tensor, torch.Tensor, torch.Tensor]:
    gen = torch.Generator().manual_seed(0)
    gate, up = torch.randn(EXPERTS, INTER, HIDDEN, generator=gen), torch.randn(EXPERTS, INTER, HIDDEN, generator=gen)
    down = torch.randn(EXPERTS, HIDDEN, INTER, generator=gen)
    return gate, up, down, torch.randn(EXPERTS, HIDDEN, generator=gen)


def per_expert_checkpoint(gate_name: str = "gate_proj", up_name: str = "up_proj", down_name: str = "down_proj"):
    gate, up, down, router = expert_tensors()
    out = [("mlp.gate.weight", router)]
    for e in range(EXPERTS):
        out += [(f"mlp.experts.{e}.{gate_name}.weight", gate[e]), (f"mlp.experts.{e}.{up_name}.weight", up[e]),
                (f"mlp.experts.{e}.{down_name}.weight", down[e])]
    return out


def load(model: nn.Module, weights, names=None) -> None:
    extra = ExpertWeightLoader(model, names) if names else ExpertWeightLoader(model)
    load_checkpoint_weights(model, weights, [], extra=extra)


def wrapped() -> nn.Module:
    model = nn.Module()
    model.mlp = Block()
    return model


@pytest.mark.parametrize("rank", [0, 1])
def test_per_expert_tensors_fill_this_ranks_share(tp_rank, rank: int) -> None:
    tp_rank(rank, 2)
    model = wrapped()
    load(model, per_expert_checkpoint())
    gate, up, down, _ = expert_tensors()
    half = INTER // 2
    rows = slice(rank * half, (rank + 1) * half)
    experts = model.mlp.experts
    assert experts.w13_weight.shape == (EXPERTS, 2 * half, HIDDEN)
    torch.testing.assert_close(experts.w13_weight[:, :half], gate[:, rows])
    torch.testing.assert_close(experts.w13_weight[:, half:], up[:, rows])
    torch.testing.assert_close(experts.w2_weight, down[:, :, rows])


def test_stacked_layout_loads_like_per_expert_tensors(tp_rank) -> None:
    tp_rank(1, 2)
    gate, up, down, router = expert_tensors()
    stacked, per_expert = wrapped(), wrapped()
    load(stacked, [("mlp.gate.weight", router), ("mlp.experts.gate_up_proj", torch.cat([gate, up], dim=1)),
                   ("mlp.experts.down_proj", down)])
    load(per_expert, per_expert_checkpoint())
    assert torch.equal(stacked.mlp.experts.w13_weight, per_expert.mlp.experts.w13_weight)
    assert torch.equal(stacked.mlp.experts.w2_weight, per_expert.mlp.experts.w2_weight)


def test_mixtral_names() -> None:
    model, reference = wrapped(), wrapped()
    load(model, per_expert_checkpoint("w1", "w3", "w2"), MIXTRAL_EXPERT_NAMES)
    load(reference, per_expert_checkpoint())
    assert torch.equal(model.mlp.experts.w13_weight, reference.mlp.experts.w13_weight)
    assert torch.equal(model.mlp.experts.w2_weight, reference.mlp.experts.w2_weight)


def test_missing_expert_is_named() -> None:
    weights = [(n, t) for n, t in per_expert_checkpoint() if n != "mlp.experts.2.up_proj.weight"]
    with pytest.raises(ValueError, match=r"mlp\.experts\.w13_weight\[expert 2, w3\]"):
        load(wrapped(), weights)


def test_expert_beyond_the_config_is_refused() -> None:
    weights = per_expert_checkpoint() + [("mlp.experts.4.gate_proj.weight", torch.zeros(INTER, HIDDEN))]
    with pytest.raises(ValueError, match="expert 4 but the config has 4 experts"):
        load(wrapped(), weights)


def test_unknown_projection_is_refused() -> None:
    weights = per_expert_checkpoint() + [("mlp.experts.0.w1.weight", torch.zeros(INTER, HIDDEN))]
    with pytest.raises(ValueError, match="names expert projection 'w1'"):
        load(wrapped(), weights)


def test_intermediate_size_must_split_over_ranks(tp_rank) -> None:
    tp_rank(0, 4)
    with pytest.raises(ValueError, match=r"expert intermediate size \(6\) is not divisible"):
        FusedMoE(EXPERTS, 2, HIDDEN, INTER, renormalize=True)


def test_expert_intermediate_size_is_checked_before_workers_start() -> None:
    from transformers import AutoConfig

    from infercore.layers.tensor_parallel import check_shardable

    config = AutoConfig.for_model("qwen3_moe", num_attention_heads=16, num_key_value_heads=2, intermediate_size=64,
                                  moe_intermediate_size=24)
    check_shardable(config, 2)
    with pytest.raises(ValueError, match=r"expert intermediate size \(24\) is not divisible by the tensor-parallel "
                                         r"size \(16\)"):
        check_shardable(config, 16)
