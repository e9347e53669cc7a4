"""The sampler at the W-GPU decode shape: w-gpu-sampling's options against plain temperature sampling.

Builds one step's metadata from the runner's per-row state (``SamplingRowState``) for ``--batch`` rows
of ``--vocab`` float32 logits, once with W-GPU's plain temperature and once with w-gpu-sampling's
options (top-p 0.9, top-k 50, repetition 1.1, presence 0.5, a seed per request), and times
``Sampler.forward`` on them: the median microseconds per call from ``triton.testing.do_bench`` on a
GPU, of ``--repeat`` timed calls on a CPU. Each option line also times the sampler's parts alone
(``apply_penalties``, the top-k/top-p threshold and the thresholded ``gumbel_argmax``). Prints one
JSON line per case and a last line with the ratio of the two.

The penalties change the logits in place, so later calls see penalised logits again; the work per call
(one pass over the logits, reads of the table rows) does not depend on their values.

    python benchmarks/sampler.py                              # the H200 figure: 256 x 151936
    python benchmarks/sampler.py --device cpu --batch 8       # a smoke test
"""

from __future__ import annotations

import argparse
import json
import statistics
import time
from collections.abc import Callable
from typing import Any

import numpy as np
import torch

from infercore.benchmarks.workloads import WORKLOADS
from infercore.sample import Sampler, SamplingMetadata
from infercore.sample.row_state import SamplingRowState
from infercore.sampling_params import SamplingParams

#: Prompt tokens per row in the penalty tables (W-GPU's prompts are 128 tokens long).
PROMPT_LEN = 128


def model_like_logits(batch: int, vocab: int, device: torch.device, seed: int = 0) -> torch.Tensor:
    """A broad background with a few dozen clearly preferred tokens per row, as a model's logits."""
    g = torch.Generator().manual_seed(seed)
    logits = torch.randn(batch, vocab, generator=g) * 2
    favourites = torch.randint(0, vocab, (batch, 32), generator=g)
    logits.scatter_add_(1, favourites, torch.rand(batch, 32, generator=g) * 6 + 8)
    return logits.to(device)


def case_params(name: str, batch: int) -> list[SamplingParams]:
    """The sampling parameters of ``batch`` requests of a named workload ("w-gpu" or "w-gpu-sampling")."""
    return WORKLOADS[name].sampling_params([256] * batch)


def step_metadata(params: list[SamplingParams], vocab: int, device: torch.device) -> SamplingMetadata:
    """One decode step's metadata, gathered from the per-row state the runner keeps (prompts in the
    penalty tables, 16 outputs produced so far)."""
    batch = len(params)
    state = SamplingRowState(batch, vocab, device, pin_memory=device.type == "cuda")
    rng = np.random.default_rng(0)
    for row, p in enumerate(params):
        prompt = rng.integers(0, vocab, PROMPT_LEN).tolist()
        state.add(row, p, prompt, rng.integers(0, vocab, 16).tolist(), eos_token_id=None)
    return state.gather(np.arange(batch), np.full(batch, 16, dtype=np.int64),
                        seed_source=np.random.default_rng(1))


def median_us(fn: Callable[[], Any], device: torch.device, repeat: int) -> float:
    """Median microseconds per call of ``fn``: ``do_bench`` on a GPU, a wall-clock loop on a CPU."""
    if device.type == "cuda":
        import triton.testing

        return float(triton.testing.do_bench(fn, return_mode="median")) * 1e3
    fn()
    times = []
    for _ in range(repeat):
        started = time.perf_counter()
        fn()
        times.append(time.perf_counter() - started)
    return statistics.median(times) * 1e6


def parts(sampler: Sampler, logits: torch.Tensor, metadata: SamplingMetadata, device: torch.device,
          repeat: int) -> dict[str, float]:
    """Median microseconds of each option's step alone, on the same logits and metadata."""
    times: dict[str, float] = {}
    assert metadata.temperature is not None and metadata.seeds is not None
    temperature, seeds = metadata.temperature, metadata.seeds
    if metadata.penalties is not None:
        penalties, op = metadata.penalties, sampler._op("apply_penalties", device)
        times["apply_penalties"] = median_us(lambda: penalties.apply(logits, op), device, repeat)
    draw = sampler._op("gumbel_argmax", device)
    if metadata.top_k_top_p is not None:
        cut = metadata.top_k_top_p
        times["top_k_top_p_threshold"] = median_us(lambda: cut.threshold(logits), device, repeat)
        threshold = cut.threshold(logits)
        times["gumbel_argmax_thresholded"] = median_us(
            lambda: draw(logits, temperature, seeds, threshold=threshold), device, repeat)
    else:
        times["gumbel_argmax"] = median_us(lambda: draw(logits, temperature, seeds), device, repeat)
    return times


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--device", default="cuda")
    parser.add_argument("--batch", type=int, default=256)
    parser.add_argument("--vocab", type=int, default=151936)
    parser.add_argument("--repeat", type=int, default=20, help="timed calls per figure on a CPU")
    args = parser.parse_args()
    device = torch.device(args.device)
    logits = model_like_logits(args.batch, args.vocab, device)
    sampler = Sampler(seed=0)
    results = {}
    for name in ("w-gpu", "w-gpu-sampling"):
        metadata = step_metadata(case_params(name, args.batch), args.vocab, device)
        work = logits.clone()
        us = median_us(lambda metadata=metadata, work=work: sampler(work, metadata), device, args.repeat)
        results[name] = us
        print(json.dumps({"case": name, "device": str(device), "batch": args.batch, "vocab": args.vocab,
                          "dtype": "float32", "us_per_call": round(us, 1),
                          "parts_us": {k: round(v, 1) for k, v in parts(sampler, work, metadata, device,
                                                                        args.repeat).items()}}))
    print(json.dumps({"summary": True, "sampling_over_plain": round(results["w-gpu-sampling"] / results["w-gpu"], 3),
                      "extra_us_per_step": round(results["w-gpu-sampling"] - results["w-gpu"], 1)}))


if __name__ == "__main__":
    main()
