"""The W4A16 GEMM (AWQ/GPTQ weights, group 128) against bf16 ``F.linear`` at Qwen3-8B's projections.

For M in 1, 16, 64, 256 and 2048 rows and each projection (qkv 6144x4096, o 4096x4096, gate_up
24576x4096, down 4096x12288), prints one JSON line: microseconds per call of bf16 ``F.linear``, of the
Triton kernel (``w4a16_gemm``, the launch table's settings) and of the prefill path (dequantize to bf16,
then the dense GEMM), each replayed from CUDA graphs with L2 flushed before every call
(``infercore.benchmarks.kernel_timing``); the TB/s of weight bytes each implies (4-bit codes plus scales
and zeros for INT4, 2 bytes a weight for bf16); the speedup of the op's choice over bf16; and the kernel's
and the prefill path's largest error relative to the float32 reference. The last line sums a decode
step's GEMMs (36 layers) per M.

``int4_kernel_us`` is the kernel the op picks below the prefill path: the multiply-add kernel for single
rows (``int4_gemv``), else the tensor-core one, whose time at single rows is ``int4_tensor_core_us``.
``--act-order`` gives the weights a permuted ``g_idx`` (the activations' columns are gathered first, as
the op does). ``--sweep`` also times candidate launch settings per (projection, M) and prints the fastest
as a ``tuned`` entry (for ``infercore_triton.int4_gemm.TUNED``, or the multiply-add kernel's defaults).

Run on one GPU: ``python benchmarks/int4_gemm.py [--act-order] [--sweep]``. The packed 16-bit kernel and
the launch table ``int4_linear`` dispatches by are swept by ``benchmarks/int4_sweep.py``.
"""

from __future__ import annotations

import argparse
import dataclasses
import itertools
import json
from dataclasses import dataclass

import torch
import torch.nn.functional as F

from infercore.benchmarks.kernel_timing import graph_median_us
from infercore.ops.int4_math import Int4Weight, int4_linear, make_int4_weight
from infercore_triton.int4_gemm import (
    DENSE_MIN_M,
    Int4GemmConfig,
    config_for,
    dequantize_int4,
    m_bucket,
    w4a16_gemm,
)
from infercore_triton.int4_gemv import GEMV_MAX_M, Int4GemvConfig, w4a16_gemv

ROWS = (1, 16, 64, 256, 2048)
GROUP = 128
LAYERS = 36


@dataclass(frozen=True)
class Shape:
    """One projection of Qwen3-8B: ``n`` output features by ``k`` input features."""

    name: str
    n: int
    k: int


SHAPES = (Shape("qkv_proj", (32 + 2 * 8) * 128, 4096), Shape("o_proj", 4096, 32 * 128),
          Shape("gate_up_proj", 2 * 12288, 4096), Shape("down_proj", 4096, 12288))


