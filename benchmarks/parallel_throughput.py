"""W-GPU's requests through the serving engine at several parallel layouts, one after another in one call.

    python benchmarks/parallel_throughput.py --shape qwen3-8b --layouts tp1,tp2,dp2

Each layout (``tpN`` = tensor parallelism over N devices, ``dpN`` = N engine copies) serves all of
W-GPU's requests at once through ``AsyncLLM`` (dummy weights, EOS ignored) after a short warm-up, and
prints one JSON line: layout, requests, output tokens, wall seconds and output tok/s.
"""

from __future__ import annotations

import argparse
import asyncio
import dataclasses
import json
import tempfile
import time
from pathlib import Path
from typing import Any

from infercore.benchmarks.workloads import WORKLOADS, Workload
from infercore.config import InfercoreConfig
from infercore.frontend.async_llm import AsyncLLM

#: Model shapes besides W-GPU's own (Qwen3-0.6B).
SHAPES: dict[str, dict[str, Any]] = {
    "qwen3-0.6b": {},
    "qwen3-8b": {"hidden_size": 4096, "intermediate_size": 12288, "num_hidden_layers": 36,
                 "num_attention_heads": 32, "num_key_value_heads": 8, "tie_word_embeddings": False},
    "tiny": {"vocab_size": 10240, "hidden_size": 64, "intermediate_size": 128, "num_hidden_layers": 2,
             "num_attention_heads": 4, "num_key_value_heads": 2, "head_dim": 16},
}


def layout_args(layout: str) -> dict[str, int]:
    """Engine arguments of ``tpN`` / ``dpN``."""
    kind, size = layout[:2], int(layout[2:])
    if kind == "tp":
        return {"tensor_parallel_size": size}
    if kind == "dp":
        return {"data_parallel_size": size}
    raise ValueError(f"unknown layout {layout!r}; use tpN or dpN")


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
    config = InfercoreConfig.from_kwargs(model=str(folder), load_format="dummy", dtype=workload.dtype,
                                         max_model_len=workload.max_model_len, skip_tokenizer_init=True,
                                         **workload.engine_kwargs, **layout_args(layout), **extra)
    llm = await AsyncLLM.start(config)
    try:
        await serve_all(llm, dataclasses.replace(workload, num_requests=4), seed=1)  # warm-up
        tokens, wall = await serve_all(llm, workload, seed=0)
    finally:
        await llm.shutdown()
    return {"layout": layout, "requests": workload.num_requests, "output_tokens": tokens,
            "wall_s": round(wall, 2), "output_tok_s": round(tokens / wall, 1)}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--shape", choices=sorted(SHAPES), default="qwen3-8b")
    parser.add_argument("--layouts", default="tp1,tp2,dp2", help="comma-separated tpN / dpN")
    parser.add_argument("--num-requests", type=int, default=None)
    parser.add_argument("--dtype", default=None, help="override the workload's dtype (e.g. float32 on a CPU)")
    parser.add_argument("--max-model-len", type=int, default=None)
    parser.add_argument("--engine-arg", action="append", default=[], metavar="NAME=JSON",
                        help="extra engine argument, e.g. --engine-arg cpu_threads=1")
    args = parser.parse_args()
    base = WORKLOADS["w-gpu"]
    workload = dataclasses.replace(base, model_config={**base.model_config, **SHAPES[args.shape]},
                                   num_requests=args.num_requests or base.num_requests,
                                   dtype=args.dtype or base.dtype, max_model_len=args.max_model_len or base.max_model_len)
    extra = {k: json.loads(v) for k, v in (item.split("=", 1) for item in args.engine_arg)}
    with tempfile.TemporaryDirectory(prefix="infercore-parallel-") as tmp:
        folder = workload.write_model_folder(Path(tmp) / args.shape)
        for layout in args.layouts.split(","):
            result = asyncio.run(run_layout(workload, folder, layout, extra))
            print(json.dumps({"shape": args.shape, "dtype": workload.dtype, **result}), flush=True)


if __name__ == "__main__":
    main()
