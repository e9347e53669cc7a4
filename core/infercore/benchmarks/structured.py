"""`infercore bench structured`: the throughput cost of constrained decoding.

One run generates the same batch twice on the W-CPU model shape: unconstrained, then with every
request constrained to a JSON array of strings. Both generate exactly the same number of tokens
(``ignore_eos`` with ``min_tokens == max_tokens``; the schema needs more items than fit, so the
grammar never ends early), and one JSON line reports both speeds and the slowdown.
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import tempfile
import time
from pathlib import Path
from typing import Any

from infercore.benchmarks.workloads import WORKLOADS, Workload

#: Vocabulary of the model and its tokenizer: a grammar needs real token strings to work with.
VOCAB_SIZE = 32000
#: An array of strings with more items than any run can write: output is as long as asked.
LONG_ARRAY_SCHEMA: dict[str, Any] = {"type": "array", "items": {"type": "string"}, "minItems": 100_000}


def write_model_folder(workload: Workload, path: Path) -> Path:
    """The workload's config-only folder, with a trained tokenizer of :data:`VOCAB_SIZE` tokens."""
    from infercore.tiny_models import build_tokenizer

    workload = dataclasses.replace(workload, model_config={**workload.model_config, "vocab_size": VOCAB_SIZE})
    folder = workload.write_model_folder(path)
    build_tokenizer(folder, vocab_size=VOCAB_SIZE)
    return folder


def timed_generate(llm: Any, prompts: list[list[int]], params: list[Any]) -> tuple[int, float]:
    """(output tokens, seconds) of one batch."""
    start = time.perf_counter()
    outputs = llm.generate([{"prompt_token_ids": p} for p in prompts], params, use_tqdm=False)
    return sum(len(o.outputs[0].token_ids) for o in outputs), time.perf_counter() - start


def run_both(workload: Workload, folder: Path, args: argparse.Namespace) -> dict[str, Any]:
    from infercore import LLM, SamplingParams
    from infercore.sampling_params import StructuredOutputsParams

    prompts, _ = workload.requests(args.seed)
    llm = LLM(model=str(folder), load_format="dummy", dtype=workload.dtype, max_model_len=workload.max_model_len,
              cpu_threads=args.threads, async_scheduling=False, enable_prefix_caching=False,
              **workload.engine_kwargs)
    common = dict(temperature=workload.temperature, ignore_eos=True, min_tokens=args.output_len,
                  max_tokens=args.output_len, detokenize=False)
    free = SamplingParams(**common)
    constrained = SamplingParams(**common, structured_outputs=StructuredOutputsParams(json=LONG_ARRAY_SCHEMA))
    # Warm-up: the first steps of both kinds, and the grammar's compile (cached for the timed run).
    llm.generate([{"prompt_token_ids": p} for p in prompts[:4]], [free, free, constrained, constrained],
                 use_tqdm=False)
    # Interleaved repeats, best of each: the machine's noise hits both kinds alike.
    free_runs, constrained_runs = [], []
    for _ in range(args.repeats):
        free_runs.append(timed_generate(llm, prompts, [free] * len(prompts)))
        constrained_runs.append(timed_generate(llm, prompts, [constrained] * len(prompts)))
    free_tokens, free_s = min(free_runs, key=lambda run: run[1])
    constrained_tokens, constrained_s = min(constrained_runs, key=lambda run: run[1])
    if free_tokens != constrained_tokens:
        raise RuntimeError(f"the runs generated {free_tokens} and {constrained_tokens} tokens; they must match")
    free_tok_s, constrained_tok_s = free_tokens / free_s, constrained_tokens / constrained_s
    return {"requests": len(prompts), "output_tokens_per_run": free_tokens, "repeats": args.repeats,
            "backend": llm.config.structured_outputs.structured_outputs_backend,
            "unconstrained_wall_s": round(free_s, 3), "unconstrained_tok_s": round(free_tok_s, 1),
            "constrained_wall_s": round(constrained_s, 3), "constrained_tok_s": round(constrained_tok_s, 1),
            "slowdown_pct": round(100 * (1 - constrained_tok_s / free_tok_s), 1)}


def add_parser(subparsers: argparse._SubParsersAction) -> None:
    p = subparsers.add_parser("structured", help="throughput with and without a JSON-schema constraint")
    p.add_argument("--workload", choices=sorted(WORKLOADS), default="w-cpu", help="model shape to use")
    p.add_argument("--num-requests", type=int, default=64)
    p.add_argument("--output-len", type=int, default=128, help="tokens every request generates")
    p.add_argument("--repeats", type=int, default=2, help="timed runs of each kind, interleaved; the best counts")
    p.add_argument("--threads", type=int, default=1, help="torch threads (CPU)")
    p.add_argument("--seed", type=int, default=0)
    p.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    import torch

    torch.set_num_threads(args.threads)
    workload = dataclasses.replace(WORKLOADS[args.workload], num_requests=args.num_requests)
    with tempfile.TemporaryDirectory(prefix="infercore-bench-") as tmp:
        folder = write_model_folder(workload, Path(tmp) / workload.name)
        result = run_both(workload, folder, args)
    print(json.dumps({"workload": workload.name, "torch": torch.__version__, "threads": args.threads, **result}),
          flush=True)
    return 0
