"""The Triton FP8 fused-MoE kernels (``fused_moe_fp8_block``) at Qwen3-30B-A3B-FP8's shape against the torch
reference, on the GPU (capability 8.9+)."""

from __future__ import annotations

import pytest
import torch
from gpu_marks import requires_gpu

from infercore.layers.fused_moe import select_experts
from infercore.ops import fp8_math
from infercore.ops.moe_fp8_reference import dequantize_w13, quantize_w13
from infercore.ops.moe_fp8_reference import fused_moe_fp8_block as reference
from infercore.ops.moe_reference import fused_moe as unquantized_reference


def _has_fp8_dot() -> bool:
    if not torch.cuda.is_available():
        return False
    from infercore_triton.fp8_support import has_fp8_dot

    return has_fp8_dot(torch.device("cuda"))


# Every case runs the W8A8 kernel, which needs FP8 tensor cores.
pytestmark = [*requires_gpu, pytest.mark.skipif(not _has_fp8_dot(), reason="needs a GPU with FP8 tensor cores "
                                                                          "(compute capability 8.9 or newer)")]

HIDDEN, INTER, EXPERTS, TOP_K, BLOCK = 2048, 768, 128, 8, 128
#: Relative error (Frobenius norm) against the reference: bf16 roundings (the kernel rounds each row's
#: weighted output, the reference its unweighted one, and the gate/up products sum in another order) move
#: a few activations across an fp8 step.
BOUND = 1e-2
#: W8A8 against the unquantized experts on the same (dequantized) weights: e4m3 activations (the reference
#: itself is 0.044 off at this shape, 64 tokens, on the CPU).
W8A8_BOUND = 8e-2


def case(tokens: int, inter: int = INTER):
    gen = torch.Generator(device="cuda").manual_seed(tokens)
    x = torch.randn(tokens, HIDDEN, device="cuda", generator=gen).bfloat16()
    w13 = torch.randn(EXPERTS, 2 * inter, HIDDEN, device="cuda", generator=gen) / HIDDEN**0.5
    w2 = torch.randn(EXPERTS, HIDDEN, inter, device="cuda", generator=gen) / inter**0.5
    w13_q, w13_s = quantize_w13(w13, BLOCK, BLOCK)
    w2_q, w2_s = fp8_math.quantize_blockwise(w2, BLOCK, BLOCK)
    weights, ids = select_experts(torch.randn(tokens, EXPERTS, device="cuda", generator=gen), TOP_K, True)
    return x, w13_q, w13_s, w2_q, w2_s, weights, ids


def rel_err(a: torch.Tensor, b: torch.Tensor) -> float:
    return float((a.float() - b.float()).norm() / b.float().norm())


@pytest.mark.parametrize("tokens", [1, 64, 512])
def test_fp8_fused_moe_matches_reference_at_qwen3_30b_a3b_shape(tokens: int) -> None:
    from infercore_triton.fused_moe_fp8 import fused_moe_fp8_block

    x, w13_q, w13_s, w2_q, w2_s, weights, ids = case(tokens)
    ours = fused_moe_fp8_block(x, w13_q, w13_s, w2_q, w2_s, weights, ids, BLOCK, BLOCK)
    assert ours.shape == x.shape and ours.dtype == torch.bfloat16
    assert rel_err(ours, reference(x, w13_q, w13_s, w2_q, w2_s, weights, ids, BLOCK, BLOCK)) < BOUND
    w13, w2 = dequantize_w13(w13_q, w13_s, BLOCK, BLOCK), fp8_math.dequantize_blockwise(w2_q, w2_s, BLOCK, BLOCK)
    unquantized = unquantized_reference(x.float(), w13, w2, weights, ids)
    assert rel_err(ours, unquantized) < W8A8_BOUND


def test_tensor_parallel_share_of_the_intermediate_size() -> None:
    # TP=2 gives each rank 384 intermediate features per expert (three whole blocks each of gate and up).
    from infercore_triton.fused_moe_fp8 import fused_moe_fp8_block

    x, w13_q, w13_s, w2_q, w2_s, weights, ids = case(64, INTER // 2)
    ours = fused_moe_fp8_block(x, w13_q, w13_s, w2_q, w2_s, weights, ids, BLOCK, BLOCK)
    assert rel_err(ours, reference(x, w13_q, w13_s, w2_q, w2_s, weights, ids, BLOCK, BLOCK)) < BOUND


def test_fp8_fused_moe_replays_in_a_cuda_graph() -> None:
    from infercore_triton.fused_moe_fp8 import fused_moe_fp8_block

    x, w13_q, w13_s, w2_q, w2_s, weights, ids = case(32)

    def run() -> torch.Tensor:
        return fused_moe_fp8_block(x, w13_q, w13_s, w2_q, w2_s, weights, ids, BLOCK, BLOCK)

    expected = run()
    stream = torch.cuda.Stream()
    stream.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(stream):
        run()  # warm-up outside capture builds the kernels
    torch.cuda.current_stream().wait_stream(stream)
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        out = run()
    ids.copy_(torch.roll(ids, 1, dims=0))
    graph.replay()
    torch.cuda.synchronize()
    assert rel_err(out, reference(x, w13_q, w13_s, w2_q, w2_s, weights, ids, BLOCK, BLOCK)) < BOUND
    assert rel_err(out, expected) > 1e-3, "the replay should follow the new routing"
