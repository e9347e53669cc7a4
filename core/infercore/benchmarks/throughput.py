"""`infercore bench throughput`: offline generation speed on named workloads, optionally beside HF.

Workloads of one model shape given together (``--workload w-gpu,w-gpu-sampling``) run one after
another in one engine, so their figures compare like with like. A variant of another shape or engine
setting (``w-gpu-8b,w-gpu-8b-fp8``) runs in an engine of its own, in a process of its own, after its
baseline.
"""

from __future__ import annotations

import argparse
import json
import platform as py_platform
import resource
import statistics
import sys
import tempfile
import time
from pathlib import Path
from queue import Empty
from typing import Any

from infercore.benchmarks.allocator_events import allocator_counters, increase
from infercore.benchmarks.embed import EMBED_WORKLOADS, EmbedWorkload
from infercore.benchmarks.embed import run as run_embed
from infercore.benchmarks.flops import H200_BF16_DENSE_FLOPS, generation_flops, long_context_estimate_s
from infercore.benchmarks.speculative import (
    add_speculative_arguments,
    engine_kwargs,
    force_acceptance_rate,
    periodic,
    spec_decode_report,
)
from infercore.benchmarks.workloads import WORKLOADS, Workload
from infercore.jit_builds import JitBuildCounter
from infercore.version import __version__


def _peak_rss_mib() -> float:
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024


def _device_peak_mib() -> float | None:
    import torch

    if torch.cuda.is_available() and torch.cuda.is_initialized():
        return torch.cuda.max_memory_allocated() / 2**20
    return None


def _hardware() -> str:
    import torch

    if torch.cuda.is_available() and torch.cuda.is_initialized():
        return torch.cuda.get_device_name(0)
    return f"{py_platform.processor() or py_platform.machine()} x{torch.get_num_threads()} threads"


def make_llm(workload: Workload, folder: Path, args: argparse.Namespace) -> Any:
    """The engine the workload's shape and the command's engine options describe."""
    from infercore import LLM

    kwargs: dict[str, Any] = dict(model=str(folder), load_format="dummy", dtype=workload.dtype,
                                  max_model_len=workload.max_model_len, skip_tokenizer_init=True,
                                  enforce_eager=args.enforce_eager, **workload.engine_kwargs)
    if args.sync_scheduling:
        kwargs["async_scheduling"] = False
    if args.max_num_seqs:
        kwargs["max_num_seqs"] = args.max_num_seqs
    if args.max_num_batched_tokens:
        kwargs["max_num_batched_tokens"] = args.max_num_batched_tokens
    if args.kv_cache_dtype and "kv_cache_dtype" not in workload.engine_kwargs:
        kwargs["kv_cache_dtype"] = args.kv_cache_dtype
    if args.num_gpu_blocks_override:
        kwargs["num_gpu_blocks_override"] = args.num_gpu_blocks_override
    return LLM(**kwargs, **engine_kwargs(args))


def run_infercore(workload: Workload, llm: Any, args: argparse.Namespace,
                  acceptance_rate: float | None = None) -> dict[str, Any]:
    """Warm up on four of the workload's requests, then time all of them ``args.repeat`` times, each run
    from an empty prefix cache (a repeat would otherwise find every prompt cached)."""
    prompts, max_tokens = workload.requests(args.seed)
    prompts = [periodic(p, args.prompt_period) for p in prompts]
    params = workload.sampling_params(max_tokens, args.seed)
    llm.generate([{"prompt_token_ids": p} for p in prompts[:4]], params[:4], use_tqdm=False)  # warm-up
    profiler = None
    if args.profile:
        import cProfile

        profiler = cProfile.Profile()
        profiler.enable()
    walls = []
    allocator_before = allocator_counters()
    stats_before = llm.llm_engine.engine_core.scheduler.get_stats()
    with JitBuildCounter() as builds:
        for _ in range(args.repeat):
            llm.reset_prefix_cache()
            start = time.perf_counter()
            outputs = llm.generate([{"prompt_token_ids": p} for p in prompts], params,
                                   use_tqdm=not args.no_progress)
            walls.append(time.perf_counter() - start)
    if profiler is not None:
        import pstats

        profiler.disable()
        pstats.Stats(profiler, stream=sys.stderr).sort_stats("tottime").print_stats(30)
    tokens = sum(len(o.outputs[0].token_ids) for o in outputs)
    prompt_tokens = sum(len(p) for p in prompts)
    elapsed = statistics.median(walls)
    stats_after = llm.llm_engine.engine_core.scheduler.get_stats()
    result = {"engine": "infercore", "version": __version__, "async_scheduling": llm.llm_engine.engine_core.async_mode,
              "requests": len(prompts), "prompt_tokens": prompt_tokens, "output_tokens": tokens,
              "wall_s": round(elapsed, 3), "output_tok_s": round(tokens / elapsed, 1),
              "prompt_tok_s": round(prompt_tokens / elapsed, 1),
              "triton_builds_during_run": dict(builds.builds),
              "allocator_events_during_run": increase(allocator_before, allocator_counters()),
              "kv_blocks": stats_after.num_total_blocks,
              "preemptions": stats_after.num_preemptions - stats_before.num_preemptions}
    if args.speculative_config is not None:
        result.update({"speculative_config": args.speculative_config,
                       "benchmark_acceptance_rate": acceptance_rate,
                       "prompt_period": args.prompt_period, **spec_decode_report(llm, stats_before)})
    if args.repeat > 1:
        result["runs_output_tok_s"] = [round(tokens / w, 1) for w in walls]
    result.update(_limits(workload, prompts, [len(o.outputs[0].token_ids) for o in outputs], elapsed))
    return result


