"""Skinny GEMMs of decode batches: the Triton kernel against ``F.linear`` (cuBLAS), as weight bytes per second.

For M in 1, 2, 4, 8, 16 rows and the projections of Qwen3-0.6B (the W-GPU model) and Qwen3-8B, prints
one JSON line per (shape, M): microseconds per call from ``triton.testing.do_bench`` (L2 flushed before
each call) and from a CUDA graph of 28 back-to-back calls (how decode runs: one call per layer, each on
its own weight), the TB/s of weight bytes those imply, the launch settings used and the kernel's
largest relative difference from ``F.linear``. Last, one ``decode_step_gemms`` line per model and M:
the graph times summed over one decode step's calls (each projection once per layer, the LM head once).

``--sweep`` first times candidate settings per (shape, M) in the CUDA graph, in two rounds (tiles, then
K split, warps and prefetch around the best tile), and reports the fastest with a ``tuned`` entry
ready for ``infercore_triton.skinny_gemm.TUNED``. The tiles depend only on the row bucket, so most
variants compile once and serve every shape. ``--write-table PATH`` (with ``--sweep``) writes the launch
table ``INFERCORE_SKINNY_TABLE`` reads (:mod:`infercore_triton.skinny_table`): per (row bucket, N, K), the
kernel with its fastest settings where that beats cuBLAS in the graph by ``--margin``, else cuBLAS.

    python benchmarks/skinny_gemm.py --sweep --model qwen3-8b --rows 1 2 4 --write-table skinny_table.json
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import math
import sys
import time
from collections.abc import Callable
from dataclasses import dataclass

import torch
import torch.nn.functional as F
import triton
import triton.testing

from infercore_triton.skinny_gemm import (
    ELEMENTWISE_MAX_M,
    SkinnyConfig,
    config_for,
    m_bucket,
    skinny_gemm,
    split_to_fill,
)
from infercore_triton.skinny_table import SkinnyChoice, SkinnyTable

ROWS = (1, 2, 4, 8, 16)
#: Layers per decode step of both models' graphs (Qwen3-8B has 36; 28 back-to-back calls suffice).
GRAPH_CALLS = 28
#: Most products ``M_PAD * BLOCK_N * BLOCK_K`` of an elementwise candidate's tile (at 8 warps, 64 a thread).
MAX_ELEMENTWISE_TILE = 16384


@dataclass(frozen=True)
class Shape:
    """One projection: ``N`` output features by ``K`` input features."""

    model: str
    name: str
    n: int
    k: int
    #: Calls per decode step: one per layer, one for the LM head.
    per_step: int = 1

    def weight_bytes(self, dtype: torch.dtype = torch.bfloat16) -> int:
        """Bytes of the [N, K] weight, which every call reads once."""
        return self.n * self.k * torch.empty((), dtype=dtype).element_size()


def _projections(model: str, layers: int, hidden: int, intermediate: int, heads: int, kv_heads: int, head: int,
                 vocab: int) -> list[Shape]:
    return [Shape(model, "qkv_proj", (heads + 2 * kv_heads) * head, hidden, layers),
            Shape(model, "o_proj", hidden, heads * head, layers),
            Shape(model, "gate_up_proj", 2 * intermediate, hidden, layers),
            Shape(model, "down_proj", hidden, intermediate, layers),
            Shape(model, "lm_head", vocab, hidden)]


SHAPES = (_projections("qwen3-0.6b", 28, 1024, 3072, 16, 8, 128, 151936)
          + _projections("qwen3-8b", 36, 4096, 12288, 32, 8, 128, 151936))


def step_summaries(records: list[dict]) -> list[dict]:
    """Per model and M, the GEMM time of one decode step in CUDA graphs (every projection times its
    calls per step), Triton's against ``F.linear``'s; models missing a shape are left out."""
    per_step = {(s.model, s.name): s.per_step for s in SHAPES}
    names = {s.model: {t.name for t in SHAPES if t.model == s.model} for s in SHAPES}
    groups: dict[tuple[str, int], list[dict]] = {}
    for record in records:
        groups.setdefault((record["model"], record["m"]), []).append(record)
    summaries = []
    for (model, m), group in groups.items():
        if {r["shape"] for r in group} != names[model]:
            continue
        step = {key: sum(r[key] * per_step[(model, r["shape"])] for r in group)
                for key in ("triton_graph_us", "torch_graph_us")}
        summaries.append({"summary": "decode_step_gemms", "model": model, "m": m,
                          **{key: round(us, 1) for key, us in step.items()},
                          "saved_us": round(step["torch_graph_us"] - step["triton_graph_us"], 1)})
    return summaries


def weight_copies(weight_bytes: int, l2_bytes: int) -> int:
    """How many distinct weights the graph cycles through so that no call finds its weight in L2:
    at least eight L2s' worth of bytes, at most one per call, and never fewer than two."""
    return max(2, min(GRAPH_CALLS, math.ceil(8 * l2_bytes / weight_bytes)))


