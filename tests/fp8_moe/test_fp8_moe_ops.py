"""The ``fused_moe_fp8_block`` op: the torch reference against the unquantized ``fused_moe`` on dequantized
weights, and the Triton kernels against the reference (through Triton's interpreter without a GPU)."""

from __future__ import annotations

import os
import sys
from pathlib import Path

import pytest
import torch

from infercore.ops import fp8_math, get_op
from infercore.ops.moe_fp8_reference import dequantize_w13, fused_moe_fp8_block, quantize_w13
from infercore.ops.moe_reference import fused_moe
from infercore.plugins import get_plugin_manager
from infercore_triton import fused_moe_fp8 as triton_moe

sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "moe"))
from test_fused_moe_op import random_case  # noqa: E402

DEVICE = "cpu" if os.environ.get("TRITON_INTERPRET") == "1" or not torch.cuda.is_available() else "cuda"


def _fp8_case(tokens: int, hidden: int, inter: int, experts: int, top_k: int, block: int, seed: int = 0):
    x, w13, w2, weights, ids = random_case(tokens, hidden, inter, experts, top_k, seed=seed)
    w13_q, w13_s = quantize_w13(w13, block, block)
    w2_q, w2_s = fp8_math.quantize_blockwise(w2, block, block)
    return x, w13_q, w13_s, w2_q, w2_s, weights, ids


def _identity_per_group(x: torch.Tensor, group: int) -> tuple[torch.Tensor, torch.Tensor]:
    return x.float(), torch.ones(x.shape[0], -(-x.shape[1] // group))


def test_gate_and_up_keep_block_rows_of_their_own() -> None:
    # 48 rows each: two block rows of 32 (the second partial) for the gate, two for the up projection.
    w13 = torch.randn(3, 96, 40)
    w13[:, 48:] *= 100.0  # the up half's scales must not leak into the gate's last block
    q, scale = quantize_w13(w13, 32, 32)
    assert q.dtype == fp8_math.FP8_DTYPE and scale.shape == (3, 4, 2)
    gate_q, gate_s = fp8_math.quantize_blockwise(w13[:, :48], 32, 32)
    assert torch.equal(scale[:, :2], gate_s) and torch.equal(q[:, :48].float(), gate_q.float())
    back = dequantize_w13(q, scale, 32, 32)
    assert float(((back - w13).abs() / w13.abs().amax(dim=(1, 2), keepdim=True)).max()) < 0.07


def test_reference_without_activation_quantization_is_fused_moe_on_dequantized_weights(
        monkeypatch: pytest.MonkeyPatch) -> None:
    x, w13_q, w13_s, w2_q, w2_s, weights, ids = _fp8_case(11, 80, 48, 5, 2, 32)
    monkeypatch.setattr(fp8_math, "quantize_per_group", _identity_per_group)
    ours = fused_moe_fp8_block(x, w13_q, w13_s, w2_q, w2_s, weights, ids, 32, 32)
    ref = fused_moe(x, dequantize_w13(w13_q, w13_s, 32, 32), fp8_math.dequantize_blockwise(w2_q, w2_s, 32, 32),
                    weights, ids)
    torch.testing.assert_close(ours, ref, rtol=1e-5, atol=1e-5)


def test_reference_w8a8_stays_near_the_dequantized_weights() -> None:
    x, w13_q, w13_s, w2_q, w2_s, weights, ids = _fp8_case(16, 64, 32, 4, 2, 32)
    ours = fused_moe_fp8_block(x, w13_q, w13_s, w2_q, w2_s, weights, ids, 32, 32)
    ref = fused_moe(x, dequantize_w13(w13_q, w13_s, 32, 32), fp8_math.dequantize_blockwise(w2_q, w2_s, 32, 32),
                    weights, ids)
    assert float((ours - ref).abs().max() / ref.abs().max()) < 0.1  # e4m3 activations: 3 mantissa bits


@pytest.mark.parametrize(("tokens", "hidden", "inter", "experts", "top_k", "block"), [
    (1, 64, 32, 4, 2, 32),    # one decode token
    (7, 80, 48, 6, 3, 32),    # partial K blocks, and gate/up halves ending in partial blocks of their own
    (40, 64, 64, 2, 2, 32),   # more slots than 16 per expert: the prefill row block
    (9, 32, 16, 3, 1, 16),    # one expert per row, weight one: how expert parallelism calls it
])
def test_triton_kernels_match_the_reference(tokens: int, hidden: int, inter: int, experts: int, top_k: int,
                                            block: int) -> None:
    case = [t.to(DEVICE) for t in _fp8_case(tokens, hidden, inter, experts, top_k, block, seed=tokens)]
    ours = triton_moe.fp8_fused_experts(*case, block, block)
    ref = fused_moe_fp8_block(*case, block, block)
    assert ours.shape == ref.shape and ours.dtype == ref.dtype
    assert float((ours - ref).abs().max() / ref.abs().max()) < 1e-4


def test_triton_kernels_in_bfloat16() -> None:
    x, *rest = (t.to(DEVICE) for t in _fp8_case(12, 64, 64, 4, 2, 32, seed=3))
    x = x.bfloat16()
    ours = triton_moe.fp8_fused_experts(x, *rest, 32, 32)
    ref = fused_moe_fp8_block(x, *rest, 32, 32)
    assert ours.dtype == torch.bfloat16
    # The kernel rounds each routed row's weighted output to bfloat16, the reference its unweighted one
    # (measured: 0.4% of the largest output).
    assert float((ours.float() - ref.float()).abs().max() / ref.float().abs().max()) < 1e-2


def test_op_without_fp8_tensor_cores_is_the_reference() -> None:
    case = _fp8_case(5, 64, 32, 4, 2, 32)
    assert torch.equal(triton_moe.fused_moe_fp8_block(*case, 32, 32), fused_moe_fp8_block(*case, 32, 32))


def test_registered_in_core_and_for_cuda() -> None:
    assert get_op("fused_moe_fp8_block") is not None
    registry = get_plugin_manager().registry("custom_op")
    assert registry.load("fused_moe_fp8_block", "cuda") is triton_moe.fused_moe_fp8_block
