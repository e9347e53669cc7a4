"""FP8 fused MoE (``fused_moe_fp8_block``, 128 x 128 weight blocks) against the bf16 Triton ``fused_moe`` at
Qwen3-30B-A3B's shape (hidden 2048, expert intermediate 768, 128 experts, top-8), as the engine runs them:
device time from CUDA-graph replays with L2 flushed before each call (``graph_median_us``).

For each token count it prints one JSON line: bf16 µs, FP8 µs (the op as the engine calls it: hidden states
quantized, both W8A8 GEMMs, the SiLU quantizing in the same pass), the speedup, the settings used and the
relative error (Frobenius) against core's W8A8 reference.

``--sweep`` first times candidate launch settings per token bucket (row blocks by how many rows each expert
sees; for each, the gate/up GEMM's tile width, warps and stages from :data:`LAUNCHES` with the down GEMM at
its default, then the down GEMM's with the gate/up GEMM at its best), keeps those beating the default by 3%
or more, and ``--write-table PATH`` writes them where ``INFERCORE_FP8_MOE_TABLE`` makes the op (and an engine
started afterwards) use them. ``--budget-s`` bounds the sweep: buckets not reached keep the default.

    python benchmarks/fp8_moe.py --sweep --write-table /tmp/fp8_moe_table.json --budget-s 60
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import time
from collections.abc import Callable

import torch

from infercore.benchmarks.kernel_timing import graph_median_us
from infercore.layers.fused_moe import select_experts
from infercore.ops import fp8_math
from infercore.ops.moe_fp8_reference import fused_moe_fp8_block as reference
from infercore.ops.moe_fp8_reference import quantize_w13
from infercore_triton import fused_moe_fp8_configs as cfgs
from infercore_triton.fused_moe import fused_moe
from infercore_triton.fused_moe_fp8 import fp8_fused_experts
from infercore_triton.fused_moe_fp8_configs import GemmLaunch, MoeFp8Config

TOKENS = (1, 8, 32, 64, 128, 256, 512, 2048, 8192)
HIDDEN, INTER, EXPERTS, TOP_K, BLOCK = 2048, 768, 128, 8, 128
#: Each GEMM's launch candidates (tile columns, warps, stages).
LAUNCHES = (GemmLaunch(32, 4, 3), GemmLaunch(64, 4, 3), GemmLaunch(64, 4, 4), GemmLaunch(128, 4, 3),
            GemmLaunch(128, 4, 4), GemmLaunch(128, 8, 3))


def row_blocks(tokens: int) -> list[int]:
    """Row blocks worth trying when each expert sees ``tokens * TOP_K / EXPERTS`` rows on average."""
    per_expert = tokens * TOP_K / EXPERTS
    return [bm for bm, least in ((16, 0), (32, 8), (64, 24), (128, 96)) if per_expert >= least]


def _case(tokens: int) -> dict[str, torch.Tensor]:
    gen = torch.Generator(device="cuda").manual_seed(tokens)
    w13 = torch.randn(EXPERTS, 2 * INTER, HIDDEN, device="cuda", generator=gen) / HIDDEN**0.5
    w2 = torch.randn(EXPERTS, HIDDEN, INTER, device="cuda", generator=gen) / INTER**0.5
    w13_q, w13_s = quantize_w13(w13, BLOCK, BLOCK)
    w2_q, w2_s = fp8_math.quantize_blockwise(w2, BLOCK, BLOCK)
    weights, ids = select_experts(torch.randn(tokens, EXPERTS, device="cuda", generator=gen), TOP_K, True)
    return {"x": torch.randn(tokens, HIDDEN, device="cuda", generator=gen).bfloat16(), "w13": w13.bfloat16(),
            "w2": w2.bfloat16(), "w13_q": w13_q, "w13_s": w13_s, "w2_q": w2_q, "w2_s": w2_s, "weights": weights,
            "ids": ids}


def _fp8(c: dict[str, torch.Tensor], config: MoeFp8Config | None = None) -> torch.Tensor:
    return fp8_fused_experts(c["x"], c["w13_q"], c["w13_s"], c["w2_q"], c["w2_s"], c["weights"], c["ids"], BLOCK,
                             BLOCK, config=config)


def _time(fn: Callable[[], object], repeats: int = 9) -> float:
    return graph_median_us(fn, calls=10, repeats=repeats)


def _timed(configs: list[MoeFp8Config], c: dict[str, torch.Tensor], deadline: float) -> list[tuple[float, MoeFp8Config]]:
    timed = []
    for cfg in configs:
        if time.monotonic() > deadline:
            break
        try:
            timed.append((_time(lambda cfg=cfg: _fp8(c, cfg), repeats=5), cfg))
        except Exception as exc:  # noqa: BLE001 - a setting that does not compile (shared memory) is skipped
            print(f"skip {cfg}: {type(exc).__name__}: {exc}", file=sys.stderr)
    return timed


def _sweep_bucket(tokens: int, c: dict[str, torch.Tensor], default: MoeFp8Config,
                  deadline: float) -> tuple[float, MoeFp8Config] | None:
    """Per row block: the gate/up GEMM's launches with the down GEMM at its default, then the down GEMM's
    with the gate/up GEMM at its best; the fastest of all."""
    best: list[tuple[float, MoeFp8Config]] = []
    for bm in row_blocks(tokens):
        ups = _timed([MoeFp8Config(bm, launch, default.down) for launch in LAUNCHES], c, deadline)
        if not ups:
            break
        up = min(ups, key=lambda t: t[0])[1].up
        downs = _timed([MoeFp8Config(bm, up, launch) for launch in LAUNCHES], c, deadline)
        best += ups + downs
    return min(best, key=lambda t: t[0]) if best else None


def _sweep_one(tokens: int, deadline: float) -> tuple[dict[str, object], MoeFp8Config | None]:
    """One bucket's JSON line, and its settings when they beat the default by 3% or more."""
    c = _case(tokens)
    default = cfgs.default_config(tokens, TOP_K, EXPERTS, 2 * INTER, HIDDEN)
    default_us = _time(lambda: _fp8(c, default), repeats=5)
    found = _sweep_bucket(tokens, c, default, deadline)
    line: dict[str, object] = {"bench": "fp8_moe_sweep", "tokens": tokens, "default_us": round(default_us, 1)}
    if found is None:
        return line, None
    best_us, best = found
    line.update(best_us=round(best_us, 1), best=best.to_json(), kept=best_us < 0.97 * default_us)
    return line, best if best_us < 0.97 * default_us else None


