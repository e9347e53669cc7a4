"""Micro-batching of pipeline stages: the throughput of one engine with ``pipeline_parallel_size`` stages
when it keeps ``pp`` steps in the pipe and when it keeps one, in the same run.

With one step in the pipe each stage idles while the others run; with ``pp`` steps each stage runs a
step while the next stage runs the one before. The workload is ``--num-requests`` requests of random
prompts, split over several steps by the token budget so that the pipe fills, after which the
requests take turns in groups (each stage then has a step to run). The model is random weights of a
config given by its sizes; on the CPU each stage is a process with one torch thread, so a machine with
``pp`` free cores shows the gain.

Prints one JSON line per setting (``batches_in_flight``, output tokens, seconds, output and total
(prompt + output) tok/s, the most steps that were in the pipe at once, and with the ``mp`` executor the
CPU seconds each stage's process used) and a last line with the ratio of total tok/s. The default
workload is prompt-heavy (128-token prompts, 16 output tokens): on the CPU a prompt chunk is compute
bound, while a decode step of 32 rows mostly streams the weights, whose cost a smaller step does not
shrink. On a machine without ``pp`` free cores the stages share what there is and the ratio says
nothing; the CPU seconds still show what each stage would take on a core of its own (``cpu_bound``:
the sum over stages with one step in flight against the largest with ``pp``). Example (CPU, the figure
of the issue):

    python benchmarks/pipeline_microbatches.py --num-requests 64 --pp 2

On GPUs (one per stage), ``--device-threads 0`` leaves the torch threads alone:

    python benchmarks/pipeline_microbatches.py --num-requests 256 --pp 2 --hidden-size 2048 --layers 16
"""

from __future__ import annotations

import argparse
import json
import os
import random
import tempfile
import time
from pathlib import Path
from typing import Any

from infercore import LLM, SamplingParams
from infercore.tiny_models import build_tokenizer, tiny_config


