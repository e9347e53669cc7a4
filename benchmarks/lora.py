"""Multi-LoRA serving against the base model, in the same run, on a workload's model shape.

Random-weight PEFT adapters (rank 16 by default, on all seven projections) are written for the shape;
each setting runs in a fresh process so the engines never share device memory. Prints one JSON line per
setting, then the ratios the issue asks for.

    # throughput: W-GPU's 256 requests on the base model, then with 8 adapters (request i runs adapter i % 8)
    python benchmarks/lora.py throughput --workload w-gpu
    python benchmarks/lora.py throughput --workload w-gpu-8b
    # batch-1 decode: the base model against one adapter
    python benchmarks/lora.py latency --workload w-gpu
    # the lora_apply kernels against the torch reference at the shape's sizes (their time, GB/s)
    python benchmarks/lora.py kernels --workload w-gpu-8b
    # any of them on a CPU, at a 2-layer version of the shape: --tiny
"""

from __future__ import annotations

import argparse
import functools
import json
import multiprocessing as mp
import os
import statistics
import tempfile
import time
from pathlib import Path
from typing import Any

import torch

from infercore.benchmarks.workloads import WORKLOADS, Workload
from infercore.jit_builds import JitBuildCounter
from infercore.lora.target_modules import module_shapes

TARGETS = ("q_proj", "k_proj", "v_proj", "o_proj", "gate_proj", "up_proj", "down_proj")


def write_adapter(folder: Path, workload: Workload, rank: int, seed: int) -> Path:
    """A PEFT adapter of ``rank`` on every projection of ``workload``'s shape, with small random weights."""
    from safetensors.torch import save_file
    from transformers import AutoConfig

    folder.mkdir(parents=True, exist_ok=True)
    config = AutoConfig.for_model(**{k: v for k, v in workload.model_config.items() if k != "architectures"})
    shapes = module_shapes(config)
    gen = torch.Generator().manual_seed(seed)
    tensors = {}
    for layer in range(config.num_hidden_layers):
        for module in TARGETS:
            block = "self_attn" if module in ("q_proj", "k_proj", "v_proj", "o_proj") else "mlp"
            key = f"base_model.model.model.layers.{layer}.{block}.{module}"
            in_size, out_size = shapes[module]
            tensors[f"{key}.lora_A.weight"] = (torch.randn(rank, in_size, generator=gen) * 0.01).to(torch.bfloat16)
            tensors[f"{key}.lora_B.weight"] = (torch.randn(out_size, rank, generator=gen) * 0.01).to(torch.bfloat16)
    save_file(tensors, str(folder / "adapter_model.safetensors"))
    (folder / "adapter_config.json").write_text(json.dumps(
        {"peft_type": "LORA", "r": rank, "lora_alpha": 2 * rank, "target_modules": list(TARGETS), "bias": "none"}))
    return folder


def _engine(workload: Workload, folder: Path, lora: dict[str, Any] | None, args: argparse.Namespace) -> Any:
    from infercore import LLM

    kwargs: dict[str, Any] = dict(model=str(folder), load_format="dummy", dtype=workload.dtype,
                                  max_model_len=workload.max_model_len, skip_tokenizer_init=True,
                                  enforce_eager=args.enforce_eager)
    if args.max_num_seqs:
        kwargs["max_num_seqs"] = args.max_num_seqs
    return LLM(**kwargs, **(lora or {}))


def _throughput(workload: Workload, folder: Path, adapters: list[str], args: argparse.Namespace) -> dict[str, Any]:
    from infercore import LoRARequest

    lora = {"enable_lora": True, "max_loras": max(len(adapters), 1), "max_lora_rank": args.rank} if adapters else None
    llm = _engine(workload, folder, lora, args)
    prompts, max_tokens = workload.requests(args.seed)
    params = workload.sampling_params(max_tokens, args.seed)
    requests = [LoRARequest(f"adapter-{i}", i + 1, path) for i, path in enumerate(adapters)]
    loras = [requests[i % len(requests)] if requests else None for i in range(len(prompts))]
    llm.generate([{"prompt_token_ids": p} for p in prompts[:8]], params[:8], use_tqdm=False,
                 lora_request=loras[:8])  # warm-up: every adapter loaded
    walls = []
    with JitBuildCounter() as builds:
        for _ in range(args.repeat):
            llm.reset_prefix_cache()
            start = time.perf_counter()
            outputs = llm.generate([{"prompt_token_ids": p} for p in prompts], params, use_tqdm=False,
                                   lora_request=loras)
            walls.append(time.perf_counter() - start)
    tokens = sum(len(o.outputs[0].token_ids) for o in outputs)
    wall = statistics.median(walls)
    return {"setting": f"{len(adapters)} adapters" if adapters else "base", "requests": len(prompts),
            "output_tokens": tokens, "wall_s": round(wall, 3), "output_tok_s": round(tokens / wall, 1),
            "triton_builds_during_run": dict(builds.builds)}