#: Elementwise candidates as (block_n, block_k): narrow tiles for N of about a thousand, wide ones for
#: large N; those over :data:`MAX_ELEMENTWISE_TILE` products at a row bucket are left out.
ELEMENTWISE_TILES = ((1, 1024), (2, 512), (2, 1024), (4, 512), (4, 1024), (8, 256), (8, 512), (8, 1024),
                     (16, 256), (16, 512), (32, 256))
#: ``tl.dot`` candidates as (block_n, block_k, num_warps, num_stages).
DOT_TILES = ((16, 128, 4, 4), (16, 256, 4, 3), (32, 128, 4, 4), (32, 256, 8, 3))


def sweep_configs(m: int, shape: Shape, num_sms: int = 132) -> list[SkinnyConfig]:
    """First-round candidates for row bucket ``m`` on ``shape``: elementwise tiles up to 8 rows, ``tl.dot``
    tiles from 4 rows up, each with K split just enough to fill the GPU. A dozen or fewer per bucket,
    shared by every shape (each compiles once, ~0.5 s)."""
    bucket = m_bucket(m)
    candidates: list[SkinnyConfig] = []
    if bucket <= 8:
        for block_n, block_k in ELEMENTWISE_TILES:
            products = bucket * block_n * block_k
            if products <= MAX_ELEMENTWISE_TILE:
                # 64 float32 products a thread (a thread holds its share of the tile in registers).
                warps = min(8, max(4, products // 2048))
                split = split_to_fill(shape.n, shape.k, block_n, block_k, num_sms)
                candidates.append(SkinnyConfig(block_n, block_k, warps, 3, split, dot=False))
    if bucket >= ELEMENTWISE_MAX_M:
        for block_n, block_k, warps, stages in DOT_TILES:
            split = split_to_fill(shape.n, shape.k, block_n, block_k, num_sms)
            candidates.append(SkinnyConfig(block_n, block_k, warps, stages, split, dot=True))
    return candidates


def refinements(best: SkinnyConfig, shape: Shape) -> list[SkinnyConfig]:
    """Second-round candidates around the first round's best: half and twice its K split (while each
    split keeps a whole ``block_k`` chunk), then without prefetching (elementwise; its warps follow from
    the tile) or with the other warp count (``tl.dot``)."""
    variants = [dataclasses.replace(best, split_k=split) for split in (best.split_k // 2, best.split_k * 2)
                if split >= 1 and shape.k >= split * best.block_k]
    if best.dot:
        variants.append(dataclasses.replace(best, num_warps=8 if best.num_warps == 4 else 4))
    else:
        variants.append(dataclasses.replace(best, prefetch=False))
    return variants


def tb_per_s(weight_bytes: int, us: float) -> float:
    """Terabytes of weight read per second at ``us`` microseconds per call."""
    return weight_bytes / us / 1e6


def graph_us(calls: list[Callable[[], object]], budget_s: float = 0.05) -> float:
    """Microseconds per call of ``calls`` captured back to back in one CUDA graph: the median of as many
    replays (3 to 20) as fit in ``budget_s`` after warm-up."""
    stream = torch.cuda.Stream()
    stream.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(stream):
        for call in calls:
            call()
    torch.cuda.current_stream().wait_stream(stream)
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        for call in calls:
            call()
    graph.replay()
    torch.cuda.synchronize()
    first = time.perf_counter()
    graph.replay()
    torch.cuda.synchronize()
    reps = max(3, min(20, int(budget_s / (time.perf_counter() - first))))
    times = []
    for _ in range(reps):
        start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        start.record()
        graph.replay()
        end.record()
        end.synchronize()
        times.append(start.elapsed_time(end) * 1e3 / len(calls))
    return sorted(times)[len(times) // 2]


def bench_us(fn: Callable[[], object]) -> float:
    """Median microseconds of one call, L2 flushed before each (``triton.testing.do_bench``)."""
    return triton.testing.do_bench(fn, warmup=5, rep=25, return_mode="median") * 1e3


def _in_graph(x: torch.Tensor, weights: list[torch.Tensor], gemm: Callable[..., torch.Tensor]) -> float:
    return graph_us([lambda w=weights[i % len(weights)]: gemm(x, w) for i in range(GRAPH_CALLS)])


def _time_each(x: torch.Tensor, weights: list[torch.Tensor], shape: Shape,
               configs: list[SkinnyConfig]) -> list[tuple[float, SkinnyConfig]]:
    timed = []
    for config in configs:
        try:
            timed.append((_in_graph(x, weights, lambda a, w, c=config: skinny_gemm(a, w, config=c)), config))
        except Exception as error:  # noqa: BLE001 - a setting the GPU cannot run is skipped, not fatal
            print(f"# {shape.name} M={x.shape[0]} {config}: {type(error).__name__}", file=sys.stderr)
    return timed


def _sweep(x: torch.Tensor, weights: list[torch.Tensor], shape: Shape, num_sms: int) -> SkinnyConfig | None:
    timed = _time_each(x, weights, shape, sweep_configs(x.shape[0], shape, num_sms))
    if not timed:
        return None
    timed += _time_each(x, weights, shape, refinements(min(timed, key=lambda t: t[0])[1], shape))
    return min(timed, key=lambda t: t[0])[1]


def run_shape(shape: Shape, m: int, weights: list[torch.Tensor], sweep: bool, num_sms: int) -> dict:
    """One JSON record: the kernel (default or swept settings) against ``F.linear`` on ``shape`` at ``m`` rows."""
    x = torch.randn(m, shape.k, device=weights[0].device, dtype=weights[0].dtype)
    default = config_for(m, shape.n, shape.k, num_sms)
    best = (_sweep(x, weights, shape, num_sms) if sweep else None) or default
    w = weights[0]
    ref = F.linear(x.float(), w.float())
    error = float((skinny_gemm(x, w, config=best).float() - ref).abs().max() / ref.abs().max())
    timings = {
        "triton_us": bench_us(lambda: skinny_gemm(x, w, config=best)),
        "torch_us": bench_us(lambda: F.linear(x, w)),
        "triton_graph_us": _in_graph(x, weights, lambda a, b: skinny_gemm(a, b, config=best)),
        "torch_graph_us": _in_graph(x, weights, F.linear),
    }
    if sweep and best != default:
        timings["default_graph_us"] = _in_graph(x, weights, lambda a, b: skinny_gemm(a, b, config=default))
    nbytes = shape.weight_bytes(w.dtype)
    record = {"model": shape.model, "shape": shape.name, "n": shape.n, "k": shape.k, "m": m,
              "weight_mb": round(nbytes / 2**20, 2), **{key: round(us, 2) for key, us in timings.items()}}
    record.update({key.replace("_us", "_tb_s"): round(tb_per_s(nbytes, us), 3) for key, us in timings.items()})
    record["graph_speedup"] = round(timings["torch_graph_us"] / timings["triton_graph_us"], 3)
    record["max_rel_err"] = float(f"{error:.3g}")
    record["config"] = dataclasses.asdict(best)
    record["tuned"] = [[m_bucket(m), shape.n, shape.k], dataclasses.asdict(best)]
    return record


def table_choices(records: list[dict], margin: float) -> SkinnyTable:
    """The launch table of swept ``records``: the kernel (with its settings) where its graph time is at most
    ``1 - margin`` of cuBLAS's, else cuBLAS."""
    table = SkinnyTable()
    for record in records:
        faster = record["triton_graph_us"] <= (1.0 - margin) * record["torch_graph_us"]
        table.choices[(m_bucket(record["m"]), record["n"], record["k"])] = SkinnyChoice(
            "skinny" if faster else "cublas", record["config"] if faster else {})
    return table


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--sweep", action="store_true", help="time candidate settings per shape and M first")
    parser.add_argument("--write-table", default=None, help="with --sweep: write the launch table here (JSON)")
    parser.add_argument("--margin", type=float, default=0.03,
                        help="the kernel's least advantage over cuBLAS for the table to choose it")
    parser.add_argument("--rows", type=int, nargs="+", default=list(ROWS), help="values of M (1 to 16)")
    parser.add_argument("--model", choices=sorted({s.model for s in SHAPES}), default=None,
                        help="only this model's shapes")
    args = parser.parse_args()
    if not torch.cuda.is_available():
        sys.exit("this benchmark needs a GPU that torch can see")
    started = time.perf_counter()
    torch.manual_seed(0)
    props = torch.cuda.get_device_properties(0)
    records = []
    for shape in SHAPES:
        if args.model and shape.model != args.model:
            continue
        copies = weight_copies(shape.weight_bytes(), props.L2_cache_size)
        weights = [torch.randn(shape.n, shape.k, device="cuda", dtype=torch.bfloat16) * shape.k**-0.5
                   for _ in range(copies)]
        for m in args.rows:
            records.append(run_shape(shape, m, weights, args.sweep, props.multi_processor_count))
            print(json.dumps(records[-1]), flush=True)
        del weights
        torch.cuda.empty_cache()
    for summary in step_summaries(records):
        print(json.dumps(summary))
    if args.write_table and args.sweep:
        table = table_choices(records, args.margin)
        with open(args.write_table, "w", encoding="utf-8") as f:
            json.dump(table.to_json(), f, indent=1)
        print(json.dumps({"table": args.write_table, "skinny": sum(c.kernel == "skinny" for c in table.choices.values()),
                          "cublas": sum(c.kernel == "cublas" for c in table.choices.values())}), flush=True)
    print(f"# {props.name}, torch {torch.__version__}, triton {triton.__version__}, "
          f"{time.perf_counter() - started:.1f} s", file=sys.stderr)


if __name__ == "__main__":
    main()
