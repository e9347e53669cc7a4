"""The decode-sized LoRA paths side by side: shrink-then-expand (two launches) against the fused kernel (one
launch, ``infercore_triton.lora_fused``), at the W-GPU and 8B shapes' projections; writes the measured launch
table that ``INFERCORE_LORA_FUSED_TABLE`` makes ``lora_apply`` use.

For each workload, projection (q/k/v merged, o, gate/up merged, down), rank and token count: the largest
error of each path against the torch reference, the µs per call replayed from a CUDA graph of back-to-back
calls (``*_us``, A and B warm in L2) and after an L2 flush (``*_cold_us``, as between an engine step's
layers), for the two launches, the fused kernel at the default rule's settings and at the best settings of a
small sweep (``--sweep-workloads`` at ``--sweep-ranks`` only; the others time the default settings alone);
then behind the base GEMM (``infercore_triton.skinny_gemm.linear``, as a layer runs it): the GEMM alone
(``gemm_us``), the GEMM followed by each path (``gemm_plus_*_us``; ``fused_pdl``: the best settings
launched as a programmatic dependent of the GEMM) and what each adds (``lora_over_gemm_*_us``), with the
result of one graph replay against the reference (``err_gemm_plus_*_graph``). Every token has an adapter,
spread over ``--num-adapters`` slots. One JSON line per case, then the table::

    python benchmarks/lora_fused.py --table-out /tmp/lora_fused_table.json
    INFERCORE_LORA_FUSED_TABLE=/tmp/lora_fused_table.json python benchmarks/lora.py latency --workload w-gpu
"""

from __future__ import annotations

import argparse
import dataclasses
import functools
import json
import sys
from pathlib import Path
from typing import Any

import lora as bench  # the sibling benchmark (this folder is on sys.path as a script)
import numpy as np
import torch
import triton

from infercore.benchmarks.kernel_timing import graph_median_us
from infercore.benchmarks.workloads import WORKLOADS
from infercore.lora.target_modules import module_shapes


def projections(workload: str) -> dict[str, tuple[int, list[int]]]:
    """(input size, output slice sizes) of the workload's four wrapped linears."""
    from transformers import AutoConfig

    cfg = WORKLOADS[workload].model_config
    shapes = module_shapes(AutoConfig.for_model(**{k: v for k, v in cfg.items() if k != "architectures"}))
    return {"qkv": (shapes["q_proj"][0], [shapes["q_proj"][1], shapes["k_proj"][1], shapes["v_proj"][1]]),
            "o": (shapes["o_proj"][0], [shapes["o_proj"][1]]),
            "gate_up": (shapes["gate_proj"][0], [shapes["gate_proj"][1]] * 2),
            "down": (shapes["down_proj"][0], [shapes["down_proj"][1]])}


