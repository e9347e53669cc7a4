"""`infercore bench latency`: single-stream decode time per token on a workload's model shape."""

from __future__ import annotations

import argparse
import json
import tempfile
import time
from pathlib import Path
from typing import Any

from infercore.benchmarks.speculative import (
    add_speculative_arguments,
    engine_kwargs,
    force_acceptance_rate,
    periodic,
    spec_decode_report,
)
from infercore.benchmarks.workloads import WORKLOADS


def _timed_generate(llm: Any, prompt: list[int], max_tokens: int, repeats: int) -> tuple[float, float]:
    """The best and the mean time (seconds) of ``repeats`` runs of one request."""
    from infercore import SamplingParams

    params = SamplingParams(temperature=0, max_tokens=max_tokens, ignore_eos=True, detokenize=False)
    times = []
    for _ in range(repeats):
        llm.reset_prefix_cache()  # each run prefills its prompt in full: TTFT is a real prefill
        start = time.perf_counter()
        llm.generate([{"prompt_token_ids": prompt}], params, use_tqdm=False)
        times.append(time.perf_counter() - start)
    return min(times), sum(times) / len(times)


def add_parser(subparsers: argparse._SubParsersAction) -> None:
    p = subparsers.add_parser("latency", help="batch-1 decode time per output token")
    p.add_argument("--workload", choices=sorted(WORKLOADS), default="w-cpu", help="model shape to use")
    p.add_argument("--input-len", type=int, default=128)
    p.add_argument("--output-len", type=int, default=256)
    p.add_argument("--repeats", type=int, default=3)
    p.add_argument("--enforce-eager", action="store_true")
    p.add_argument("--max-num-seqs", type=int, default=8,
                   help="the engine's max_num_seqs (give a server's own to compare with its TPOT)")
    p.add_argument("--tensor-parallel-size", type=int, default=1,
                   help="devices each layer is split over (more than one: a worker process per device)")
    add_speculative_arguments(p)
    p.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    from infercore import LLM

    workload = WORKLOADS[args.workload]
    with tempfile.TemporaryDirectory(prefix="infercore-latency-") as tmp:
        folder = workload.write_model_folder(Path(tmp) / workload.name)
        llm = LLM(model=str(folder), load_format="dummy", dtype=workload.dtype, max_model_len=workload.max_model_len,
                  skip_tokenizer_init=True, enforce_eager=args.enforce_eager,
                  max_num_seqs=args.max_num_seqs, tensor_parallel_size=args.tensor_parallel_size,
                  **engine_kwargs(args))
        prompt = periodic(list(range(1, args.input_len + 1)), args.prompt_period)
        _timed_generate(llm, prompt, 8, 1)  # warm-up
        for rate in args.benchmark_acceptance_rate:
            force_acceptance_rate(llm, rate)
            _report(args, workload.name, rate, *_measure(llm, prompt, args))
    return 0


def _measure(llm: Any, prompt: list[int], args: argparse.Namespace) -> tuple[float, float, float, dict[str, Any]]:
    """Best TTFT, best and mean whole-request time (seconds), and the draft counters of the timed runs."""
    first, _ = _timed_generate(llm, prompt, 1, args.repeats)
    before = llm.llm_engine.engine_core.scheduler.get_stats()
    full, mean = _timed_generate(llm, prompt, args.output_len, args.repeats)
    return first, full, mean, spec_decode_report(llm, before)


def _report(args: argparse.Namespace, workload: str, rate: float | None, first: float, full: float, mean: float,
            spec: dict[str, Any]) -> None:
    """One result line. ``decode_ms_per_token`` is from the best run; with forced acceptance each run draws its
    own acceptances, so the best run is also the luckiest: ``decode_ms_per_token_mean`` averages them all."""
    per_token_ms = (full - first) / (args.output_len - 1) * 1000
    mean_ms = (mean - first) / (args.output_len - 1) * 1000
    print(json.dumps({"benchmark": "latency", "workload": workload, "input_len": args.input_len,
                      "output_len": args.output_len, "enforce_eager": args.enforce_eager,
                      "max_num_seqs": args.max_num_seqs, "tensor_parallel_size": args.tensor_parallel_size,
                      "speculative_config": args.speculative_config,
                      "benchmark_acceptance_rate": rate, "prompt_period": args.prompt_period,
                      "ttft_ms": round(first * 1000, 2), "decode_ms_per_token": round(per_token_ms, 3),
                      "decode_ms_per_token_mean": round(mean_ms, 3), **spec}),
          flush=True)
