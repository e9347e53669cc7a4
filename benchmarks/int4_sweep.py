"""Sweep of the W4A16 paths at Qwen3-8B's projections; writes the launch table ``int4_linear`` reads.

For M in 1, 2, 4, 8, 16, 32, 64, 128, 256, 512, 2048 rows and each projection (qkv 6144x4096, o 4096x4096,
gate_up 24576x4096, down 4096x12288) (bf16, group 128, random codes), times bf16 ``F.linear`` (cuBLAS) and the
candidate settings of each INT4 path (``infercore_triton.int4_table``: ``skinny``, ``gemv`` at one row,
``dense`` = dequantize into a bf16 scratch + cuBLAS), each replayed from CUDA graphs with L2 flushed before
every call. Every candidate's output is first checked against the float32 reference (largest error relative
to the output's largest entry below 1e-2); failing or uncompilable ones are reported and skipped. The
fastest skinny setting is then retimed over explicit K splits, with the partials summed by a second launch
or by each tile's last program (``fused_reduce``); outputs are checked again after the timed replays.

Prints one JSON line per (projection, M): bf16 µs and GB/s (2 bytes a weight), the chosen path, its settings,
µs, GB/s of the bytes it must read (4-bit codes plus scales and zeros) and speedup; then a decode step's
sum (36 layers) per M (over the projections measured), and writes the table (``--table``) with ``dense_min_m`` the smallest swept M from
which ``dense`` wins at every projection and every larger M. Point ``INFERCORE_INT4_TABLE`` at it.

    python benchmarks/int4_sweep.py --table $OUT/int4_table.json [--budget-s 90] [--rows 1,2,4]
"""

from __future__ import annotations

import argparse
import dataclasses
import itertools
import json
import time
from collections.abc import Callable
from typing import Any

import torch
import torch.nn.functional as F

from infercore.benchmarks.kernel_timing import graph_median_us
from infercore.ops.int4_math import Int4Weight, make_int4_weight
from infercore_triton.int4_gemm import dequantize_for
from infercore_triton.int4_gemv import Int4GemvConfig, w4a16_gemv
from infercore_triton.int4_skinny import Int4SkinnyConfig, w4a16_skinny
from infercore_triton.int4_table import Int4Choice, Int4Table, bucket

ROWS = (1, 2, 4, 8, 16, 32, 64, 128, 256, 512, 2048)
GROUP = 128
LAYERS = 36
BOUND = 1e-2
#: (name, N, K) of Qwen3-8B's projections.
SHAPES = (("qkv_proj", 6144, 4096), ("o_proj", 4096, 4096), ("gate_up_proj", 24576, 4096),
          ("down_proj", 4096, 12288))
S = Int4SkinnyConfig


def skinny_candidates(m: int) -> list[Int4SkinnyConfig]:
    """Settings of the packed 16-bit kernel worth timing at ``m`` rows."""
    if m <= 16:
        # Besides the usual tiles: narrower ones (more programs in flight), deeper pipelines (more bytes in flight
        # per program); at one row the kernels read well under the card's bandwidth.
        return [S(16, 128, 128, 4, 4, swap=True), S(16, 256, 128, 8, 3, swap=True), S(16, 64, 128, 4, 4, swap=True),
                S(16, 64, 128, 4, 4, swap=False), S(16, 32, 128, 4, 4, swap=True), S(16, 64, 128, 4, 6, swap=True),
                S(16, 128, 128, 4, 6, swap=True), S(16, 128, 128, 8, 4, swap=True)]
    if m <= 32:
        return [S(32, 128, 128, 4, 4, swap=True), S(32, 64, 128, 4, 4, swap=False, scale_weights=True)]
    if m <= 64:
        return [S(64, 128, 128, 4, 3, swap=True), S(64, 128, 64, 4, 3, swap=False, scale_weights=True)]
    return [S(64, 128, 64, 4, 3, swap=False, scale_weights=True), S(128, 128, 64, 8, 3, swap=False, scale_weights=True),
            S(128, 128, 128, 8, 3, swap=True, scale_weights=True)]