def sweep(tokens_list: list[int], budget_s: float) -> tuple[dict[cfgs.TableKey, MoeFp8Config], list[dict]]:
    """The settings beating the default by 3% or more per token bucket, and one JSON line per bucket swept."""
    deadline = time.monotonic() + budget_s
    table: dict[cfgs.TableKey, MoeFp8Config] = {}
    lines: list[dict] = []
    for tokens in tokens_list:
        if time.monotonic() > deadline:
            lines.append({"bench": "fp8_moe_sweep", "tokens": tokens, "skipped": "budget spent"})
            continue
        line, kept = _sweep_one(tokens, deadline)
        if kept is not None:
            table[cfgs.table_key(tokens, TOP_K, EXPERTS, 2 * INTER, HIDDEN)] = kept
        lines.append(line)
        torch.cuda.empty_cache()
    return table, lines


def measure(tokens: int) -> dict[str, object]:
    c = _case(tokens)
    bf16_us = _time(lambda: fused_moe(c["x"], c["w13"], c["w2"], c["weights"], c["ids"]))
    fp8_us = _time(lambda: _fp8(c))
    ours = _fp8(c)
    ref = reference(c["x"], c["w13_q"], c["w13_s"], c["w2_q"], c["w2_s"], c["weights"], c["ids"], BLOCK, BLOCK)
    config = cfgs.config_for(tokens, TOP_K, EXPERTS, 2 * INTER, HIDDEN)
    return {"bench": "fp8_moe", "tokens": tokens, "bf16_us": round(bf16_us, 1), "fp8_us": round(fp8_us, 1),
            "fp8_speedup": round(bf16_us / fp8_us, 3), "config": config.to_json(),
            "rel_err_vs_reference": round(float((ours.float() - ref.float()).norm() / ref.float().norm()), 5)}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--tokens", default=",".join(map(str, TOKENS)), help="comma-separated token counts")
    parser.add_argument("--sweep", action="store_true", help="time candidate launch settings first")
    parser.add_argument("--write-table", help="write the swept settings here (read via INFERCORE_FP8_MOE_TABLE)")
    parser.add_argument("--budget-s", type=float, default=60.0, help="seconds the sweep may take")
    args = parser.parse_args()
    if not torch.cuda.is_available():
        sys.exit("this benchmark needs a GPU that torch can see")
    tokens_list = [int(t) for t in args.tokens.split(",")]
    if args.sweep:
        table, lines = sweep(tokens_list, args.budget_s)
        for line in lines:
            print(json.dumps(line), flush=True)
        if args.write_table:
            cfgs.write_table(args.write_table, table)
            os.environ[cfgs.TABLE_ENV] = args.write_table
            cfgs.load_table.cache_clear()
            print(json.dumps({"bench": "fp8_moe_table", "path": args.write_table, "entries": len(table)}), flush=True)
    for tokens in tokens_list:
        print(json.dumps(measure(tokens)), flush=True)
        torch.cuda.empty_cache()


if __name__ == "__main__":
    main()
