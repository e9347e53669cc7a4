"""A workload's requests through the serving engine at several parallel layouts, one after another in one call.

    python benchmarks/parallel_throughput.py --shape qwen3-8b --layouts tp1,tp2,dp2
    python benchmarks/parallel_throughput.py --shape qwen3-30b-a3b --layouts tp1,pp2,ep2,dp2ep2

A layout is a run of ``tpN`` (tensor parallelism over N devices), ``ppN`` (N pipeline stages), ``dpN`` (N
engine copies) and ``epN`` (MoE experts split whole over N ranks: the tensor-parallel ranks, or with
``dpN`` every engine's ranks, which then step together); ``ep2`` alone is ``tp2`` with expert
parallelism, ``dp2ep2`` two engines of one device each sharing their experts. Each layout serves all of
the workload's requests at once through ``AsyncLLM`` (dummy weights, EOS ignored) after a short warm-up
and prints one JSON line: layout, devices, requests, output tokens, wall seconds, output tok/s and, once
``tp1`` has run in the same call (or ``--baseline-tok-s`` is given), the ratio to it. A layout that fails
prints a line with its error and the next one still runs; the exit status is then 1.
"""

from __future__ import annotations

import argparse
import asyncio
import dataclasses
import json
import re
import sys
import tempfile
import time
import traceback
from pathlib import Path
from typing import Any

from infercore.benchmarks.workloads import WORKLOADS, Workload
from infercore.config import InfercoreConfig
from infercore.frontend.async_llm import AsyncLLM

_TINY = {"vocab_size": 10240, "hidden_size": 64, "intermediate_size": 128, "num_hidden_layers": 2,
         "num_attention_heads": 4, "num_key_value_heads": 2, "head_dim": 16}

#: Shape name -> (the workload whose requests and model config it starts from, config overrides).
SHAPES: dict[str, tuple[str, dict[str, Any]]] = {
    "qwen3-0.6b": ("w-gpu", {}),
    "qwen3-8b": ("w-gpu-8b", {}),
    # Qwen3-30B-A3B: 48 layers of 128 experts (8 per token); 256 requests of 512 in / 256 out.
    "qwen3-30b-a3b": ("w-gpu-moe", {}),
    "tiny": ("w-gpu", _TINY),
    "tiny-moe": ("w-gpu-moe", {**_TINY, "num_experts": 8, "num_experts_per_tok": 2, "moe_intermediate_size": 32}),
}

_PART = re.compile(r"(tp|pp|dp|ep)(\d+)")


def layout_args(layout: str) -> dict[str, Any]:
    """Engine arguments of a layout such as ``tp2``, ``pp2``, ``dp2``, ``ep2`` or ``dp2ep2``."""
    parts = _PART.findall(layout)
    if not parts or "".join(k + n for k, n in parts) != layout or len({k for k, _ in parts}) != len(parts):
        raise ValueError(f"unknown layout {layout!r}: join tpN, ppN, dpN, epN (each at most once), e.g. dp2ep2")
    sizes = {kind: int(n) for kind, n in parts}
    if min(sizes.values()) < 1:
        raise ValueError(f"layout {layout!r}: sizes start at 1")
    ep = sizes.pop("ep", None)
    if ep is not None and "tp" not in sizes and "dp" not in sizes:
        sizes["tp"] = ep  # ep2 alone: two tensor-parallel ranks with the experts split between them
    args: dict[str, Any] = {}
    names = {"tp": "tensor_parallel_size", "pp": "pipeline_parallel_size", "dp": "data_parallel_size"}
    for kind, size in sizes.items():
        args[names[kind]] = size
    if ep is not None:
        ranks = sizes.get("tp", 1) * sizes.get("dp", 1)
        if ep != ranks:
            raise ValueError(f"layout {layout!r}: expert parallelism spans tp x dp = {ranks} ranks, not {ep}")
        args["enable_expert_parallel"] = True
    return args


def devices(args: dict[str, Any]) -> int:
    """Devices a layout's engine arguments occupy."""
    return (args.get("tensor_parallel_size", 1) * args.get("pipeline_parallel_size", 1)
            * args.get("data_parallel_size", 1))


def workload_of(shape: str, num_requests: int | None = None, dtype: str | None = None,
                max_model_len: int | None = None, input_len: int | None = None,
                output_len: int | None = None) -> Workload:
    """The shape's workload with the given overrides (fixed prompt/output lengths where given)."""
    name, overrides = SHAPES[shape]
    base = WORKLOADS[name]
    changes: dict[str, Any] = {"model_config": {**base.model_config, **overrides},
                               "num_requests": num_requests or base.num_requests, "dtype": dtype or base.dtype,
                               "max_model_len": max_model_len or base.max_model_len}
    if input_len:
        changes["prompt_len"] = (input_len, input_len)
    if output_len:
        changes["output_len"] = (output_len, output_len)
    return dataclasses.replace(base, **changes)