#: ``(block_n, words, num_warps)``: column tiles from 128 to 1,024, 4 to 16 word rows per step.
GEMV_CANDIDATES = [Int4GemvConfig(512, 8, 8), Int4GemvConfig(256, 8, 4), Int4GemvConfig(128, 8, 4),
                   Int4GemvConfig(256, 16, 4), Int4GemvConfig(512, 16, 8), Int4GemvConfig(1024, 8, 8),
                   Int4GemvConfig(256, 4, 4), Int4GemvConfig(128, 16, 2)]


def random_weight(n: int, k: int, seed: int = 0) -> Int4Weight:
    """Random codes, zero-points and scales (about ±0.1) of an ``n`` x ``k`` projection on the GPU, in bf16."""
    g = torch.Generator(device="cuda").manual_seed(seed)
    codes = torch.randint(0, 16, (k, n), generator=g, device="cuda", dtype=torch.uint8)
    zeros = torch.randint(0, 16, (k // GROUP, n), generator=g, device="cuda", dtype=torch.uint8)
    scales = (torch.rand(k // GROUP, n, generator=g, device="cuda") * 0.01 + 0.002).bfloat16()
    return make_int4_weight(codes, scales, zeros, GROUP, interleaved=True)


def int4_bytes(weight: Int4Weight) -> int:
    return sum(t.numel() * t.element_size() for t in (weight.qweight, weight.scales, weight.zeros))


def _rel_err(ours: torch.Tensor, ref: torch.Tensor) -> float:
    return float((ours.float() - ref).abs().max() / ref.abs().max().clamp(min=1e-6))


class Sweep:
    """Times candidates within a wall-clock budget; remembers the settings that failed to compile or check."""

    def __init__(self, budget_s: float) -> None:
        self.deadline = time.monotonic() + budget_s
        self.failed: dict[str, str] = {}

    def out_of_time(self) -> bool:
        return time.monotonic() > self.deadline

    def time(self, label: str, fn: Callable[[], torch.Tensor], ref: torch.Tensor) -> float | None:
        """µs per call of ``fn``, or None when it fails, is wrong or the budget is spent."""
        if label in self.failed or self.out_of_time():
            return None
        try:
            err = _rel_err(fn(), ref)
            if not err < BOUND:
                self.failed[label] = f"rel_err {err:.3g}"
                return None
            us = graph_median_us(fn, calls=10, repeats=5)
            err = _rel_err(fn(), ref)  # again after the replays (a split-K reduction left behind shows here)
            if not err < BOUND:
                self.failed[label] = f"rel_err after replays {err:.3g}"
                return None
            return us
        except Exception as exc:  # noqa: BLE001 - a setting that does not compile or launch is skipped
            self.failed[label] = f"{type(exc).__name__}: {str(exc)[:160]}"
            return None


def measure(sweep: Sweep, name: str, n: int, k: int, m: int, weight: Int4Weight, dense_nk: torch.Tensor,
            ref_weight: torch.Tensor) -> tuple[dict[str, Any], Int4Choice | None, float]:
    """One (projection, M): bf16's time, the candidates', the fastest."""
    if sweep.out_of_time():
        return {"benchmark": "int4_sweep", "shape": name, "m": m, "skipped": "budget spent"}, None, 0.0
    x = torch.randn(m, k, device="cuda", dtype=torch.bfloat16)
    ref = x.float() @ ref_weight
    bf16_us = graph_median_us(lambda: F.linear(x, dense_nk), calls=10, repeats=5)
    timed: list[tuple[float, str, dict[str, Any]]] = []

    def run(kind: str, settings: dict[str, Any], fn: Callable[[], torch.Tensor], key: str) -> None:
        us = sweep.time(key, fn, ref)
        if us is not None:
            timed.append((us, kind, settings))

    for cfg in skinny_candidates(m):
        run("skinny", dataclasses.asdict(cfg), lambda c=cfg: w4a16_skinny(x, weight, None, c), f"skinny {cfg}")
    if m == 1:
        for cfg in GEMV_CANDIDATES:
            run("gemv", dataclasses.asdict(cfg), lambda c=cfg: w4a16_gemv(x, weight, None, 264, c), f"gemv {cfg}")
    for via in ("skinny", "tile"):
        run("dense", {"via": via}, lambda v=via: torch.matmul(x, dequantize_for(weight, x, v)), f"dense {via}")
    skinny = [t for t in timed if t[1] == "skinny"]
    if skinny and m <= 256:  # more rows make tiles enough to fill the GPU
        best = S(**min(skinny, key=lambda t: t[0])[2])
        for split, fused in itertools.product((0, 2, 4, 8, 16), (False, True)):
            cfg = dataclasses.replace(best, split_k=split, fused_reduce=fused)
            if cfg != best and not (fused and split == 1):
                run("skinny", dataclasses.asdict(cfg), lambda c=cfg: w4a16_skinny(x, weight, None, c), f"skinny {cfg}")
    record: dict[str, Any] = {"benchmark": "int4_sweep", "shape": name, "n": n, "k": k, "m": m, "group": GROUP,
                              "bf16_us": round(bf16_us, 2), "bf16_gb_s": round(2 * n * k / bf16_us / 1e3, 1),
                              "candidates": len(timed)}
    if not timed:
        return {**record, "error": "no candidate ran (budget spent or all failed)"}, None, bf16_us
    us, kind, settings = min(timed, key=lambda t: t[0])
    by_kind = {kd: round(min(t[0] for t in timed if t[1] == kd), 2) for kd in {t[1] for t in timed}}
    record.update({"kernel": kind, "config": settings, "int4_us": round(us, 2),
                   "int4_gb_s": round(int4_bytes(weight) / us / 1e3, 1), "speedup_vs_bf16": round(bf16_us / us, 3),
                   "best_us_by_kernel": by_kind})
    return record, Int4Choice(kind, settings), us


def dense_threshold(choices: dict[tuple[int, int, int], Int4Choice], rows: list[int]) -> int:
    """The smallest swept M from which ``dense`` is the choice at every projection and every larger M."""
    threshold = max(rows) * 2
    for m in sorted(rows, reverse=True):
        if all(choices.get((bucket(m), n, k), Int4Choice("")).kernel == "dense" for _, n, k in SHAPES):
            threshold = m
        else:
            break
    return threshold


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--table", required=True, help="where to write the JSON launch table")
    parser.add_argument("--rows", default=",".join(map(str, ROWS)), help="comma-separated M values")
    parser.add_argument("--budget-s", type=float, default=100.0, help="stop timing candidates after this long")
    args = parser.parse_args()
    rows = [int(r) for r in args.rows.split(",")]
    sweep = Sweep(args.budget_s)
    table = Int4Table()
    step = {m: [0.0, 0.0, 0] for m in rows}
    weights = []
    for index, (name, n, k) in enumerate(SHAPES):
        weight = random_weight(n, k, seed=index)
        dense = dequantize_for(weight, weight.scales)
        weights.append((name, n, k, weight, dense.t().contiguous(), dense.float()))
        del dense
    # Rows outermost: when the budget runs out, the largest M (prefill, the dense path's) go unmeasured first.
    for m in rows:
        for name, n, k, weight, dense_nk, ref_weight in weights:
            record, choice, us = measure(sweep, name, n, k, m, weight, dense_nk, ref_weight)
            print(json.dumps(record), flush=True)
            if choice is not None:
                table.choices[(bucket(m), n, k)] = choice
                step[m][0] += LAYERS * record["bf16_us"]
                step[m][1] += LAYERS * us
                step[m][2] += 1
    table.dense_min_m = dense_threshold(table.choices, rows)
    with open(args.table, "w", encoding="utf-8") as f:
        json.dump(table.to_json(), f, indent=1)
    for m, (bf16_us, int4_us, shapes) in step.items():
        if int4_us:
            print(json.dumps({"benchmark": "int4_sweep_decode_step", "m": m, "layers": LAYERS, "projections": shapes,
                              "bf16_us": round(bf16_us, 1), "int4_us": round(int4_us, 1),
                              "speedup_vs_bf16": round(bf16_us / int4_us, 3)}), flush=True)
    print(json.dumps({"benchmark": "int4_sweep_table", "path": args.table, "dense_min_m": table.dense_min_m,
                      "entries": len(table.choices), "failed_settings": sweep.failed,
                      "out_of_time": sweep.out_of_time(), "device": torch.cuda.get_device_name()}), flush=True)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
