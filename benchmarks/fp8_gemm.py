"""Block-scaled FP8 GEMMs (W8A8, 128 x 128 weight blocks) against bf16 ``F.linear`` (cuBLAS) at Qwen3-8B's
projections, as the engine runs them: device time from CUDA-graph replays with L2 flushed before each call.

For each projection and M in :data:`ROWS` it prints one JSON line: bf16 µs; the block GEMM alone on an
activation quantized by the kernel before it (``fp8_gemm_us``, what qkv, gate/up and down pay in the
engine), the op that quantizes its input first (``fp8_op_us``, what o_proj pays), the per-channel path
through ``torch._scaled_mm`` (``fp8_channel_us``, quantization included), FP8's speedups over bf16, the
settings used and the largest relative difference from core's W8A8 reference. The per-channel GEMM alone,
through ``_scaled_mm`` and through the Triton kernel with per-column scales, gives the switch-over written to
the table (``channel_triton_max_m``). The same block-scaled GEMM through cuBLASLt's block scaling
(``fp8_cublas_us``, :mod:`infercore_triton.fp8_block_cublas`; ``null`` with the probe's reason where this torch
refuses it) shows from which M ``INFERCORE_FP8_BLOCK_CUBLAS_MIN_M`` pays.

``--sweep`` first times every candidate setting (:func:`candidates`: 16-64-row tiles with K split for
decode batches, 128-row tiles over 8 warps and up to 5 stages for large ones) per projection and M bucket
and keeps those beating the default by 3% or more (the default otherwise); ``--write-table PATH`` writes them where
``INFERCORE_FP8_BLOCK_TABLE`` makes the kernel (and an engine started afterwards) use them. Candidates
compile in parallel processes first (``--compile-workers``), and ``--budget-s`` bounds the sweep: it goes from
the fewest rows up, every projection at a bucket before the next, and buckets not reached keep the default. (``torch._scaled_mm`` with 128 x 128 block scales in the checkpoint's own layouts
is refused on an H200 with torch 2.11, "Invalid scaling configuration": cuBLASLt wants them as
:mod:`infercore_triton.fp8_block_cublas` lays them out.)
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import os
import sys
import time
from collections.abc import Callable, Iterable
from concurrent.futures import ProcessPoolExecutor, as_completed

import torch
import torch.nn.functional as F

from infercore.benchmarks.kernel_timing import graph_median_us
from infercore.ops import fp8_math
from infercore_triton import fp8_block_configs as fbc
from infercore_triton import fp8_block_cublas
from infercore_triton import fp8_block_gemm as fbg
from infercore_triton.fp8_quant import quantize_groups
from infercore_triton.fp8_scaled_mm import fp8_linear

ROWS = (1, 2, 4, 8, 16, 32, 64, 128, 256, 512)
#: M buckets whose winning tile is also tried with 2 and 8 warps and 5 stages (batch-1 latency lives there).
REFINE_MAX_BUCKET = 32
#: Qwen3-8B's projections: (name, N, K).
SHAPES = (("qkv", 6144, 4096), ("o", 4096, 4096), ("gate_up", 24576, 4096), ("down", 4096, 12288))
BLOCK = 128
Config = fbc.BlockGemmConfig


def candidates(bucket: int) -> list[Config]:
    """The settings tried for an M bucket (tiles whose columns divide the 128-row weight blocks)."""
    if bucket <= 32:
        return [Config(bucket, tn, sk, 4, st) for tn in (16, 32, 64) for sk in (1, 2, 4, 8, 16) for st in (3, 4, 6)]
    if bucket == 64:
        return ([Config(64, tn, sk, 4, st) for tn in (32, 64, 128) for sk in (1, 2, 4) for st in (3, 4)]
                + [Config(64, 128, sk, 8, st) for sk in (1, 2) for st in (3, 4)])
    tiles = ((64, 64, 4), (64, 128, 4), (64, 128, 8), (128, 64, 8), (128, 128, 8))
    return [Config(bm, tn, sk, w, st) for bm, tn, w in tiles for sk in (1, 2) for st in (3, 4, 5)]


def _rel(out: torch.Tensor, ref: torch.Tensor) -> float:
    return float((out.float() - ref.float()).norm() / ref.float().norm().clamp_min(1e-12))


def _time(fn: Callable[[], object], repeats: int = 9) -> float:
    return graph_median_us(fn, calls=10, repeats=repeats)


def _weights(n: int, k: int) -> tuple[torch.Tensor, torch.Tensor]:
    torch.manual_seed(n * 7 + k)
    return fp8_math.quantize_blockwise(torch.randn(n, k, device="cuda") * 0.02, BLOCK, BLOCK)


def _buckets(rows: Iterable[int]) -> dict[int, int]:
    """Each M bucket of ``rows`` and the M it is swept at (its largest row count)."""
    out: dict[int, int] = {}
    for m in rows:
        out[fbc.m_bucket(m)] = max(out.get(fbc.m_bucket(m), 0), m)
    return out


def _compile_jobs(rows: list[int]) -> list[tuple[int, int, int, Config]]:
    """One (N, K, M, settings) per kernel variant the sweep compiles: shapes and M are run-time arguments
    (all of them multiples of 16, the one property Triton specializes on), the settings are not."""
    jobs: dict[tuple[int, int, bool, int, int], tuple[int, int, int, Config]] = {}
    for _, n, k in SHAPES:
        for bucket, m in _buckets(rows).items():
            for cfg in candidates(bucket):
                key = (cfg.block_m, cfg.tile_n, cfg.split_k > 1, cfg.num_warps, cfg.num_stages)
                jobs.setdefault(key, (n, k, m, cfg))
    return list(jobs.values())


def _compile(jobs: list[tuple[int, int, int, Config]]) -> int:
    """Run each (N, K, M, settings) once, so that Triton's disk cache holds its kernel (a worker process)."""
    done, weights = 0, {}
    for n, k, m, cfg in jobs:
        if (n, k) not in weights:
            weights[(n, k)] = _weights(n, k)
        wq, ws = weights[(n, k)]
        xq, xs = quantize_groups(torch.randn(m, k, device="cuda").bfloat16(), BLOCK)
        try:
            fbg.fp8_block_gemm(xq, xs, wq, ws, BLOCK, BLOCK, None, torch.bfloat16, cfg)
            done += 1
        except Exception:  # noqa: BLE001 - a setting that does not compile is skipped when timed too
            pass
    torch.cuda.synchronize()
    return done