def _latency(workload: Workload, folder: Path, adapters: list[str], args: argparse.Namespace) -> dict[str, Any]:
    from infercore import LoRARequest, SamplingParams

    lora = {"enable_lora": True, "max_loras": 1, "max_lora_rank": args.rank} if adapters else None
    llm = _engine(workload, folder, lora, args)
    request = LoRARequest("adapter-0", 1, adapters[0]) if adapters else None
    prompt = list(range(1, args.input_len + 1))

    def best(max_tokens: int, repeats: int) -> float:
        params = SamplingParams(temperature=0, max_tokens=max_tokens, ignore_eos=True, detokenize=False)
        times = []
        for _ in range(repeats):
            llm.reset_prefix_cache()
            start = time.perf_counter()
            llm.generate([{"prompt_token_ids": prompt}], params, use_tqdm=False, lora_request=request)
            times.append(time.perf_counter() - start)
        return min(times)

    best(8, 1)  # warm-up
    first, full = best(1, args.repeat), best(args.output_len, args.repeat)
    return {"setting": "1 adapter" if adapters else "base", "lora_fused_table": os.environ.get("INFERCORE_LORA_FUSED_TABLE"),
            "ttft_ms": round(first * 1000, 2),
            "decode_ms_per_token": round((full - first) / (args.output_len - 1) * 1000, 3)}


def _kernels(workload: Workload, args: argparse.Namespace) -> list[dict[str, Any]]:
    """``lora_apply`` (Triton) against its torch reference at the shape's projections: the largest error,
    the time per call replayed from a graph (as decode steps run it) and eager, the reference's time, the
    base GEMM's, and the bytes the op must move (x, the A and B of the slots in use, ``out`` read and
    written) over the graph time. Every token has an adapter, spread evenly over ``--num-adapters`` slots."""
    import numpy as np
    from transformers import AutoConfig

    from infercore.lora.step_state import LoRAStepState
    from infercore.ops import lora_reference
    from infercore_triton.lora import lora_apply

    config = AutoConfig.for_model(**{k: v for k, v in workload.model_config.items() if k != "architectures"})
    shapes = module_shapes(config)
    device, dtype, slots_n, rank = torch.device("cuda"), torch.bfloat16, args.num_adapters, args.rank
    layers = {"qkv": (shapes["q_proj"][0], [shapes["q_proj"][1], shapes["k_proj"][1], shapes["v_proj"][1]]),
              "o": (shapes["o_proj"][0], [shapes["o_proj"][1]]),
              "gate_up": (shapes["gate_proj"][0], [shapes["gate_proj"][1]] * 2),
              "down": (shapes["down_proj"][0], [shapes["down_proj"][1]])}
    rows = []
    for tokens in args.kernel_tokens:
        state = LoRAStepState(tokens, slots_n, device, pin=True)
        slots = (np.arange(tokens) % slots_n).astype(np.int32)
        state.set_step(slots, tokens)
        step = state.step_for(tokens)
        assert step is not None
        used = min(tokens, slots_n)
        for name, (in_size, sizes) in layers.items():
            x = torch.randn(tokens, in_size, device=device, dtype=dtype)
            a = torch.randn(slots_n, len(sizes) * rank, in_size, device=device, dtype=dtype) * 0.05
            b = torch.randn(slots_n, sum(sizes), rank, device=device, dtype=dtype) * 0.05
            offsets = tuple(int(v) for v in np.cumsum((0, *sizes)))
            out = torch.randn(tokens, sum(sizes), device=device, dtype=dtype)
            ref = out.clone()
            lora_apply(out, x, a, b, *step, offsets)
            lora_reference.lora_apply(ref, x, a, b, *step, offsets)
            err = float((out.float() - ref.float()).abs().max())
            weight = torch.randn(sum(sizes), in_size, device=device, dtype=dtype)
            apply = functools.partial(lora_apply, out, x, a, b, *step, offsets)
            graph_us = _graph_us(apply)
            moved = 2 * (tokens * in_size + used * a.shape[1] * in_size + used * sum(sizes) * rank
                         + 2 * tokens * sum(sizes))
            base_us = _graph_us(functools.partial(torch.nn.functional.linear, x, weight))
            rows.append({"workload": workload.name, "tokens": tokens, "layer": name, "max_abs_err": round(err, 5),
                         "path": _path(tokens, in_size, rank, sum(sizes)), "lora_graph_us": graph_us,
                         "lora_eager_us": _time_us(apply), "lora_gb_s": round(moved / graph_us / 1e3, 1),
                         "reference_us": _time_us(functools.partial(lora_reference.lora_apply, ref, x, a, b, *step,
                                                                    offsets), iters=5),
                         "base_gemm_graph_us": base_us, "lora_over_base_gemm": round(graph_us / base_us, 3)})
    return rows


