"""Block-scaled FP8 GEMMs (W8A8, 128 x 128 weight blocks) against bf16 ``F.linear`` (cuBLAS) at Qwen3-8B's
projections, as the engine runs them: device time from CUDA-graph replays with L2 flushed before each call.

For each projection and M in :data:`ROWS` it prints one JSON line: bf16 µs, the FP8 op's µs (activation
quantization plus the GEMM, in the engine's settings), the GEMM alone, the TB/s of weight bytes, FP8's
speedup over bf16, the settings used and the largest relative difference from core's W8A8 reference.
``--sweep`` first times candidate settings per (shape, M) in two rounds (tiles, then K split, warps and
stages around the best tile) and prints ``tuned`` entries ready for ``infercore_triton.fp8_block_gemm.TUNED``;
the timed lines then use them. (``torch._scaled_mm`` with 128 x 128 block scales is refused on an H200 with torch 2.11: "Invalid scaling
configuration".)
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import sys
from collections.abc import Callable

import torch
import torch.nn.functional as F

from infercore.benchmarks.kernel_timing import graph_median_us
from infercore.ops import fp8_math
from infercore_triton import fp8_block_gemm as fbg
from infercore_triton.fp8_quant import quantize_groups

ROWS = (1, 2, 4, 8, 16, 32, 64, 128, 256)
#: Qwen3-8B's projections: (name, N, K).
SHAPES = (("qkv", 6144, 4096), ("o", 4096, 4096), ("gate_up", 24576, 4096), ("down", 4096, 12288))
BLOCK = 128


def _rel(out: torch.Tensor, ref: torch.Tensor) -> float:
    return float((out.float() - ref.float()).norm() / ref.float().norm().clamp_min(1e-12))


def _time(fn: Callable[[], object]) -> float:
    return graph_median_us(fn, calls=10, repeats=9)


def _candidates_round1(m: int) -> list[fbg.BlockGemmConfig]:
    block_ms = [bm for bm in (16, 32, 64, 128) if bm <= max(16, fbg.m_bucket(m))]
    warps = (4, 8) if m >= 64 else (4,)
    return [fbg.BlockGemmConfig(block_m=bm, tile_n=tn, num_warps=w)
            for bm in block_ms for tn in (32, 64, 128) for w in warps]


def _candidates_round2(best: fbg.BlockGemmConfig) -> list[fbg.BlockGemmConfig]:
    return [dataclasses.replace(best, split_k=s, num_stages=st) for s in (1, 2, 4, 8, 16) for st in (3, 4, 5)]


def _best(configs: list[fbg.BlockGemmConfig], run: Callable[[fbg.BlockGemmConfig], object]
          ) -> tuple[fbg.BlockGemmConfig, float]:
    timed = []
    for cfg in configs:
        try:
            timed.append((_time(lambda cfg=cfg: run(cfg)), cfg))
        except Exception as exc:  # a setting that does not compile (shared memory) is skipped
            print(f"skip {cfg}: {type(exc).__name__}", file=sys.stderr)
    us, cfg = min(timed, key=lambda t: t[0])
    return cfg, us


def _bench_shape(name: str, n: int, k: int, rows: list[int], sweep: bool, tuned: dict[str, str]) -> None:
    w = torch.randn(n, k, device="cuda") * 0.02
    wq, ws = fp8_math.quantize_blockwise(w, BLOCK, BLOCK)
    wb = w.bfloat16()
    del w
    for m in rows:
        x = torch.randn(m, k, device="cuda").bfloat16()
        xq, xs = quantize_groups(x, BLOCK)

        def gemm(cfg: fbg.BlockGemmConfig | None, xq: torch.Tensor = xq, xs: torch.Tensor = xs) -> torch.Tensor:
            return fbg.fp8_block_gemm(xq, xs, wq, ws, BLOCK, BLOCK, None, torch.bfloat16, cfg)

        line: dict[str, object] = {"bench": "fp8_block_gemm", "shape": name, "m": m, "n": n, "k": k}
        if sweep:
            best, _ = _best(_candidates_round1(m), gemm)
            best, best_us = _best(_candidates_round2(best), gemm)
            default_us = _time(lambda: gemm(None))
            if best_us < default_us * 0.97:
                fbg.TUNED[(fbg.m_bucket(m), n, k)] = best
                tuned[f"({fbg.m_bucket(m)}, {n}, {k})"] = repr(best)
            line["sweep"] = {"best_us": round(best_us, 2), "default_us": round(default_us, 2), "best": repr(best)}
        cfg = fbg.config_for(m, n, k, BLOCK, BLOCK)
        bf16_us = _time(lambda x=x: F.linear(x, wb))
        op_us = _time(lambda x=x: fbg.fp8_block_linear(x, wq, ws, BLOCK, BLOCK))
        gemm_us = _time(lambda: gemm(None))
        out = fbg.fp8_block_linear(x, wq, ws, BLOCK, BLOCK)
        ref = fp8_math.fp8_block_linear(x, wq, ws, BLOCK, BLOCK)
        line.update(bf16_us=round(bf16_us, 2), fp8_op_us=round(op_us, 2), fp8_gemm_us=round(gemm_us, 2),
                    fp8_tbps=round(wq.numel() / op_us / 1e6, 3), bf16_tbps=round(wb.numel() * 2 / bf16_us / 1e6, 3),
                    speedup=round(bf16_us / op_us, 3), config=repr(cfg), rel_err=round(_rel(out, ref), 5))
        print(json.dumps(line), flush=True)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--sweep", action="store_true", help="tune the settings per (shape, M) first")
    parser.add_argument("--rows", default=",".join(map(str, ROWS)))
    args = parser.parse_args()
    rows = [int(r) for r in args.rows.split(",")]
    torch.manual_seed(0)
    tuned: dict[str, str] = {}
    for name, n, k in SHAPES:
        _bench_shape(name, n, k, rows, args.sweep, tuned)
        torch.cuda.empty_cache()
    if args.sweep:
        print(json.dumps({"bench": "fp8_block_gemm_tuned", "tuned": tuned}), flush=True)


if __name__ == "__main__":
    main()