def candidates(k: int, rank: int, width: int) -> list[Any]:
    """Fused settings to try: the default rule's (unrolled and not), then 8 to 64 output blocks per token, each
    with an A tile of 4K elements on 4 warps and of 16K on 8 (unrolled up to 8 chunks)."""
    from infercore_triton.lora_fused import FusedSettings, default_settings, rank_block

    block_r, default = rank_block(rank), default_settings(k, rank, width)
    found = [default, dataclasses.replace(default, unroll=not default.unroll)]
    for block_n in (32, 64, 128, 256):
        if not 8 <= triton.cdiv(width, block_n) <= 64:
            continue
        for tile, warps in ((4096, 4), (16384, 8)):
            block_k = min(triton.next_power_of_2(k), max(64, tile // block_r))
            found.append(FusedSettings(block_n, block_k, warps, unroll=triton.cdiv(k, block_k) <= 8))
    return list(dict.fromkeys(found))


def _attempt(what: str, fn: Any, *args: Any) -> Any:
    """``fn(*args)``, or ``None`` (the error on stderr) where it raises: one setting that does not build or
    launch (say, a programmatic dependent launch this Triton or driver refuses) leaves the others measured."""
    try:
        return fn(*args)
    except Exception as err:  # noqa: BLE001
        print(json.dumps({"failed": what, "error": repr(err)[:300]}), file=sys.stderr, flush=True)
        return None


def _max_diff(got: torch.Tensor, ref: torch.Tensor) -> float:
    return round(float((got.float() - ref.float()).abs().max()), 5)


def _err(run: Any, base: torch.Tensor, ref: torch.Tensor) -> float:
    """The largest difference from ``ref`` of ``run`` adding into a copy of ``base``."""
    return _max_diff(run(base.clone()), ref)


def _graph_err(gemm: Any, lora: Any, ref: torch.Tensor) -> float:
    """The largest difference from ``ref`` of the GEMM and ``lora`` behind it, replayed from a graph."""
    return _max_diff(_graph_output(functools.partial(_after, gemm, lora)), ref)


def _after(gemm: Any, lora: Any) -> torch.Tensor:
    """The base GEMM's output with ``lora`` added in place, as a layer computes it."""
    return lora(gemm())


def _cold_us(fn: Any) -> float:
    return round(graph_median_us(fn, calls=10, repeats=9), 2)


def _graph_output(fn: Any) -> torch.Tensor:
    """``fn()``'s output from one replay of a CUDA graph that captured it (as a decode step runs it)."""
    fn()
    torch.cuda.synchronize()
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        got = fn()
    graph.replay()
    torch.cuda.synchronize()
    return got


def measure(workload: str, rank: int, tokens_list: list[int], num_adapters: int, sweep: bool) -> list[dict]:
    """One row per projection and token count (see the module's docstring)."""
    from infercore.lora.step_state import LoRAStepState
    from infercore.ops import lora_reference
    from infercore_triton.lora import bgmv_fused, bgmv_two_launches
    from infercore_triton.lora_fused import bucket, default_settings, fused_settings, rank_block
    from infercore_triton.skinny_gemm import linear

    device, dtype, rows = torch.device("cuda" if torch.cuda.is_available() else "cpu"), torch.bfloat16, []
    for name, (in_size, sizes) in projections(workload).items():
        width = sum(sizes)
        offsets = tuple(int(v) for v in np.cumsum((0, *sizes)))
        torch.manual_seed(0)
        a = torch.randn(num_adapters, len(sizes) * rank, in_size, device=device, dtype=dtype) * 0.05
        b = torch.randn(num_adapters, width, rank, device=device, dtype=dtype) * 0.05
        weight = torch.randn(width, in_size, device=device, dtype=dtype) * 0.02
        tried = candidates(in_size, rank, width) if sweep else [default_settings(in_size, rank, width)]
        for tokens in tokens_list:
            state = LoRAStepState(tokens, num_adapters, device, pin=True)
            state.set_step((np.arange(tokens) % num_adapters).astype(np.int32), tokens)
            step = state.step_for(tokens)
            assert step is not None
            x = torch.randn(tokens, in_size, device=device, dtype=dtype)
            base = torch.randn(tokens, width, device=device, dtype=dtype)
            out = base.clone()  # the timed calls add into it again and again
            ref = lora_reference.lora_apply(base.clone(), x, a, b, *step, offsets)
            bound = dict(x=x, lora_a=a, lora_b=b, token_slots=step.token_slots, slice_offsets=offsets)
            two = functools.partial(bgmv_two_launches, **bound)
            two_us = bench._graph_us(functools.partial(two, out))
            timed = []
            for s in tried:  # a setting that fails to build or run is left out (its error on stderr)
                fused = functools.partial(bgmv_fused, **bound, settings=s)
                us = _attempt(f"{workload} {name} {s}", bench._graph_us, functools.partial(fused, out))
                if us is not None:
                    timed.append((us, s, fused))
            default_us = timed[0][0] if timed and timed[0][1] == tried[0] else None
            default_fn = functools.partial(bgmv_fused, **bound, settings=tried[0])
            best_us, best, best_fn = min(timed, key=lambda t: t[0])
            pdl = dataclasses.replace(best, pdl=True)
            pdl_fn = functools.partial(bgmv_fused, **bound, settings=pdl)
            # after the base GEMM, as in a layer: its time alone, then with each LoRA path behind it
            gemm = functools.partial(linear, x, weight)
            gemm_ref = lora_reference.lora_apply(gemm(), x, a, b, *step, offsets)
            pairs = {"two_launch": two, "fused": best_fn}
            if _attempt(f"{workload} {name} eager {pdl}", pdl_fn, base.clone()) is not None:
                pairs["fused_pdl"] = pdl_fn
            gemm_us = bench._graph_us(gemm)
            pair_us = {k: _attempt(f"{workload} {name} {k}", bench._graph_us, functools.partial(_after, gemm, f))
                       for k, f in pairs.items()}
            pair_err = {k: _attempt(f"{workload} {name} {k} graph", _graph_err, gemm, f, gemm_ref)
                        if pair_us[k] is not None else None for k, f in pairs.items()}
            rule = fused_settings(tokens, in_size, rank, width)
            rows.append({
                "workload": workload, "layer": name, "k": in_size, "width": width, "rank": rank, "tokens": tokens,
                "two_launch_us": two_us, "fused_default_us": default_us, "fused_best_us": best_us,
                "fused_best": dataclasses.asdict(best), "fused_default": dataclasses.asdict(tried[0]),
                "candidates": len(timed), "two_launch_cold_us": _cold_us(functools.partial(two, out)),
                "fused_best_cold_us": _cold_us(functools.partial(best_fn, out)),
                "err_two_launch": _err(two, base, ref), "err_fused_default": _err(default_fn, base, ref),
                "err_fused_best": _err(best_fn, base, ref),
                "err_fused_pdl": _err(pdl_fn, base, ref) if "fused_pdl" in pairs else None,
                "fused_over_two": round(best_us / two_us, 3), "gemm_us": gemm_us,
                **{f"gemm_plus_{k}_us": v for k, v in pair_us.items()},
                **{f"lora_over_gemm_{k}_us": None if v is None else round(v - gemm_us, 2) for k, v in pair_us.items()},
                **{f"err_gemm_plus_{k}_graph": v for k, v in pair_err.items()},
                "gemm_ref_max_abs": round(float(gemm_ref.float().abs().max()), 3),
                "rule_without_table": "two_launch" if rule is None else "fused",
                "table_m": bucket(tokens), "table_rank": rank_block(rank)})
    return rows


def table_of(rows: list[dict]) -> dict[str, Any]:
    """The launch table: per measured shape, whichever of the two launches, the fused kernel's best settings
    and those launched as a programmatic dependent adds the least time behind the base GEMM (a path whose
    graph-replayed result is off the reference by more than bfloat16 rounding allows is not taken)."""
    choices = []
    for r in rows:
        tol = 0.02 + 0.01 * r["gemm_ref_max_abs"]
        ok = {k: r[f"gemm_plus_{k}_us"] for k in ("two_launch", "fused", "fused_pdl")
              if r.get(f"gemm_plus_{k}_us") is not None and r.get(f"err_gemm_plus_{k}_graph") is not None
              and r[f"err_gemm_plus_{k}_graph"] <= tol}
        pick = min(ok, key=ok.__getitem__) if ok else "two_launch"
        entry = {"m": r["table_m"], "k": r["k"], "rank": r["table_rank"], "width": r["width"],
                 **r["fused_best"], "fused": pick != "two_launch", "pdl": pick == "fused_pdl"}
        choices.append(entry)
    return {"choices": choices}


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--workloads", default="w-gpu,w-gpu-8b")
    parser.add_argument("--sweep-workloads", default="w-gpu", help="workloads whose fused settings are swept")
    parser.add_argument("--sweep-ranks", default="16", help="ranks whose fused settings are swept")
    parser.add_argument("--ranks", default="16,64")
    parser.add_argument("--tokens", default="1,8")
    parser.add_argument("--num-adapters", type=int, default=8)
    parser.add_argument("--table-out", type=Path, default=None, help="write the measured launch table here")
    args = parser.parse_args()
    swept, swept_ranks = set(args.sweep_workloads.split(",")), {int(r) for r in args.sweep_ranks.split(",")}
    rows: list[dict] = []
    table: dict[str, Any] = {"choices": []}
    for workload in args.workloads.split(","):
        for rank in (int(r) for r in args.ranks.split(",")):
            for row in measure(workload, rank, [int(t) for t in args.tokens.split(",")], args.num_adapters,
                               workload in swept and rank in swept_ranks):
                print(json.dumps(row), flush=True)
                rows.append(row)
            table = table_of(rows)
            if args.table_out is not None:  # after each group: a run cut short still leaves what it measured
                partial = args.table_out.with_suffix(".part")
                partial.write_text(json.dumps(table, indent=1))
                partial.replace(args.table_out)
    print(json.dumps({"table": str(args.table_out), "entries": len(table["choices"]),
                      "fused_entries": sum(e["fused"] for e in table["choices"])}))
    return 0


if __name__ == "__main__":
    sys.exit(main())
