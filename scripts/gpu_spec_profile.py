"""Where a speculative step's time goes at batch 1 on the 8B shape: one profiled request with and without an
EAGLE-3 head (forced acceptance), JSON lines: wall and device time per output token, the kernels that take
longest, and the host calls that wait for the device (syncs, copies) or launch graphs. ``eagle3`` drafts
inside the verifying step (the default); ``eagle3_after`` catches up after the tokens reach the host, as
before that path existed; ``--methods eagle3,draft_model`` adds the 0.6B shape as a draft model. ``--rates`` then times each (unprofiled, best of 3) at those acceptance rates.

    python scripts/gpu_spec_profile.py [--rate 0.0] [--k 3] [--tokens 48] [--rates 0,0.7]
"""

from __future__ import annotations

import argparse
import json
import tempfile
import time
from collections import defaultdict
from pathlib import Path

import torch
from torch.profiler import ProfilerActivity, profile

from infercore import LLM, SamplingParams
from infercore.benchmarks.full_drafts import register_full_drafts
from infercore.benchmarks.kernel_timing import heaviest, kernel_totals
from infercore.benchmarks.spec_folders import MODEL_FOLDERS, speculative_config, write_folders
from infercore.benchmarks.speculative import force_acceptance_rate, periodic
from infercore.benchmarks.workloads import WORKLOADS
from infercore.spec_decode.model_proposer import ModelProposer

HOST_CALLS = ("cudaGraphLaunch", "cudaStreamSynchronize", "cudaDeviceSynchronize", "cudaMemcpyAsync",
              "cudaEventSynchronize", "cudaLaunchKernel", "cuLaunchKernel", "cuLaunchKernelEx", "aten::item")


def _profile(llm: LLM, prompt: list[int], tokens: int, label: str) -> None:
    params = SamplingParams(temperature=0, max_tokens=tokens, ignore_eos=True, detokenize=False)
    llm.generate([{"prompt_token_ids": prompt}], params, use_tqdm=False)
    llm.reset_prefix_cache()
    with profile(activities=[ProfilerActivity.CPU, ProfilerActivity.CUDA]) as prof:
        start = time.perf_counter()
        llm.generate([{"prompt_token_ids": prompt}], params, use_tqdm=False)
        wall = time.perf_counter() - start
    kernels = kernel_totals(prof.events())
    device_us = sum(us for _, us in kernels.values())
    host: dict[str, list[float]] = defaultdict(lambda: [0, 0.0])
    for ev in prof.events():
        if ev.name in HOST_CALLS:
            h = host[ev.name]
            h[0] += 1
            h[1] += ev.cpu_time
    print(json.dumps({"label": label, "tokens": tokens, "wall_ms_per_token": round(wall * 1000 / tokens, 3),
                      "device_ms_per_token": round(device_us / 1000 / tokens, 3),
                      "host_calls": {n: [c, round(t / 1000, 2)] for n, (c, t) in host.items()}}), flush=True)
    for name, count, ms in heaviest(kernels, 30):
        print(json.dumps({"label": label, "kernel": name, "count": count, "ms": ms}), flush=True)


def _timed(llm: LLM, prompt: list[int], tokens: int, label: str, rate: float) -> None:
    params = SamplingParams(temperature=0, max_tokens=tokens, ignore_eos=True, detokenize=False)
    best = float("inf")
    for _ in range(3):
        llm.reset_prefix_cache()
        start = time.perf_counter()
        llm.generate([{"prompt_token_ids": prompt}], params, use_tqdm=False)
        best = min(best, time.perf_counter() - start)
    print(json.dumps({"label": label, "rate": rate, "tokens": tokens, "ms_per_token": round(best * 1000 / tokens, 3)}),
          flush=True)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--workload", default="w-gpu-8b")
    parser.add_argument("--rate", type=float, default=0.0)
    parser.add_argument("--k", type=int, default=3)
    parser.add_argument("--tokens", type=int, default=48)
    parser.add_argument("--rates", default="", help="comma-separated acceptance rates to time unprofiled")
    parser.add_argument("--methods", default="eagle3", help="comma-separated: eagle3, draft_model (the 0.6B shape), "
                        "bench_ngram_full (n-gram drafts topped up to k: the verify step alone)")
    parser.add_argument("--skip-after", action="store_true", help="no runs drafting after the step")
    args = parser.parse_args()
    register_full_drafts()
    rates = [float(r) for r in args.rates.split(",") if r.strip()]
    workload = WORKLOADS[args.workload]
    prompt = periodic(list(range(1, 513)), 64)
    with tempfile.TemporaryDirectory() as tmp:
        folders = write_folders(Path(tmp), args.workload, "w-gpu")
        folder = workload.write_model_folder(Path(tmp) / workload.name)
        runs: list[tuple[str, dict | None]] = [("plain", None)]
        for method in args.methods.split(","):
            spec = speculative_config(method, args.k, folders)
            after = args.skip_after or method not in MODEL_FOLDERS
            runs += [(method, spec)] + ([] if after else [(f"{method}_after", spec)])
        for label, spec in runs:
            in_step = ModelProposer.drafts_in_step
            if label.endswith("_after"):
                ModelProposer.drafts_in_step = False
            llm = LLM(model=str(folder), load_format="dummy", dtype=workload.dtype,
                      max_model_len=workload.max_model_len, skip_tokenizer_init=True, max_num_seqs=8,
                      **({"speculative_config": spec} if spec else {}))
            if spec:
                force_acceptance_rate(llm, args.rate)
            _profile(llm, prompt, args.tokens, label)
            for rate in rates if spec else [None] if rates else []:
                if spec:
                    force_acceptance_rate(llm, rate)
                _timed(llm, prompt, 128, label, rate)
            ModelProposer.drafts_in_step = in_step
            del llm
            torch.cuda.empty_cache()


if __name__ == "__main__":
    main()