def _limits(workload: Workload, prompts: list[list[int]], output_lens: list[int], wall_s: float) -> dict[str, Any]:
    """How close the run came to what bounds the workload on one H200 (BENCHMARKS.md)."""
    if workload.compute_bound:
        flops = generation_flops(workload.model_config, [len(p) for p in prompts], output_lens)
        return {"tflop": round(flops / 1e12, 1), "compute_limit_s": round(flops / H200_BF16_DENSE_FLOPS, 3),
                "fraction_of_compute_limit": round(flops / H200_BF16_DENSE_FLOPS / wall_s, 3)}
    if workload.long_context:
        estimate = long_context_estimate_s(workload.model_config, [len(p) for p in prompts], output_lens)
        return {"estimate_s": round(estimate, 2), "times_estimate": round(wall_s / estimate, 2)}
    if workload.bandwidth_ceiling_tok_s:
        return {"fraction_of_bandwidth_ceiling": round(sum(output_lens) / wall_s / workload.bandwidth_ceiling_tok_s, 3)}
    return {}


def _release_device_memory() -> None:
    """Collect what a dropped engine left and hand the GPU's cached blocks back to the driver."""
    import gc

    import torch

    gc.collect()
    if torch.cuda.is_available():
        torch.cuda.empty_cache()


def run_hf(workload: Workload, folder: Path, args: argparse.Namespace) -> dict[str, Any]:
    """HF transformers on the same workload: static batches of ``generate`` or ``generate_batch`` (``--hf-mode``)."""
    import torch
    import transformers
    from transformers import AutoConfig, AutoModelForCausalLM, GenerationConfig

    prompts, max_tokens = workload.requests(args.seed)
    if args.hf_num_requests:
        prompts, max_tokens = prompts[: args.hf_num_requests], max_tokens[: args.hf_num_requests]
    device = "cuda" if torch.cuda.is_available() else "cpu"
    config = AutoConfig.from_pretrained(str(folder))
    torch.manual_seed(args.seed)
    with torch.device(device):  # initialised where it runs: a 30B-parameter model in seconds, not minutes
        model = AutoModelForCausalLM.from_config(config, dtype=getattr(torch, workload.dtype)).eval()
    sample = workload.temperature > 0
    # HF takes the temperature only: the comparison is of the plain workload's work.
    options = f"; {sorted(workload.sampling_options)} not applied" if workload.sampling_options else ""
    mode_name = args.hf_mode if args.hf_mode != "auto" else ("generate_batch" if device == "cuda" else "static")
    if mode_name == "generate_batch":
        new_tokens = round(sum(max_tokens) / len(max_tokens))  # generate_batch takes one length for all
        gen = GenerationConfig(max_new_tokens=new_tokens, do_sample=sample, temperature=workload.temperature or None,
                               eos_token_id=None, pad_token_id=0)
        model.generate_batch(inputs=prompts[:4], generation_config=gen)
        start = time.perf_counter()
        results = model.generate_batch(inputs=prompts, generation_config=gen)
        elapsed = time.perf_counter() - start
        tokens = sum(len(r.generated_tokens) for r in results.values())
        mode = f"generate_batch, max_new_tokens={new_tokens} for all"
    else:
        batch_size = args.hf_batch_size or (16 if device == "cpu" else len(prompts))
        tokens, elapsed = _hf_static_batches(model, prompts, max_tokens, batch_size, sample, device)
        mode = f"generate, static batches of {batch_size} sorted by length"
    return {"engine": "hf-transformers", "version": transformers.__version__, "mode": mode + options,
            "requests": len(prompts), "output_tokens": tokens, "wall_s": round(elapsed, 3),
            "output_tok_s": round(tokens / elapsed, 1)}


