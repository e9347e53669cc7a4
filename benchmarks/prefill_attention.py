"""Prefill attention over the paged KV cache: the Triton kernel's launch configurations, as TFLOP/s.

Workload: one W-GPU prefill step (16 query / 8 KV heads of 128, bf16, blocks of 16 tokens):
whole prompts of random lengths in [100, 1024] until ``--tokens`` query tokens. Prints one JSON
line per configuration (block_m, block_n, warps, stages), plus torch SDPA on the same prompts
made dense, as a yardstick.
"""

from __future__ import annotations

import argparse
import functools
import itertools
import json
import sys

import torch
import torch.nn.functional as F
import triton
import triton.testing

from infercore_triton.prefill_attention import prefill_attention


def _median_us(fn) -> float:  # noqa: ANN001
    return triton.testing.do_bench(fn, warmup=25, rep=200, return_mode="median") * 1e3


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--tokens", type=int, default=16384)
    parser.add_argument("--heads", type=int, default=16)
    parser.add_argument("--kv-heads", type=int, default=8)
    parser.add_argument("--head-size", type=int, default=128)
    parser.add_argument("--block-size", type=int, default=16)
    args = parser.parse_args()
    if not torch.cuda.is_available():
        sys.exit("this benchmark needs a GPU that torch can see")
    torch.manual_seed(0)
    dtype, dev = torch.bfloat16, "cuda"
    h, kvh, d, bs = args.heads, args.kv_heads, args.head_size, args.block_size
    lengths: list[int] = []
    while sum(lengths) < args.tokens:
        lengths.append(int(torch.randint(100, 1025, ()).item()))
    lengths[-1] -= sum(lengths) - args.tokens
    n = len(lengths)
    width = triton.cdiv(max(lengths), bs)
    kv_cache = torch.randn((2, n * width + 1, bs, kvh, d), dtype=dtype, device=dev)
    block_table = (1 + torch.arange(n * width, device=dev)).view(n, width).to(torch.int32)
    seq_lens = torch.tensor(lengths, dtype=torch.int32, device=dev)
    query_start_loc = torch.zeros(n + 1, dtype=torch.int32, device=dev)
    query_start_loc[1:] = torch.cumsum(seq_lens, 0)
    q = torch.randn((args.tokens, h, d), dtype=dtype, device=dev)
    out = torch.empty_like(q)
    flops = sum(4 * h * d * length * (length + 1) / 2 for length in lengths)
    for block_m, block_n, warps, stages in itertools.product((64, 128), (32, 64, 128), (4, 8), (2, 3)):
        try:
            us = _median_us(functools.partial(prefill_attention, q, kv_cache, query_start_loc, seq_lens, block_table,
                                              d**-0.5, out, max(lengths), block_m=block_m, block_n=block_n,
                                              num_warps=warps, num_stages=stages))
        except Exception as exc:  # out of shared memory for this tile size
            print(json.dumps({"config": [block_m, block_n, warps, stages], "error": type(exc).__name__}), flush=True)
            continue
        print(json.dumps({"benchmark": "prefill_attention", "tokens": args.tokens, "prompts": n,
                          "config": [block_m, block_n, warps, stages], "us": round(us, 1),
                          "TFLOPs": round(flops / us / 1e6, 1)}), flush=True)
    k = kv_cache[0][block_table.long()].view(n, width * bs, kvh, d)
    v = kv_cache[1][block_table.long()].view(n, width * bs, kvh, d)

    def sdpa() -> None:
        for i, length in enumerate(lengths):
            qi = q[int(query_start_loc[i]): int(query_start_loc[i]) + length].transpose(0, 1).unsqueeze(0)
            F.scaled_dot_product_attention(qi, k[i, :length].transpose(0, 1).unsqueeze(0),
                                           v[i, :length].transpose(0, 1).unsqueeze(0), is_causal=True, enable_gqa=True)

    us = _median_us(sdpa)
    print(json.dumps({"benchmark": "prefill_attention", "engine": "torch sdpa, dense, one call per prompt",
                      "us": round(us, 1), "TFLOPs": round(flops / us / 1e6, 1)}), flush=True)


if __name__ == "__main__":
    main()
