"""KV cache groups against one block table, for a model of sliding layers beside global ones (Gemma 3's
pattern), in the same KV memory and the same process.

A random-weight Gemma 3-shaped model (5 sliding layers to 1 global by default) serves long requests with
a KV cache budget too small for all of them at once under one block table. Prints one JSON line per
setting: output tok/s, preemptions, the most requests running in one step, and each group's pool size,
then a line with the ratio.

    python benchmarks/hybrid_kv.py                       # CPU, tiny shapes, about a minute
    python benchmarks/hybrid_kv.py --layers 12 --window 128 --prompt-len 1024 --num-requests 64
"""

from __future__ import annotations

import argparse
import json
import random
import tempfile
import time
from typing import Any

import torch

from infercore import LLM, SamplingParams
from infercore.tiny_models import build_model_folder


def _model(folder: str, layers: int, window: int, pattern: int) -> str:
    kinds = ["full_attention" if (i + 1) % pattern == 0 else "sliding_attention" for i in range(layers)]
    return str(build_model_folder(folder, "Gemma3ForCausalLM", num_hidden_layers=layers, layer_types=kinds,
                                  sliding_window=window, hidden_size=64, intermediate_size=128,
                                  num_attention_heads=4, num_key_value_heads=2))


def run(args: argparse.Namespace, model: str, disable_hybrid: bool) -> dict[str, Any]:
    llm = LLM(model=model, dtype="float32", max_model_len=args.prompt_len + args.max_tokens + 16,
              max_num_seqs=args.num_requests, block_size=16, kv_cache_memory_bytes=args.kv_bytes,
              max_num_batched_tokens=args.step_tokens,
              cpu_threads=args.threads, enable_prefix_caching=False, seed=0,
              disable_hybrid_kv_cache_manager=disable_hybrid)
    core = llm.llm_engine.engine_core
    scheduler = core.scheduler
    kv = scheduler.kv_cache_manager
    most_running = 0
    schedule = scheduler.schedule

    def counting():  # the most requests in one step
        nonlocal most_running
        out = schedule()
        most_running = max(most_running, len(out.num_scheduled_tokens))
        return out

    scheduler.schedule = counting
    rng = random.Random(0)
    prompts = [{"prompt_token_ids": [rng.randrange(3, 200) for _ in range(args.prompt_len)]}
               for _ in range(args.num_requests)]
    params = SamplingParams(temperature=0, max_tokens=args.max_tokens, ignore_eos=True)
    llm.generate(prompts[:2], SamplingParams(temperature=0, max_tokens=4, ignore_eos=True), use_tqdm=False)
    most_running, preempted = 0, scheduler.num_preemptions
    start = time.perf_counter()
    outputs = llm.generate(prompts, params, use_tqdm=False)
    seconds = time.perf_counter() - start
    tokens = sum(len(o.outputs[0].token_ids) for o in outputs)
    groups = getattr(kv, "groups", [kv])
    return {"benchmark": "hybrid_kv", "hybrid_kv_cache_manager": not disable_hybrid, "seconds": round(seconds, 3),
            "output_tokens": tokens, "output_tok_s": round(tokens / seconds, 1),
            "preemptions": scheduler.num_preemptions - preempted, "most_running": most_running,
            "pool_blocks": [g.pool.num_blocks for g in groups],
            "windows": core.kv_layout.windows,
            "outputs": [o.outputs[0].token_ids for o in outputs]}


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--layers", type=int, default=6)
    parser.add_argument("--pattern", type=int, default=6, help="every N-th layer is global")
    parser.add_argument("--window", type=int, default=32)
    parser.add_argument("--prompt-len", type=int, default=256)
    parser.add_argument("--max-tokens", type=int, default=64)
    parser.add_argument("--num-requests", type=int, default=16)
    parser.add_argument("--kv-bytes", type=int, default=4 << 20, help="KV cache budget in bytes")
    parser.add_argument("--step-tokens", type=int, default=256, help="max_num_batched_tokens")
    parser.add_argument("--threads", type=int, default=2)
    args = parser.parse_args(argv)
    torch.manual_seed(0)
    with tempfile.TemporaryDirectory() as folder:
        model = _model(folder, args.layers, args.window, args.pattern)
        results = [run(args, model, disable_hybrid=flag) for flag in (True, False)]
    same = results[0].pop("outputs") == results[1].pop("outputs")
    for line in results:
        print(json.dumps(line), flush=True)
    print(json.dumps({"benchmark": "hybrid_kv", "hybrid_over_one_table": round(
        results[1]["output_tok_s"] / results[0]["output_tok_s"], 3), "same_tokens": same}), flush=True)
    return 0 if same else 1


if __name__ == "__main__":
    raise SystemExit(main())