def random_weight(shape: Shape, act_order: bool, seed: int = 0) -> Int4Weight:
    """Random codes, zero-points and scales (about ±0.1) of ``shape`` on the GPU, in bf16."""
    g = torch.Generator(device="cuda").manual_seed(seed)
    groups = shape.k // GROUP
    codes = torch.randint(0, 16, (shape.k, shape.n), generator=g, device="cuda", dtype=torch.uint8)
    zeros = torch.randint(0, 16, (groups, shape.n), generator=g, device="cuda", dtype=torch.uint8)
    scales = (torch.rand(groups, shape.n, generator=g, device="cuda") * 0.01 + 0.002).bfloat16()
    g_idx = None
    if act_order:
        g_idx = torch.empty(shape.k, dtype=torch.int32, device="cuda")
        g_idx[torch.randperm(shape.k, generator=g, device="cuda")] = (
            torch.arange(shape.k, device="cuda") // GROUP).to(torch.int32)
    return make_int4_weight(codes, scales, zeros, GROUP, g_idx, interleaved=True)


def int4_bytes(weight: Int4Weight) -> int:
    """Bytes a call reads of the 4-bit weight: codes, scales and zeros."""
    return sum(t.numel() * t.element_size() for t in (weight.qweight, weight.scales, weight.zeros))


def _rel_err(ours: torch.Tensor, ref: torch.Tensor) -> float:
    return float((ours.float() - ref.float()).abs().max() / ref.float().abs().max().clamp(min=1e-6))


def _gathered(x: torch.Tensor, weight: Int4Weight) -> torch.Tensor:
    return x.index_select(1, weight.perm) if weight.perm is not None else x


def _gemm_candidates(m: int) -> list[Int4GemmConfig]:
    block_ms = [16] if m <= 16 else [32, 64] if m <= 64 else [64, 128]
    return [Int4GemmConfig(bm, bn, bk, num_warps=w, num_stages=st)
            for bm, bn, bk, w, st in itertools.product(block_ms, (64, 128, 256), (64, 128), (4, 8), (3, 4))]


def _gemv_candidates() -> list[Int4GemvConfig]:
    return [Int4GemvConfig(block_n=bn, words=words, num_warps=w)
            for bn, words, w in itertools.product((128, 256, 512), (4, 8, 16), (4, 8))]


def _sweep(x: torch.Tensor, weight: Int4Weight, shape: Shape, m: int) -> dict:
    """The fastest launch settings at this shape and M (the multiply-add kernel's too, for single rows)."""
    timed: list[tuple[float, str, dict]] = []
    runs = [("gemm", dataclasses.asdict(c), lambda c=c: w4a16_gemm(x, weight, config=c)) for c in _gemm_candidates(m)]
    if m <= GEMV_MAX_M:
        runs += [("gemv", dataclasses.asdict(c), lambda c=c: w4a16_gemv(x, weight, None, 264, c))
                 for c in _gemv_candidates()]
    for kind, settings, fn in runs:
        try:
            timed.append((graph_median_us(fn, repeats=5), kind, settings))
        except Exception:  # noqa: BLE001 - settings that do not compile (shared memory, registers) are skipped
            continue
    if not timed:
        return {}
    us, kind, settings = min(timed, key=lambda t: t[0])
    return {"sweep_us": round(us, 2), "tuned": {"kernel": kind, "key": [m_bucket(m), shape.n, shape.k], **settings}}


def measure(shape: Shape, m: int, act_order: bool, sweep: bool) -> dict:
    """One JSON record: the three paths' times and errors at ``shape`` and ``m`` rows."""
    weight = random_weight(shape, act_order)
    x = torch.randn(m, shape.k, device="cuda", dtype=torch.bfloat16)
    dense = dequantize_int4(weight, torch.bfloat16)  # [K, N] in perm order
    dense_nk = dense.t().contiguous()
    xg = _gathered(x, weight)
    ref = int4_linear(x, weight)
    bf16_us = graph_median_us(lambda: F.linear(xg, dense_nk))
    kernel_us = graph_median_us(lambda: w4a16_gemm(_gathered(x, weight), weight))
    # The tensor-core kernel at the rows the multiply-add kernel takes, to check the choice.
    tc = config_for(m, shape.n, shape.k)
    tensor_core_us = graph_median_us(lambda: w4a16_gemm(xg, weight, config=tc)) if m <= GEMV_MAX_M else kernel_us
    prefill_us = graph_median_us(lambda: torch.matmul(_gathered(x, weight), dequantize_int4(weight, torch.bfloat16)))
    op_us = prefill_us if m >= DENSE_MIN_M else kernel_us
    q_bytes, bf16_bytes = int4_bytes(weight), shape.n * shape.k * 2
    record = {
        "benchmark": "int4_gemm", "shape": shape.name, "n": shape.n, "k": shape.k, "m": m, "group": GROUP,
        "act_order": act_order, "config": dataclasses.asdict(config_for(m, shape.n, shape.k)),
        "bf16_us": round(bf16_us, 2), "int4_kernel_us": round(kernel_us, 2),
        "int4_tensor_core_us": round(tensor_core_us, 2), "int4_dequant_dense_us": round(prefill_us, 2),
        "op_path": "dequant+dense" if m >= DENSE_MIN_M else "gemv" if m <= GEMV_MAX_M else "kernel",
        "bf16_tb_s": round(bf16_bytes / bf16_us / 1e6, 3), "int4_kernel_tb_s": round(q_bytes / kernel_us / 1e6, 3),
        "speedup_vs_bf16": round(bf16_us / op_us, 3),
        "kernel_rel_err": _rel_err(w4a16_gemm(xg, weight), ref),
        "dequant_dense_rel_err": _rel_err(torch.matmul(xg, dense), ref),
    }
    if sweep:
        record.update(_sweep(xg, weight, shape, m))
    return record


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--act-order", action="store_true", help="weights with a permuted g_idx")
    parser.add_argument("--sweep", action="store_true", help="also time candidate launch settings")
    parser.add_argument("--rows", default=",".join(map(str, ROWS)), help="comma-separated M values")
    args = parser.parse_args()
    rows = [int(r) for r in args.rows.split(",")]
    step: dict[int, dict[str, float]] = {m: {"bf16_us": 0.0, "int4_us": 0.0} for m in rows}
    for shape in SHAPES:
        for m in rows:
            record = measure(shape, m, args.act_order, args.sweep)
            print(json.dumps(record), flush=True)
            step[m]["bf16_us"] += LAYERS * record["bf16_us"]
            step[m]["int4_us"] += LAYERS * record["bf16_us"] / record["speedup_vs_bf16"]
    for m, totals in step.items():
        print(json.dumps({"benchmark": "int4_gemm_decode_step", "m": m, "layers": LAYERS,
                          "bf16_us": round(totals["bf16_us"], 1), "int4_us": round(totals["int4_us"], 1),
                          "speedup_vs_bf16": round(totals["bf16_us"] / totals["int4_us"], 3)}), flush=True)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