def _hf_static_batches(model: Any, prompts: list[list[int]], max_tokens: list[int], batch_size: int, sample: bool,
                       device: str) -> tuple[int, float]:
    """HF ``generate`` over left-padded batches of prompts sorted by length, each run to its longest request's
    length: (output tokens generated, seconds). One batch of the first few requests runs first, untimed."""
    import torch

    def run(idx: list[int]) -> int:
        width = max(len(prompts[i]) for i in idx)
        ids = torch.zeros((len(idx), width), dtype=torch.long, device=device)
        mask = torch.zeros_like(ids)
        for row, i in enumerate(idx):  # left padding
            ids[row, width - len(prompts[i]):] = torch.tensor(prompts[i], device=device)
            mask[row, width - len(prompts[i]):] = 1
        new = max(max_tokens[i] for i in idx)
        with torch.no_grad():
            out = model.generate(input_ids=ids, attention_mask=mask, max_new_tokens=new, min_new_tokens=new,
                                 do_sample=sample, pad_token_id=0)
        return (out.shape[1] - width) * len(idx)

    order = sorted(range(len(prompts)), key=lambda i: len(prompts[i]))
    if device == "cuda":
        run(order[:4])
        torch.cuda.synchronize()
    tokens, elapsed = 0, 0.0
    for b in range(0, len(order), batch_size):
        start = time.perf_counter()
        tokens += run(order[b: b + batch_size])
        if device == "cuda":
            torch.cuda.synchronize()
        elapsed += time.perf_counter() - start
    return tokens, elapsed


def _at_least_one(text: str) -> int:
    value = int(text)
    if value < 1:
        raise argparse.ArgumentTypeError(f"{value} is not a whole number of at least 1")
    return value


def _workloads(text: str) -> list[Workload]:
    """Comma-separated workload names; workloads of one call must share their engine."""
    if text in EMBED_WORKLOADS:
        return EMBED_WORKLOADS[text]  # type: ignore[return-value]
    names = [name.strip() for name in text.split(",") if name.strip()]
    unknown = [name for name in names if name not in WORKLOADS]
    if unknown or not names:
        raise argparse.ArgumentTypeError(f"unknown workload {', '.join(unknown) or repr(text)}; "
                                         f"choose from {', '.join(sorted(WORKLOADS))}")
    workloads = [WORKLOADS[name] for name in dict.fromkeys(names)]
    first = workloads[0].engine_shape()
    given = {w.name for w in workloads}
    if any(w.engine_shape() != first and w.variant_of not in given for w in workloads):
        raise argparse.ArgumentTypeError(f"{', '.join(names)} differ in model shape or engine settings; "
                                         "run them in separate calls")
    return workloads


def add_parser(subparsers: argparse._SubParsersAction) -> None:
    p = subparsers.add_parser("throughput", help="offline throughput on named workloads (BENCHMARKS.md)")
    p.add_argument("--workload", type=_workloads, default="w-cpu", metavar="NAME[,NAME...]",
                   help=f"one of {', '.join(sorted({**WORKLOADS, **EMBED_WORKLOADS}))}, or several of one model "
                        "shape, comma-separated "
                        "(they run in one engine, in the order given)")
    p.add_argument("--load-format", choices=["dummy"], default="dummy", help="weights: random (dummy)")
    p.add_argument("--compare-hf", action="store_true", help="also run HF transformers in the same run")
    p.add_argument("--hf-num-requests", type=int, default=None, help="run HF on only the first N requests")
    p.add_argument("--hf-mode", choices=["auto", "generate_batch", "static"], default="auto",
                   help="HF's batching: continuous (generate_batch) or static padded batches of generate; "
                        "auto: generate_batch on a GPU, static on a CPU")
    p.add_argument("--hf-batch-size", type=_at_least_one, default=None,
                   help="requests per static HF batch (default: 16 on a CPU, all of them on a GPU)")
    p.add_argument("--num-requests", type=int, default=None, help="override the workload's request count")
    p.add_argument("--max-num-seqs", type=int, default=None)
    p.add_argument("--max-num-batched-tokens", type=int, default=None)
    p.add_argument("--enforce-eager", action="store_true")
    p.add_argument("--kv-cache-dtype", choices=["auto", "bfloat16", "float16", "float32", "fp8", "fp8_e4m3"],
                   default=None, help="KV cache dtype of workloads that do not set their own (w-gpu-fp8kv is "
                   "W-GPU with fp8, reported as a fraction of w-gpu when both run in one call)")
    p.add_argument("--sync-scheduling", action="store_true", help="turn async scheduling off")
    p.add_argument("--num-gpu-blocks-override", type=int, default=None, metavar="N",
                   help="KV cache blocks (instead of sizing from free memory): compares engines at one KV capacity")
    add_speculative_arguments(p)
    p.add_argument("--profile", action="store_true", help="print where the host time goes (cProfile) to stderr")
    p.add_argument("--threads", type=int, default=None, help="torch threads (CPU)")
    p.add_argument("--repeat", type=_at_least_one, default=1,
                   help="time the workload N times after the warm-up; the figures are the median run's")
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--peer-batch-size", type=_at_least_one, default=32,
                   help="w-gpu-embed: inputs per padded batch of sentence-transformers (its default: 32)")
    p.add_argument("--check", type=int, default=8, help="w-gpu-embed: embeddings compared between the two sides")
    p.add_argument("--no-progress", action="store_true")
    p.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    import dataclasses

    if isinstance(args.workload, EmbedWorkload):  # embeddings beside sentence-transformers (benchmarks.embed)
        return run_embed(args.workload, args)
    workloads: list[Workload] = args.workload
    if args.num_requests:
        workloads = [dataclasses.replace(w, num_requests=args.num_requests) for w in workloads]
    groups: dict[tuple[str, str, int, str], list[Workload]] = {}
    for workload in workloads:
        groups.setdefault(workload.engine_shape(), []).append(workload)
    if len(groups) == 1:
        run_engine(workloads, args, {})
        return 0
    ours: dict[str, dict[str, Any]] = {}
    for group in groups.values():
        ours = run_engine_in_child(group, args, ours)
    return 0