def _path(tokens: int, k: int, rank: int, width: int) -> str:
    """Which of ``lora_apply``'s paths runs a step of ``tokens`` tokens at this shape."""
    from infercore_triton.lora import BGMV_MAX_TOKENS
    from infercore_triton.lora_fused import fused_settings

    if tokens > BGMV_MAX_TOKENS:
        return "sgmv"
    return "bgmv" if fused_settings(tokens, k, rank, width) is None else "bgmv_fused"


def _graph_us(fn: Any, calls: int = 20, iters: int = 20) -> float:
    """Time per call of ``fn`` replayed from a graph of ``calls`` calls (no launch cost on the host)."""
    fn()
    torch.cuda.synchronize()
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        for _ in range(calls):
            fn()
    graph.replay()
    torch.cuda.synchronize()
    start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
    start.record()
    for _ in range(iters):
        graph.replay()
    end.record()
    end.synchronize()
    return round(start.elapsed_time(end) * 1000 / (iters * calls), 2)


def _time_us(fn: Any, iters: int = 50) -> float:
    for _ in range(3):
        fn()
    torch.cuda.synchronize()
    start = time.perf_counter()
    for _ in range(iters):
        fn()
    torch.cuda.synchronize()
    return round((time.perf_counter() - start) / iters * 1e6, 2)


def _child(queue: Any, mode: str, workload: Workload, folder: Path, adapters: list[str],
           args: argparse.Namespace) -> None:
    queue.put(_throughput(workload, folder, adapters, args) if mode == "throughput"
              else _latency(workload, folder, adapters, args))


def _in_child(mode: str, workload: Workload, folder: Path, adapters: list[str], args: argparse.Namespace) -> dict:
    ctx = mp.get_context("spawn")
    queue = ctx.Queue()
    proc = ctx.Process(target=_child, args=(queue, mode, workload, folder, adapters, args))
    proc.start()
    result = queue.get()
    proc.join()
    return result


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("mode", choices=["throughput", "latency", "kernels"])
    parser.add_argument("--workload", choices=sorted(WORKLOADS), default="w-gpu")
    parser.add_argument("--tiny", action="store_true", help="a 2-layer, 64-wide version of the shape (CPU)")
    parser.add_argument("--num-adapters", type=int, default=8)
    parser.add_argument("--rank", type=int, default=16)
    parser.add_argument("--num-requests", type=int, default=None, help="override the workload's request count")
    parser.add_argument("--input-len", type=int, default=128)
    parser.add_argument("--output-len", type=int, default=256)
    parser.add_argument("--repeat", type=int, default=1)
    parser.add_argument("--max-num-seqs", type=int, default=None)
    parser.add_argument("--enforce-eager", action="store_true")
    parser.add_argument("--kernel-tokens", type=lambda v: [int(t) for t in v.split(",")],
                        default=[1, 8, 16, 64, 256, 2048], help="kernels: the token counts, comma-separated")
    parser.add_argument("--seed", type=int, default=0)
    args = parser.parse_args()
    workload = WORKLOADS[args.workload]
    if args.tiny:
        workload = workload.tiny()
    if args.num_requests:
        import dataclasses

        workload = dataclasses.replace(workload, num_requests=args.num_requests)
    if args.mode == "kernels":
        for row in _kernels(workload, args):
            print(json.dumps(row))
        return 0
    with tempfile.TemporaryDirectory(prefix="infercore-lora-") as tmp:
        folder = workload.write_model_folder(Path(tmp) / workload.name)
        count = args.num_adapters if args.mode == "throughput" else 1
        adapters = [str(write_adapter(Path(tmp) / f"adapter-{i}", workload, args.rank, seed=i)) for i in range(count)]
        base = _in_child(args.mode, workload, folder, [], args)
        print(json.dumps({"workload": workload.name, **base}))
        lora = _in_child(args.mode, workload, folder, adapters, args)
        print(json.dumps({"workload": workload.name, **lora}))
    if args.mode == "throughput":
        print(json.dumps({"lora_over_base_tok_s": round(lora["output_tok_s"] / base["output_tok_s"], 3),
                          "target": ">= 0.85"}))
    else:
        print(json.dumps({"lora_over_base_decode_ms": round(lora["decode_ms_per_token"] /
                                                            base["decode_ms_per_token"], 3), "target": "<= 1.15"}))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
