"""Fused MoE at Qwen3-30B-A3B's shape: the Triton kernel against the torch reference, as TFLOP/s and GB/s.

Prints one JSON line per token count (default: 256 decode tokens, and 8,192 prefill tokens). Shape:
hidden 2048, expert intermediate 768, 128 experts, top-8, bf16, router weights from a random
softmax. FLOPs count the three expert GEMMs of every routed token (2 * 3 * H * I per slot); bytes
count the weights of the experts some token used, once, plus the activations read and written.
"""

from __future__ import annotations

import argparse
import json
import platform
import sys

import torch
import triton.testing

from infercore.layers.fused_moe import select_experts
from infercore.ops.moe_reference import fused_moe as reference_fused_moe
from infercore_triton.fused_moe import fused_moe

H200_BF16_DENSE_FLOPS = 989e12
H200_COPY_BYTES_PER_S = 4.3e12


def _median_ms(fn) -> float:  # noqa: ANN001
    return triton.testing.do_bench(fn, warmup=25, rep=200, return_mode="median")


def measure(tokens: int, hidden: int, inter: int, experts: int, top_k: int, with_reference: bool) -> dict:
    """Time both implementations on one batch of ``tokens`` tokens and check they agree."""
    dev, dtype = "cuda", torch.bfloat16
    gen = torch.Generator(device=dev).manual_seed(tokens)
    x = torch.randn(tokens, hidden, device=dev, dtype=dtype, generator=gen)
    w13 = (torch.randn(experts, 2 * inter, hidden, device=dev, generator=gen) / hidden**0.5).to(dtype)
    w2 = (torch.randn(experts, hidden, inter, device=dev, generator=gen) / inter**0.5).to(dtype)
    weights, ids = select_experts(torch.randn(tokens, experts, device=dev, generator=gen), top_k, True)
    ours = fused_moe(x, w13, w2, weights, ids)
    ref = reference_fused_moe(x, w13, w2, weights, ids)
    rel_err = float((ours.float() - ref.float()).norm() / ref.float().norm())
    triton_ms = _median_ms(lambda: fused_moe(x, w13, w2, weights, ids))
    used = int(torch.unique(ids).numel())
    flops = 2 * 3 * hidden * inter * tokens * top_k
    weight_bytes = used * 3 * hidden * inter * w13.element_size()
    act_bytes = tokens * top_k * (hidden + 3 * inter + hidden) * x.element_size() + 2 * tokens * hidden * 2
    result = {
        "tokens": tokens, "experts_used": used, "triton_ms": round(triton_ms, 4),
        "triton_tflop_s": round(flops / triton_ms / 1e9, 1),
        "triton_gb_s": round((weight_bytes + act_bytes) / triton_ms / 1e6, 1),
        "fraction_of_bf16_compute": round(flops / triton_ms / 1e-3 / H200_BF16_DENSE_FLOPS, 3),
        "fraction_of_copy_bandwidth": round((weight_bytes + act_bytes) / triton_ms / 1e-3 / H200_COPY_BYTES_PER_S, 3),
        "rel_err_vs_reference": rel_err,
    }
    if with_reference:
        ref_ms = _median_ms(lambda: reference_fused_moe(x, w13, w2, weights, ids))
        result.update(reference_ms=round(ref_ms, 4), speedup_over_reference=round(ref_ms / triton_ms, 2))
    return result


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--tokens", default="256,8192", help="comma-separated token counts")
    parser.add_argument("--hidden", type=int, default=2048)
    parser.add_argument("--inter", type=int, default=768, help="expert intermediate size (moe_intermediate_size)")
    parser.add_argument("--experts", type=int, default=128)
    parser.add_argument("--top-k", type=int, default=8)
    parser.add_argument("--no-reference", action="store_true", help="skip timing the torch reference")
    args = parser.parse_args()
    if not torch.cuda.is_available():
        sys.exit("this benchmark needs a GPU that torch can see")
    common = {"benchmark": "fused_moe", "shape": f"H{args.hidden} I{args.inter} E{args.experts} top{args.top_k} bf16",
              "device": torch.cuda.get_device_name(0), "torch": torch.__version__, "triton": triton.__version__,
              "python": platform.python_version()}
    for tokens in (int(t) for t in args.tokens.split(",")):
        result = measure(tokens, args.hidden, args.inter, args.experts, args.top_k, not args.no_reference)
        print(json.dumps({**common, **result}), flush=True)


if __name__ == "__main__":
    main()
