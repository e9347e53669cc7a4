"""Expert placement: the static maps, the policy hook, and each expert-parallel rank loading (and reading)
only its own experts, whole."""

from __future__ import annotations

import pytest
import torch
from torch import nn

from infercore.config import ConfigError, InfercoreConfig
from infercore.layers.checkpoint_slice import CheckpointSlice
from infercore.layers.fused_moe import (
    ExpertWeightLoader,
    FusedMoE,
    building_with_expert_parallel,
    contiguous_placement,
    placement_from_owners,
    set_expert_placement_policy,
)
from infercore.layers.tensor_parallel import check_shardable, set_tp_state
from infercore.models.weight_loading import load_checkpoint_weights
from infercore.ops.expert_dispatch import AllToAllExpertDispatcher

EXPERTS, HIDDEN, INTER, TOP_K = 8, 8, 6, 2


@pytest.fixture
def rank_of_two():
    """``rank_of_two(r)`` makes this process rank ``r`` of two; placement policy and rank reset afterwards."""
    yield lambda rank: set_tp_state(rank, 2)
    set_tp_state(0, 1)
    set_expert_placement_policy(None)


def experts(expert_parallel: bool) -> nn.Module:
    model = nn.Module()
    model.mlp = nn.Module()
    with building_with_expert_parallel(expert_parallel):
        model.mlp.experts = FusedMoE(EXPERTS, TOP_K, HIDDEN, INTER, renormalize=True, prefix="mlp.experts")
    return model


def tensors() -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    gen = torch.Generator().manual_seed(0)
    return (torch.randn(EXPERTS, INTER, HIDDEN, generator=gen), torch.randn(EXPERTS, INTER, HIDDEN, generator=gen),
            torch.randn(EXPERTS, HIDDEN, INTER, generator=gen))


class RecordingSource:
    """A stand-in for an open safetensors tensor that records the expert rows each read covers."""

    def __init__(self, tensor: torch.Tensor) -> None:
        self.tensor, self.experts_read = tensor, set()

    def get_shape(self) -> list[int]:
        return list(self.tensor.shape)

    def __getitem__(self, index: tuple[slice, ...]) -> torch.Tensor:
        self.experts_read.update(range(index[0].start, index[0].stop))
        return self.tensor[index]


def test_contiguous_placement_gives_leading_ranks_the_remainder() -> None:
    placement = contiguous_placement(5, 2)
    assert placement.owner == (0, 0, 0, 1, 1)
    assert placement.local_experts(1) == [3, 4]
    assert [placement.slot(e) for e in range(5)] == [0, 1, 2, 0, 1]
    assert contiguous_placement(8, 2).local_experts(0) == [0, 1, 2, 3]
    assert contiguous_placement(1, 2).local_experts(1) == []  # fewer experts than ranks: one holds none


def test_placement_outside_the_group_is_refused() -> None:
    with pytest.raises(ValueError, match="puts expert 1 on rank 2, outside the 2 expert-parallel ranks"):
        placement_from_owners([0, 2], 2)


@pytest.mark.parametrize("rank", [0, 1])
def test_each_rank_loads_only_its_experts_whole(rank_of_two, rank: int) -> None:
    rank_of_two(rank)
    tp_sharded, ep = experts(False).mlp.experts, experts(True).mlp.experts
    gate, up, down = tensors()
    source = RecordingSource(torch.cat([gate, up], dim=1))
    ep.weight_loader(ep.w13_weight, CheckpointSlice(source), "w13")
    ep.weight_loader(ep.w2_weight, down, "w2")
    mine = list(range(4 * rank, 4 * rank + 4))
    assert ep.local_expert_ids == mine
    assert source.experts_read == set(mine), "a rank read another rank's experts from the checkpoint"
    assert ep.w13_weight.shape == (4, 2 * INTER, HIDDEN) and ep.w2_weight.shape == (4, HIDDEN, INTER)
    torch.testing.assert_close(ep.w13_weight, torch.cat([gate, up], dim=1)[mine], rtol=0, atol=0)
    torch.testing.assert_close(ep.w2_weight, down[mine], rtol=0, atol=0)
    # Half the experts whole hold as many parameters as half of every expert: one rank's share of the layer.
    ep_params = sum(p.numel() for p in ep.parameters())
    assert ep_params == sum(p.numel() for p in tp_sharded.parameters()) == EXPERTS * 3 * INTER * HIDDEN // 2


def test_per_expert_tensors_of_other_ranks_are_skipped_and_not_missing(rank_of_two) -> None:
    rank_of_two(1)
    model = experts(True)
    gate, up, down = tensors()
    # A checkpoint shard holding only rank 1's experts is complete for rank 1.
    weights = [(f"mlp.experts.{e}.{name}.weight", t[e]) for e in range(4, EXPERTS)
               for name, t in (("gate_proj", gate), ("up_proj", up), ("down_proj", down))]
    load_checkpoint_weights(model, weights, [], extra=ExpertWeightLoader(model))
    torch.testing.assert_close(model.mlp.experts.w2_weight, down[4:], rtol=0, atol=0)
    loader = ExpertWeightLoader(model)
    for name, tensor in weights:
        if name != "mlp.experts.6.up_proj.weight":
            loader.load(name, tensor)
    assert loader.missing() == ["mlp.experts.w13_weight[expert 6, w3]"]