def precompile(rows: list[int], workers: int) -> dict[str, object]:
    """Compile every candidate in ``workers`` processes (Triton compiles one kernel at a time per process)."""
    jobs = _compile_jobs(rows)
    start = time.perf_counter()
    chunks = [jobs[i::workers] for i in range(workers)]
    compiled = 0
    with ProcessPoolExecutor(max_workers=workers, mp_context=torch.multiprocessing.get_context("spawn")) as pool:
        for future in as_completed([pool.submit(_compile, chunk) for chunk in chunks if chunk]):
            compiled += future.result()
    return {"bench": "fp8_block_gemm_precompile", "jobs": len(jobs), "compiled": compiled, "workers": workers,
            "seconds": round(time.perf_counter() - start, 1)}


def _best(configs: list[Config], run: Callable[[Config], object]) -> tuple[Config | None, float]:
    timed = []
    for cfg in configs:
        try:
            timed.append((_time(lambda cfg=cfg: run(cfg), repeats=5), cfg))
        except Exception as exc:  # noqa: BLE001 - a setting that does not compile (shared memory) is skipped
            print(f"skip {cfg}: {type(exc).__name__}", file=sys.stderr)
    if not timed:
        return None, float("inf")
    us, cfg = min(timed, key=lambda t: t[0])
    return cfg, us


def _sweep_bucket(n: int, k: int, bucket: int, m: int, weights: tuple[torch.Tensor, torch.Tensor],
                  deadline: float, table: dict[tuple[int, int, int], Config]) -> dict[str, object]:
    wq, ws = weights
    sms = fbg._num_sms(wq.device)
    xq, xs = quantize_groups(torch.randn(m, k, device="cuda").bfloat16(), BLOCK)

    def gemm(cfg: Config | None) -> torch.Tensor:
        return fbg.fp8_block_gemm(xq, xs, wq, ws, BLOCK, BLOCK, None, torch.bfloat16, cfg)

    current = fbc.config_for(m, n, k, BLOCK, BLOCK, sms)
    tried = candidates(bucket)
    best, best_us = _best(tried + ([current] if current not in tried else []), gemm)
    if best is not None and bucket <= REFINE_MAX_BUCKET and time.monotonic() < deadline:
        # The latency buckets: the winner's tile with other warp counts and deeper pipelines too.
        refine = [dataclasses.replace(best, num_warps=w, num_stages=st) for w in (2, 8)
                  for st in sorted({best.num_stages, 5})]
        better, better_us = _best([c for c in refine if c not in tried], gemm)
        if better is not None and better_us < best_us:
            best, best_us = better, better_us
    default = fbc.default_config(m, n, k, BLOCK, BLOCK, sms)
    default_us = _time(lambda: gemm(default), repeats=5)
    # Every bucket swept gets an entry, the default when nothing beats it by 3%, so that the table
    # overrides the measured one of another machine.
    table[(bucket, n, k)] = best if best is not None and best_us < default_us * 0.97 else default
    return {"bucket": bucket, "m": m, "best_us": round(best_us, 2), "default_us": round(default_us, 2),
            "best": repr(best), "default": repr(default), "chosen": repr(table[(bucket, n, k)]),
            "was": repr(current)}


