"""The all-to-all expert dispatcher and the expert-parallel fused-MoE layer, over two gloo ranks in
two processes, against the single-process ``fused_moe`` reference over every expert."""

from __future__ import annotations

import socket

import torch
import torch.distributed as dist
import torch.multiprocessing as mp

EXPERTS, HIDDEN, INTER, TOP_K = 6, 16, 8, 2
#: Expert → rank maps checked: the default contiguous one, and a scattered one (what a rebalancing
#: policy could give) where rank 1 holds only two experts.
OWNERS = {"contiguous": [0, 0, 0, 1, 1, 1], "scattered": [0, 1, 0, 0, 1, 0]}
#: Tokens each rank routes in the dispatcher check: uneven, and one rank with none.
TOKEN_COUNTS = [(5, 3), (4, 0)]


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def _experts(gen: torch.Generator) -> tuple[torch.Tensor, torch.Tensor]:
    return torch.randn(EXPERTS, 2 * INTER, HIDDEN, generator=gen), torch.randn(EXPERTS, HIDDEN, INTER, generator=gen)


def _routing(gen: torch.Generator, tokens: int) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    hidden = torch.randn(tokens, HIDDEN, generator=gen)
    ids = torch.argsort(torch.rand(tokens, EXPERTS, generator=gen), dim=1)[:, :TOP_K].to(torch.int32)
    weights = torch.rand(tokens, TOP_K, generator=gen)
    return hidden, ids, weights


def _check_dispatcher(rank: int) -> None:
    from infercore.layers.fused_moe import placement_from_owners
    from infercore.ops.expert_dispatch import AllToAllExpertDispatcher
    from infercore.ops.moe_reference import fused_moe

    gen = torch.Generator().manual_seed(0)
    w13, w2 = _experts(gen)
    dispatcher = AllToAllExpertDispatcher(rank, 2)
    for name, owners in OWNERS.items():
        placement = placement_from_owners(owners, 2)
        local = placement.local_experts(rank)
        for counts in TOKEN_COUNTS:
            # Both ranks draw every rank's tokens from one seed, so each knows what the other sends it.
            per_rank = [_routing(torch.Generator().manual_seed(10 * r + counts[r]), counts[r]) for r in range(2)]
            hidden, ids, weights = per_rank[rank]
            dispatched = dispatcher.dispatch(hidden, weights, ids, placement)
            routed_here = sum(int(torch.isin(r_ids, torch.tensor(local)).sum()) for _, r_ids, _ in per_rank)
            assert dispatched.hidden.shape == (routed_here, HIDDEN), (name, counts, rank)
            rows = dispatched.hidden
            if rows.shape[0]:
                ones = torch.ones(rows.shape[0], 1)
                rows = fused_moe(rows, w13[local], w2[local], ones, dispatched.local_ids.view(-1, 1))
            got = dispatcher.combine(rows, dispatched)
            expected = fused_moe(hidden, w13, w2, weights, ids)
            torch.testing.assert_close(got, expected, rtol=1e-5, atol=1e-5, msg=f"{name} {counts} rank {rank}")


def _check_layer(rank: int) -> None:
    """The fused-MoE layer built with expert parallelism (loading only its experts, routing its share of
    replicated tokens, gathering the shares back) gives the output of the layer on one rank."""
    from infercore.layers.fused_moe import FusedMoE, building_with_expert_parallel
    from infercore.layers.tensor_parallel import set_tp_state

    gen = torch.Generator().manual_seed(1)
    w13, w2 = _experts(gen)
    single = FusedMoE(EXPERTS, TOP_K, HIDDEN, INTER, renormalize=True)
    set_tp_state(rank, 2)
    with building_with_expert_parallel(True):
        spread = FusedMoE(EXPERTS, TOP_K, HIDDEN, INTER, renormalize=True, prefix="mlp.experts")
    for layer in (single, spread):
        layer.weight_loader(layer.w13_weight, w13, "w13")
        layer.weight_loader(layer.w2_weight, w2, "w2")
    assert spread.local_expert_ids == [[0, 1, 2], [3, 4, 5]][rank]
    torch.testing.assert_close(spread.w13_weight, w13[spread.local_expert_ids], rtol=0, atol=0)
    routed = 0
    for tokens in (5, 1, 8):  # uneven shares; a rank with no token of its own
        hidden = torch.randn(tokens, HIDDEN, generator=gen)
        logits = torch.randn(tokens, EXPERTS, generator=gen)
        got = spread(hidden, logits)
        set_tp_state(0, 1)  # the one-rank layer must not sum its output over the group
        expected = single(hidden, logits)
        set_tp_state(rank, 2)
        torch.testing.assert_close(got, expected, rtol=1e-5, atol=1e-5)
        routed += (tokens // 2 + (1 if rank < tokens % 2 else 0)) * TOP_K
    assert int(spread.expert_load.sum()) == routed


def _run(rank: int, port: int) -> None:
    dist.init_process_group("gloo", init_method=f"tcp://127.0.0.1:{port}", rank=rank, world_size=2)
    torch.set_num_threads(1)
    try:
        _check_dispatcher(rank)
        _check_layer(rank)
    finally:
        dist.destroy_process_group()


def test_dispatch_and_layer_over_two_gloo_ranks_match_one_process() -> None:
    mp.spawn(_run, args=(_free_port(),), nprocs=2, join=True)
