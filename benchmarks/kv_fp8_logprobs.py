"""Teacher-forced logprobs over a bf16 KV cache against an fp8 (e4m3) one, at a workload's model shape.

The bf16-KV engine generates greedy completions of random token-id prompts; then each engine scores the
same prompt + completion sequences (``prompt_logprobs``), and the script prints one JSON line: how far the
fp8-KV logprobs of those tokens are from the bf16-KV ones (max, mean, 99th percentile) and how often the
fp8-KV engine would have picked the same greedy token over the completions. Weights are dummy (random),
so the figures measure the cache format on that shape, not on a trained model's activations. The k/v
scales are 1.0 (a dummy checkpoint carries none).

    python benchmarks/kv_fp8_logprobs.py                      # W-GPU's shape (Qwen3-0.6B), on the GPU
    python benchmarks/kv_fp8_logprobs.py --workload w-cpu --num-prompts 4 --prompt-len 64 --output-len 16
"""

from __future__ import annotations

import argparse
import json
import random
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import torch

from infercore import LLM, SamplingParams
from infercore.benchmarks.teacher_forced import close, score
from infercore.benchmarks.workloads import WORKLOADS, Workload


def _engine(workload: Workload, folder: Path, kv_cache_dtype: str, args: argparse.Namespace) -> LLM:
    return LLM(model=str(folder), load_format="dummy", dtype=workload.dtype, max_model_len=workload.max_model_len,
               skip_tokenizer_init=True, kv_cache_dtype=kv_cache_dtype, seed=args.seed,
               enforce_eager=args.enforce_eager)


def compare(workload: Workload, args: argparse.Namespace) -> dict[str, Any]:
    """Run both engines one after the other; the figures as a dict."""
    rng = random.Random(args.seed)
    prompts = [[rng.randint(0, workload.token_id_max) for _ in range(args.prompt_len)]
               for _ in range(args.num_prompts)]
    with tempfile.TemporaryDirectory() as tmp:
        folder = workload.write_model_folder(Path(tmp) / "model")
        start = time.perf_counter()
        llm = _engine(workload, folder, "auto", args)
        greedy = SamplingParams(temperature=0, max_tokens=args.output_len, ignore_eos=True, detokenize=False)
        outs = llm.generate([{"prompt_token_ids": p} for p in prompts], greedy, use_tqdm=False)
        sequences = [p + list(o.outputs[0].token_ids) for p, o in zip(prompts, outs, strict=True)]
        reference, own_ranks = score(llm, sequences, args.output_len)
        close(llm)
        llm = _engine(workload, folder, args.kv_cache_dtype, args)
        logprobs, ranks = score(llm, sequences, args.output_len)
        close(llm)
    diffs = (torch.tensor(logprobs, dtype=torch.float64) - torch.tensor(reference, dtype=torch.float64)).abs()
    return {
        "benchmark": "kv_fp8_logprobs", "workload": workload.name, "kv_cache_dtype": args.kv_cache_dtype,
        "num_prompts": args.num_prompts, "prompt_len": args.prompt_len, "output_len": args.output_len,
        "tokens_scored": len(diffs),
        "abs_logprob_diff_max": round(float(diffs.max()), 5), "abs_logprob_diff_mean": round(float(diffs.mean()), 5),
        "abs_logprob_diff_p99": round(float(diffs.quantile(0.99)), 5),
        "mean_reference_logprob": round(sum(reference) / len(reference), 4),
        "greedy_agreement": round(sum(r == 1 for r in ranks) / len(ranks), 4),
        "reference_self_agreement": round(sum(r == 1 for r in own_ranks) / len(own_ranks), 4),
        "wall_s": round(time.perf_counter() - start, 1),
        "device": torch.cuda.get_device_name(0) if torch.cuda.is_available() else "cpu",
    }


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--workload", choices=sorted(WORKLOADS), default="w-gpu", help="model shape to run")
    parser.add_argument("--kv-cache-dtype", choices=["fp8", "fp8_e4m3"], default="fp8")
    parser.add_argument("--num-prompts", type=int, default=64)
    parser.add_argument("--prompt-len", type=int, default=512)
    parser.add_argument("--output-len", type=int, default=128)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--enforce-eager", action="store_true")
    args = parser.parse_args(argv)
    workload = WORKLOADS[args.workload]
    if args.prompt_len + args.output_len > workload.max_model_len:
        parser.error(f"--prompt-len + --output-len is over {workload.max_model_len}, the workload's max_model_len")
    print(json.dumps(compare(workload, args)))
    sys.stdout.flush()
    return 0


if __name__ == "__main__":
    sys.exit(main())