def _child(queue: Any, workloads: list[Workload], args: argparse.Namespace, ours: dict[str, Any]) -> None:
    queue.put(run_engine(workloads, args, ours))


def run_engine_in_child(workloads: list[Workload], args: argparse.Namespace,
                        ours: dict[str, dict[str, Any]]) -> dict[str, dict[str, Any]]:
    """:func:`run_engine` in a fresh process, so the previous engine's device memory is all free."""
    import multiprocessing

    context = multiprocessing.get_context("spawn")
    queue = context.Queue()
    child = context.Process(target=_child, args=(queue, workloads, args, ours))
    child.start()
    while True:
        try:
            result = queue.get(timeout=5)
            break
        except Empty:
            if not child.is_alive():
                names = ", ".join(w.name for w in workloads)
                raise RuntimeError(f"the engine of {names} exited (code {child.exitcode}) before reporting; "
                                   "its error is above") from None
    child.join()
    return result


def run_engine(workloads: list[Workload], args: argparse.Namespace,
               ours: dict[str, dict[str, Any]]) -> dict[str, dict[str, Any]]:
    """Run ``workloads`` (one engine shape) in one engine, printing one JSON line each; ``ours`` holds
    earlier results, for the fraction of a variant's baseline. Returns it with these added."""
    import gc

    import torch

    if args.threads:
        torch.set_num_threads(args.threads)

    def report(workload: Workload, result: dict[str, Any]) -> None:
        common = {"workload": workload.name, "torch": torch.__version__, "hardware": _hardware(),
                  "peak_rss_mib": round(_peak_rss_mib(), 1), "peak_device_mib": _device_peak_mib()}
        print(json.dumps({**common, **result}), flush=True)

    ours = dict(ours)
    with tempfile.TemporaryDirectory(prefix="infercore-bench-") as tmp:
        folder = workloads[0].write_model_folder(Path(tmp) / workloads[0].name)
        llm = make_llm(workloads[0], folder, args)
        for workload in workloads:
            for rate in args.benchmark_acceptance_rate:
                force_acceptance_rate(llm, rate)
                result = run_infercore(workload, llm, args, rate)
                baseline = ours.get(workload.variant_of or "")
                if baseline is not None:
                    result["baseline"] = workload.variant_of
                    result["fraction_of_baseline"] = round(result["output_tok_s"] / baseline["output_tok_s"], 3)
                ours[workload.name] = result
                report(workload, result)  # printed before the next run, so a failing one loses nothing
        if args.compare_hf:
            # HF's copy of the model needs the device memory the engine holds (a 30B MoE fits once, not twice).
            llm.llm_engine.engine_core.shutdown()
            del llm
            _release_device_memory()
            for workload in workloads:
                gc.collect()
                theirs = run_hf(workload, folder, args)
                theirs["ratio_infercore_over_hf"] = round(ours[workload.name]["output_tok_s"] / theirs["output_tok_s"], 2)
                report(workload, theirs)
    sys.stdout.flush()
    return ours