async def serve_all(llm: AsyncLLM, workload: Workload, seed: int) -> tuple[int, float]:
    """Submit every request at once; (output tokens, wall seconds)."""
    prompts, max_tokens = workload.requests(seed)
    params = workload.sampling_params(max_tokens, seed)

    async def one(i: int) -> int:
        count = 0
        async for out in llm.generate({"prompt_token_ids": prompts[i]}, params[i], f"bench-{seed}-{i}"):
            count += len(out.outputs[0].token_ids)
        return count

    started = time.perf_counter()
    counts = await asyncio.gather(*(one(i) for i in range(len(prompts))))
    return sum(counts), time.perf_counter() - started


async def run_layout(workload: Workload, folder: Path, layout: str, extra: dict[str, Any]) -> dict[str, Any]:
    """Start the layout's engine, warm it up, serve every request once; the result line's fields."""
    parallel = layout_args(layout)
    config = InfercoreConfig.from_kwargs(model=str(folder), load_format="dummy", dtype=workload.dtype,
                                         max_model_len=workload.max_model_len, skip_tokenizer_init=True,
                                         **{**workload.engine_kwargs, **parallel, **extra})
    started = time.perf_counter()
    llm = await AsyncLLM.start(config)
    startup = time.perf_counter() - started
    try:
        await serve_all(llm, dataclasses.replace(workload, num_requests=min(4, workload.num_requests)), seed=1)
        tokens, wall = await serve_all(llm, workload, seed=0)
    finally:
        await llm.shutdown()
    return {"layout": layout, "devices": devices(parallel), "requests": workload.num_requests,
            "output_tokens": tokens, "startup_s": round(startup, 1), "wall_s": round(wall, 2),
            "output_tok_s": round(tokens / wall, 1)}


def measure(shape: str, layouts: list[str], workload: Workload, extra: dict[str, Any],
            baseline_tok_s: float | None = None, max_devices: int | None = None) -> list[dict[str, Any]]:
    """Every layout in turn, each line printed as soon as it is known; a failed layout's line has ``error``,
    one needing more than ``max_devices`` devices a line with ``skipped``."""
    results = []
    with tempfile.TemporaryDirectory(prefix="infercore-parallel-") as tmp:
        folder = workload.write_model_folder(Path(tmp) / shape)
        for layout in layouts:
            line: dict[str, Any] = {"benchmark": "parallel_throughput", "shape": shape, "dtype": workload.dtype}
            needed = devices(layout_args(layout))
            if max_devices is not None and needed > max_devices:
                line |= {"layout": layout, "skipped": f"needs {needed} devices, {max_devices} here"}
                print(json.dumps(line), flush=True)
                results.append(line)
                continue
            try:
                line |= asyncio.run(run_layout(workload, folder, layout, extra))
            except Exception as exc:  # noqa: BLE001 - reported; the next layout still runs
                traceback.print_exc(file=sys.stderr)
                line |= {"layout": layout, "error": f"{type(exc).__name__}: {exc}"[:500]}
            if layout == "tp1" and "output_tok_s" in line:
                baseline_tok_s = line["output_tok_s"]
            if baseline_tok_s and "output_tok_s" in line:
                line["vs_tp1"] = round(line["output_tok_s"] / baseline_tok_s, 3)
            print(json.dumps(line), flush=True)
            results.append(line)
    return results


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--shape", choices=sorted(SHAPES), default="qwen3-8b")
    parser.add_argument("--layouts", default="tp1,tp2,dp2", help="comma-separated layouts (tpN, ppN, dpN, epN, dpNepN)")
    parser.add_argument("--num-requests", type=int, default=None)
    parser.add_argument("--input-len", type=int, default=None, help="every prompt this long (default: the workload's)")
    parser.add_argument("--output-len", type=int, default=None, help="every output this long (default: the workload's)")
    parser.add_argument("--dtype", default=None, help="override the workload's dtype (e.g. float32 on a CPU)")
    parser.add_argument("--max-model-len", type=int, default=None)
    parser.add_argument("--baseline-tok-s", type=float, default=None,
                        help="TP=1's output tok/s from another call, for the ratio when tp1 is not in --layouts")
    parser.add_argument("--max-devices", type=int, default=None,
                        help="skip (with a line saying so) layouts that need more devices than this")
    parser.add_argument("--engine-arg", action="append", default=[], metavar="NAME=JSON",
                        help="extra engine argument, e.g. --engine-arg cpu_threads=1")
    args = parser.parse_args()
    layouts = [item for item in args.layouts.split(",") if item]
    for layout in layouts:
        try:
            layout_args(layout)  # a typo fails before any engine starts
        except ValueError as exc:
            parser.error(str(exc))
    workload = workload_of(args.shape, args.num_requests, args.dtype, args.max_model_len, args.input_len,
                           args.output_len)
    extra = {k: json.loads(v) for k, v in (item.split("=", 1) for item in args.engine_arg)}
    results = measure(args.shape, layouts, workload, extra, args.baseline_tok_s, args.max_devices)
    return 1 if any("error" in line for line in results) else 0


if __name__ == "__main__":
    sys.exit(main())