def sweep(rows: list[int], deadline: float,
          after_bucket: Callable[[dict[tuple[int, int, int], Config]], None] = lambda table: None,
          ) -> Iterable[dict[str, object]]:
    """Time the candidates (and the settings in use) per M bucket and projection until ``deadline``
    (``time.monotonic()``), one line per (bucket, projection); each choice (the best when it beats the default
    by 3% or more, else the default) goes into the table handed to ``after_bucket`` after each bucket. The
    buckets go from the fewest rows up, every projection at one before the next: a budget that runs out
    leaves the decode-latency buckets of every projection tuned."""
    table: dict[tuple[int, int, int], Config] = {}
    weights = {(n, k): _weights(n, k) for _, n, k in SHAPES}
    for bucket, m in sorted(_buckets(rows).items()):
        for name, n, k in SHAPES:
            if time.monotonic() > deadline:
                line: dict[str, object] = {"bucket": bucket, "skipped": "budget"}
            else:
                line = _sweep_bucket(n, k, bucket, m, weights[(n, k)], deadline, table)
            yield {"bench": "fp8_block_gemm_sweep", "shape": name, **line}
        after_bucket(table)
    del weights
    torch.cuda.empty_cache()


def _bench_shape(name: str, n: int, k: int, rows: list[int]) -> Iterable[dict[str, object]]:
    wq, ws = _weights(n, k)
    wb = (wq.float() * fp8_math.expand_blocks(ws, n, k, BLOCK, BLOCK)).bfloat16()
    wc, wcs = fp8_math.quantize_per_token(wb)
    wcs = wcs.reshape(-1)
    for m in rows:
        x = torch.randn(m, k, device="cuda").bfloat16()
        xq, xs = quantize_groups(x, BLOCK)
        cfg = fbc.config_for(m, n, k, BLOCK, BLOCK, fbg._num_sms(x.device))
        bf16_us = _time(lambda x=x: F.linear(x, wb))
        gemm_us = _time(lambda xq=xq, xs=xs: fbg.fp8_block_gemm(xq, xs, wq, ws, BLOCK, BLOCK, None, torch.bfloat16))
        op_us = _time(lambda x=x: fbg.fp8_block_linear(x, wq, ws, BLOCK, BLOCK))
        channel_us = _time(lambda x=x: fp8_linear(x, wc, wcs))
        xcq, xcs = quantize_groups(x, k)
        scaled_mm_us = _time(lambda xcq=xcq, xcs=xcs: torch._scaled_mm(
            xcq, wc.t(), scale_a=xcs, scale_b=wcs.reshape(1, -1), out_dtype=torch.bfloat16))
        channel_triton_us = _time(lambda xcq=xcq, xcs=xcs: fbg.fp8_block_gemm(
            xcq, xcs, wc, wcs, BLOCK, BLOCK, None, torch.bfloat16, per_channel=True))
        cublas_us = cublas_err = None
        if fp8_block_cublas.fits(wq, BLOCK, BLOCK, torch.bfloat16) and fp8_block_cublas.available(x.device):
            cublas_us = round(_time(lambda xq=xq, xs=xs: fp8_block_cublas.gemm(xq, xs, wq, ws)), 2)
            cublas_err = round(_rel(fp8_block_cublas.gemm(xq, xs, wq, ws), fp8_math.fp8_block_linear(
                x, wq, ws, BLOCK, BLOCK)), 5)
        out = fbg.fp8_block_linear(x, wq, ws, BLOCK, BLOCK)
        ref = fp8_math.fp8_block_linear(x, wq, ws, BLOCK, BLOCK)
        yield {"bench": "fp8_block_gemm", "shape": name, "m": m, "n": n, "k": k, "bf16_us": round(bf16_us, 2),
               "fp8_gemm_us": round(gemm_us, 2), "fp8_op_us": round(op_us, 2),
               "fp8_channel_us": round(channel_us, 2), "channel_scaled_mm_us": round(scaled_mm_us, 2),
               "channel_triton_us": round(channel_triton_us, 2), "fp8_cublas_us": cublas_us,
               "cublas_rel_err": cublas_err, "speedup_fused": round(bf16_us / gemm_us, 3),
               "speedup_op": round(bf16_us / op_us, 3), "speedup_channel": round(bf16_us / channel_us, 3),
               "fp8_tbps": round(wq.numel() / gemm_us / 1e6, 3), "bf16_tbps": round(wb.numel() * 2 / bf16_us / 1e6, 3),
               "config": repr(cfg), "rel_err": round(_rel(out, ref), 5)}