def make_model(folder: Path, hidden_size: int, layers: int) -> Path:
    """A config-and-tokenizer folder (weights come from ``load_format="dummy"``)."""
    build_tokenizer(folder)
    from transformers import AutoTokenizer

    vocab = len(AutoTokenizer.from_pretrained(str(folder)))
    config = tiny_config("LlamaForCausalLM", vocab_size=vocab, hidden_size=hidden_size,
                         intermediate_size=hidden_size * 3, num_hidden_layers=layers,
                         num_attention_heads=max(hidden_size // 64, 1), num_key_value_heads=max(hidden_size // 256, 1))
    config.save_pretrained(str(folder))
    return folder


def run(llm: LLM, prompts: list[list[int]], output_len: int) -> tuple[int, float]:
    """Output tokens and seconds of one pass over ``prompts`` (prompt tokens are ``prompts``' lengths)."""
    params = SamplingParams(temperature=0, max_tokens=output_len, ignore_eos=True)
    started = time.perf_counter()
    outs = llm.generate([{"prompt_token_ids": p} for p in prompts], params, use_tqdm=False)
    seconds = time.perf_counter() - started
    return sum(len(o.outputs[0].token_ids) for o in outs), seconds


class PipeDepth:
    """Records the most steps an engine core had in its pipe at once."""

    def __init__(self, core: Any) -> None:
        self.most = 0
        submit = core.executor.submit_step

        def counted(so: Any) -> Any:
            future = submit(so)
            self.most = max(self.most, len(core._batches) + 1)
            return future

        core.executor.submit_step = counted


def measure(args: argparse.Namespace) -> list[dict[str, Any]]:
    """Run the workload with one step in the pipe and with ``pp``, alternating, ``--repeats`` times each."""
    rng = random.Random(0)
    prompts = [[rng.randrange(10, 400) for _ in range(args.prompt_len)] for _ in range(args.num_requests)]
    with tempfile.TemporaryDirectory() as tmp:
        model = make_model(Path(tmp), args.hidden_size, args.layers)
        # The budget takes an eighth of the prompts per step: the prompts fill the pipe over several steps
        # (with as many steps as stages, filling and draining the pipe would cost a stage's time in each)
        # and the requests then take turns in groups.
        budget = args.max_num_batched_tokens or max(args.prompt_len * args.num_requests // 8, args.prompt_len)
        engine_args: dict[str, Any] = {
            "pipeline_parallel_size": args.pp, "distributed_executor_backend": args.backend,
            "load_format": "dummy", "dtype": args.dtype, "max_model_len": args.prompt_len + args.output_len + 16,
            "max_num_seqs": args.num_requests, "max_num_batched_tokens": budget,
            "max_prefill_tokens_per_decode": None, "enable_prefix_caching": False}
        if args.device_threads:
            engine_args["cpu_threads"] = args.device_threads
        llm = LLM(model=str(model), **engine_args)
        core = llm.llm_engine.engine_core
        depth = PipeDepth(core)
        try:
            run(llm, prompts[: args.pp * 2], 4)  # warm-up
            results: dict[int, list[tuple[int, float, int, list[float]]]] = {1: [], args.pp: []}
            for _ in range(args.repeats):
                for batches in (1, args.pp):
                    core.max_batches = batches
                    depth.most = 0
                    before = stage_cpu_seconds(core)
                    tokens, seconds = run(llm, prompts, args.output_len)
                    used = [b - a for a, b in zip(before, stage_cpu_seconds(core), strict=True)]
                    results[batches].append((tokens, seconds, depth.most, used))
        finally:
            core.shutdown()
    prompt_tokens = len(prompts) * args.prompt_len
    lines = []
    for batches, runs in results.items():
        tokens = sum(r[0] for r in runs)
        seconds = sum(r[1] for r in runs)
        cpu = [round(sum(r[3][i] for r in runs), 2) for i in range(len(runs[0][3]))]
        lines.append({"batches_in_flight": batches, "output_tokens": tokens, "seconds": round(seconds, 3),
                      "tok_per_s": round(tokens / seconds, 1),
                      "total_tok_per_s": round((tokens + prompt_tokens * len(runs)) / seconds, 1),
                      "most_in_pipe": max(r[2] for r in runs), "stage_cpu_s": cpu})
    return lines


def stage_cpu_seconds(core: Any) -> list[float]:
    """CPU seconds each worker process has used so far (``mp`` executor; empty otherwise)."""
    try:
        import psutil
    except ImportError:
        return []
    procs = getattr(core.executor, "procs", [])
    return [sum(psutil.Process(p.pid).cpu_times()[:2]) for p in procs]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--num-requests", type=int, default=64)
    parser.add_argument("--pp", type=int, default=2)
    parser.add_argument("--prompt-len", type=int, default=128)
    parser.add_argument("--output-len", type=int, default=16)
    parser.add_argument("--hidden-size", type=int, default=1024)
    parser.add_argument("--layers", type=int, default=8)
    parser.add_argument("--dtype", default="float32")
    parser.add_argument("--max-num-batched-tokens", type=int, default=None,
                        help="token budget per step (default: an eighth of the prompts' tokens)")
    parser.add_argument("--backend", default="mp", choices=["mp", "ray"])
    parser.add_argument("--repeats", type=int, default=1)
    parser.add_argument("--device-threads", type=int, default=1,
                        help="torch threads per worker on the CPU (0: the platform's default)")
    args = parser.parse_args()
    free_cores = (os.cpu_count() or 1) - os.getloadavg()[0]
    lines = measure(args)
    for line in lines:
        print(json.dumps(line), flush=True)
    one, many = lines[0], lines[1]
    summary: dict[str, Any] = {"speedup": round(many["total_tok_per_s"] / one["total_tok_per_s"], 3), "pp": args.pp,
                               "free_cores_at_start": round(free_cores, 2)}
    if one["stage_cpu_s"] and many["stage_cpu_s"]:
        summary["cpu_bound"] = round(sum(one["stage_cpu_s"]) / max(many["stage_cpu_s"]), 3)
    print(json.dumps(summary), flush=True)


if __name__ == "__main__":
    main()