def test_a_placement_policy_chooses_each_layers_experts(rank_of_two) -> None:
    seen = []

    def round_robin(prefix: str, num_experts: int, ep_size: int):
        seen.append(prefix)
        return placement_from_owners([e % ep_size for e in range(num_experts)], ep_size)

    set_expert_placement_policy(round_robin)
    rank_of_two(0)
    layer = experts(True).mlp.experts
    assert seen == ["mlp.experts"]
    assert layer.local_expert_ids == [0, 2, 4, 6]
    _, _, down = tensors()
    layer.weight_loader(layer.w2_weight, down, "w2")
    torch.testing.assert_close(layer.w2_weight, down[[0, 2, 4, 6]], rtol=0, atol=0)


def test_a_policy_map_of_the_wrong_size_is_refused(rank_of_two) -> None:
    set_expert_placement_policy(lambda prefix, n, size: contiguous_placement(n - 1, size))
    rank_of_two(0)
    with pytest.raises(ValueError, match="placed 7 experts over 2 ranks for 'mlp.experts', which has 8"):
        experts(True)


def test_without_the_flag_or_with_one_rank_experts_stay_sharded(rank_of_two) -> None:
    assert experts(True).mlp.experts.placement is None  # one rank: nothing to split
    rank_of_two(0)
    layer = experts(False).mlp.experts
    assert layer.placement is None and layer.w13_weight.shape == (EXPERTS, INTER, HIDDEN)


def test_expert_parallel_keeps_experts_intermediate_size_whole() -> None:
    from transformers import AutoConfig

    config = AutoConfig.for_model("qwen3_moe", num_attention_heads=4, num_key_value_heads=4, intermediate_size=64,
                                  moe_intermediate_size=6)
    with pytest.raises(ValueError, match="expert intermediate size"):
        check_shardable(config, 4)
    check_shardable(config, 4, expert_parallel=True)


def test_the_flag_turns_graphs_off_when_it_splits_experts() -> None:
    assert InfercoreConfig.from_kwargs(tensor_parallel_size=2, enable_expert_parallel=True).model.enforce_eager
    assert not InfercoreConfig.from_kwargs(enable_expert_parallel=True).model.enforce_eager
    with pytest.raises(ConfigError, match="enable_expert_parallel"):
        InfercoreConfig.from_kwargs(enable_expert_parallel="sometimes")


def test_the_cli_takes_the_flag() -> None:
    import argparse

    from infercore.entrypoints.serve_args import add_config_flags

    parser = argparse.ArgumentParser()
    add_config_flags(parser)
    assert parser.parse_args(["--enable-expert-parallel"]).enable_expert_parallel is True


@pytest.mark.parametrize(("architecture", "down"), [("Qwen3MoeForCausalLM", "down_proj"), ("MixtralForCausalLM", "w2")])
def test_a_loaded_models_ranks_hold_disjoint_halves_of_the_experts(tiny_model_factory, rank_of_two, architecture: str,
                                                                   down: str) -> None:
    """The loader builds every MoE layer with expert parallelism when the config asks for it: each of two
    ranks holds half of each layer's experts, whole, equal to the checkpoint's."""
    from safetensors.torch import load_file

    from infercore.models.loader import load_model

    folder = tiny_model_factory(architecture)
    config = InfercoreConfig.from_kwargs(model=str(folder), tensor_parallel_size=2, enable_expert_parallel=True)
    checkpoint = {k: v for path in folder.glob("*.safetensors") for k, v in load_file(str(path)).items()}
    held: dict[str, list[int]] = {}
    for rank in (0, 1):
        rank_of_two(rank)
        model = load_model(config, torch.device("cpu"), torch.float32)
        layers = {name: m for name, m in model.named_modules() if isinstance(m, FusedMoE)}
        assert len(layers) == 2  # the tiny models' two decoder layers
        for name, layer in layers.items():
            assert len(layer.local_expert_ids) == layer.w2_weight.shape[0] == layer.num_experts // 2
            for slot, expert in enumerate(layer.local_expert_ids):
                torch.testing.assert_close(layer.w2_weight[slot], checkpoint[f"{name}.{expert}.{down}.weight"],
                                           rtol=0, atol=0)
            held.setdefault(name, []).extend(layer.local_expert_ids)
    assert all(sorted(experts) == list(range(layers[name].num_experts)) for name, experts in held.items())


class PlatformDispatcher(AllToAllExpertDispatcher):
    """What a platform plugin registers in place of the reference exchange."""


def test_a_platforms_dispatcher_class_is_what_expert_parallel_layers_build(rank_of_two) -> None:
    import types

    from infercore.platforms import current_platform
    from infercore.plugins import hookimpl, reset_plugin_manager
    from infercore.plugins.manager import PluginManager

    plugin = types.ModuleType("throwaway_dispatch")
    plugin.INFERCORE_PLUGIN_API = (1, 7)
    platform = current_platform().name

    @hookimpl
    def register_custom_ops(register) -> None:
        register("expert_dispatcher", f"{__name__}:PlatformDispatcher", platform=platform)

    plugin.register_custom_ops = register_custom_ops
    manager = PluginManager()
    manager.load_entry_points()
    manager.register_module(plugin, "throwaway")
    rank_of_two(1)
    assert type(experts(True).mlp.experts.dispatcher) is AllToAllExpertDispatcher
    reset_plugin_manager(manager)
    try:
        dispatcher = experts(True).mlp.experts.dispatcher
    finally:
        reset_plugin_manager(None)
    assert isinstance(dispatcher, PlatformDispatcher) and (dispatcher.rank, dispatcher.size) == (1, 2)