def bench(rows: list[int]) -> Iterable[dict[str, object]]:
    """One line per projection and M: bf16, the block GEMM (fused quantization), the op, the channel path."""
    for name, n, k in SHAPES:
        yield from _bench_shape(name, n, k, rows)
        torch.cuda.empty_cache()


def _emit(line: dict[str, object]) -> None:
    print(json.dumps(line), flush=True)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--sweep", action="store_true", help="tune the settings per (shape, M bucket) first")
    parser.add_argument("--rows", default=",".join(map(str, ROWS)))
    parser.add_argument("--write-table", metavar="PATH", help="write the swept table for INFERCORE_FP8_BLOCK_TABLE")
    parser.add_argument("--budget-s", type=float, default=600.0, help="stop sweeping after this many seconds")
    parser.add_argument("--compile-workers", type=int, default=min(8, os.cpu_count() or 1),
                        help="processes compiling the candidates before the sweep (0: compile as timed)")
    parser.add_argument("--no-bench", action="store_true", help="sweep (and write the table) only")
    args = parser.parse_args()
    rows = [int(r) for r in args.rows.split(",")]
    start = time.monotonic()
    if args.sweep:
        if args.compile_workers > 0:
            try:
                _emit(precompile(rows, args.compile_workers))
            except Exception as exc:  # noqa: BLE001 - the sweep then compiles as it times
                _emit({"bench": "fp8_block_gemm_precompile", "error": f"{type(exc).__name__}: {exc}"})
        swept: dict[tuple[int, int, int], Config] = {}

        def keep(table: dict[tuple[int, int, int], Config]) -> None:
            # The table so far is written after each bucket: a sweep cut short still leaves one.
            swept.update(table)
            fbc.TUNED.update(table)
            if args.write_table:
                fbc.write_table(args.write_table, {**fbc.TUNED}, device=torch.cuda.get_device_name(),
                                swept=sorted(f"{b},{n},{k}" for b, n, k in swept))

        for line in sweep(rows, start + args.budget_s, keep):
            _emit(line)
        _emit({"bench": "fp8_block_gemm_tuned", "seconds": round(time.monotonic() - start, 1),
               "table": args.write_table, "tuned": {str(key): repr(cfg) for key, cfg in sorted(swept.items())}})
    if not args.no_bench:
        lines = []
        for line in bench(rows):
            lines.append(line)
            _emit(line)
        switch = channel_switch(lines)
        if args.sweep and args.write_table:
            fbc.write_table(args.write_table, {**fbc.TUNED}, channel_triton_max_m=switch,
                            device=torch.cuda.get_device_name(), swept=sorted(f"{b},{n},{k}" for b, n, k in swept))
        _emit({"bench": "fp8_channel_switch", "channel_triton_max_m": switch, "table": args.write_table})
        _emit({"bench": "fp8_cublas_switch", "cublas_min_m": cublas_min_m(lines)})


def channel_switch(lines: list[dict[str, object]]) -> int:
    """The most rows up to which the Triton kernel on per-channel weights beats ``torch._scaled_mm`` at every
    row count (summed over the projections), 0 when it loses at the first."""
    switch = 0
    for m in sorted({int(line["m"]) for line in lines}):
        at_m = [line for line in lines if line["m"] == m]
        if sum(float(line["channel_triton_us"]) for line in at_m) > sum(float(line["channel_scaled_mm_us"])
                                                                          for line in at_m):
            break
        switch = m
    return switch


def cublas_min_m(lines: list[dict[str, object]]) -> int | None:
    """The fewest rows from which the block GEMM through cuBLASLt beats the Triton kernel at that and every larger
    row count measured (summed over the projections): where ``INFERCORE_FP8_BLOCK_CUBLAS_MIN_M`` belongs. None
    where cuBLASLt was not measured (its probe refused) or loses at the largest row count."""
    rows = sorted({int(line["m"]) for line in lines if line.get("fp8_cublas_us") is not None})
    threshold = None
    for m in reversed(rows):
        at_m = [line for line in lines if line["m"] == m and line.get("fp8_cublas_us") is not None]
        if sum(float(line["fp8_cublas_us"]) for line in at_m) >= sum(float(line["fp8_gemm_us"]) for line in at_m):
            break
        threshold = m
    return threshold


if __name__ == "__main__":
    main()
