"""Decode-batch GEMMs of 17-256 rows: the Triton tile GEMM's launch settings against ``F.linear`` (cuBLAS).

For each row count and projection of Qwen3-0.6B (the W-GPU model; ``--model 8b`` for Qwen3-8B), times
``F.linear`` and every candidate :class:`TileConfig` from CUDA-graph replays with L2 flushed before each call
(a decode step reads each layer's weight once), checks each against ``F.linear``, and prints one JSON line
per (shape, M) with the fastest setting and its speedup. Last, one ``tuned`` line: the entries for
``infercore_triton.tile_gemm.TUNED`` where the kernel beat cuBLAS by at least ``--min-gain``.

    python benchmarks/tile_gemm.py --rows 32 64 128 256
"""

from __future__ import annotations

import argparse
import itertools
import json

import torch
import torch.nn.functional as F

from infercore.benchmarks.kernel_timing import graph_median_us
from infercore_triton.tile_gemm import TileConfig, m_bucket, tile_gemm

MODELS = {
    "0.6b": {"qkv": (4096, 1024), "o": (1024, 2048), "gate_up": (6144, 1024), "down": (1024, 3072)},
    "8b": {"qkv": (6144, 4096), "o": (4096, 4096), "gate_up": (24576, 4096), "down": (4096, 12288)},
}


def candidates(m: int) -> list[TileConfig]:
    """Tiles no taller than twice the rows, in the shapes Hopper's wgmma runs well."""
    out = []
    for bm, bn, bk in itertools.product((64, 128), (32, 64, 128, 256), (64, 128)):
        if bm > 2 * max(m, 32) or bn * bk > 16384 or bm * bn > 16384:
            continue
        for warps, stages in ((4, 3), (4, 4), (8, 3)):
            if warps == 8 and bm * bn < 8192:
                continue
            out.append(TileConfig(bm, bn, bk, warps, stages))
    return out


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--rows", type=int, nargs="+", default=[32, 64, 128, 256])
    parser.add_argument("--model", choices=sorted(MODELS), default="0.6b")
    parser.add_argument("--min-gain", type=float, default=1.05, help="speedup over cuBLAS to list a setting")
    args = parser.parse_args()
    torch.manual_seed(0)
    tuned = {}
    for m in args.rows:
        for name, (n, k) in MODELS[args.model].items():
            x = torch.randn(m, k, device="cuda", dtype=torch.bfloat16)
            w = torch.randn(n, k, device="cuda", dtype=torch.bfloat16) * k**-0.5
            ref = F.linear(x, w).float()
            cublas = graph_median_us(lambda x=x, w=w: F.linear(x, w))
            row = {"benchmark": "tile_gemm", "shape": name, "M": m, "N": n, "K": k, "cublas_us": round(cublas, 2),
                   "cublas_TFLOPs": round(2 * m * n * k / cublas / 1e6, 1)}
            best = None
            for cfg in candidates(m):
                try:
                    err = ((tile_gemm(x, w, cfg).float() - ref).abs().max() / ref.abs().max()).item()
                    us = graph_median_us(lambda x=x, w=w, cfg=cfg: tile_gemm(x, w, cfg))
                except Exception as exc:  # noqa: BLE001 - a tile that does not fit is reported, not fatal
                    row[f"{cfg.block_m}x{cfg.block_n}x{cfg.block_k}w{cfg.num_warps}s{cfg.num_stages}"] = repr(exc)[:80]
                    continue
                if err > 1e-2:
                    row["wrong"] = row.get("wrong", 0) + 1
                    continue
                if best is None or us < best[0]:
                    best = (us, cfg)
            if best is not None:
                us, cfg = best
                row.update(best_us=round(us, 2), best=[cfg.block_m, cfg.block_n, cfg.block_k, cfg.num_warps,
                                                       cfg.num_stages], speedup=round(cublas / us, 3))
                if cublas / us >= args.min_gain:
                    tuned[f"({m_bucket(m)}, {n}, {k})"] = row["best"]
            print(json.dumps(row), flush=True)
    print(json.dumps({"tuned": tuned}), flush=True)


if __name__ == "__main__":
    main()
