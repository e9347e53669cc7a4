"""Time of SamplingMetadata.build + Sampler.forward for one decode step (a figure, not a test).

    python tests/sample/bench_sampler.py [--device cpu] [--batch 256] [--vocab 151936]
"""

from __future__ import annotations

import argparse
import statistics
import time
from collections.abc import Callable

import torch

from infercore.sample import Sampler, SamplingMetadata
from infercore.sampling_params import SamplingParams


def peaked_logits(batch: int, vocab: int, device: torch.device) -> torch.Tensor:
    """Model-like rows: a broad background with a few dozen clearly preferred tokens."""
    logits = torch.randn(batch, vocab, device=device) * 2
    favourites = torch.randint(0, vocab, (batch, 32), device=device)
    return logits.scatter_add_(1, favourites, torch.rand(batch, 32, device=device) * 6 + 8)


def flat_logits(batch: int, vocab: int, device: torch.device) -> torch.Tensor:
    """Standard-normal rows: at temperature 0.6 the 0.95 nucleus spans most of the vocabulary."""
    return torch.randn(batch, vocab, device=device)


def time_step(params: list[SamplingParams], logits: torch.Tensor, repeats: int) -> tuple[float, float]:
    """Median milliseconds of build, and of build + forward (+ device sync)."""
    device = logits.device
    batch, vocab = logits.shape
    prompts = [list(range(100))] * batch
    outputs = [list(range(100, 150))] * batch
    sampler = Sampler()
    builds, totals = [], []
    for _ in range(repeats + 1):
        work = logits.clone()
        if device.type == "cuda":
            torch.cuda.synchronize()
        start = time.perf_counter()
        metadata = SamplingMetadata.build(params, prompts, outputs, vocab, device)
        built = time.perf_counter()
        sampler(work, metadata).sampled_token_ids.tolist()
        builds.append(built - start)
        totals.append(time.perf_counter() - start)
    return statistics.median(builds[1:]) * 1000, statistics.median(totals[1:]) * 1000


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--device", default="cpu")
    parser.add_argument("--batch", type=int, default=256)
    parser.add_argument("--vocab", type=int, default=151936)
    parser.add_argument("--repeats", type=int, default=5)
    args = parser.parse_args()
    device = torch.device(args.device)
    cases: list[tuple[str, SamplingParams, Callable[[int, int, torch.device], torch.Tensor]]] = [
        ("greedy", SamplingParams(temperature=0), peaked_logits),
        ("temperature 0.6", SamplingParams(temperature=0.6), peaked_logits),
        ("temperature 0.6 + top_p 0.95, peaked logits", SamplingParams(temperature=0.6, top_p=0.95), peaked_logits),
        ("temperature 0.6 + top_p 0.95, flat logits", SamplingParams(temperature=0.6, top_p=0.95), flat_logits),
        ("temperature 0.6 + top_p 0.95 + seed, peaked", SamplingParams(temperature=0.6, top_p=0.95, seed=0),
         peaked_logits),
        ("temperature 0.6 + top_k 50 + penalties", SamplingParams(
            temperature=0.6, top_k=50, presence_penalty=0.5, repetition_penalty=1.1), peaked_logits),
    ]
    print(f"device={device} batch={args.batch} vocab={args.vocab} threads={torch.get_num_threads()}")
    for name, params, make_logits in cases:
        logits = make_logits(args.batch, args.vocab, device)
        build_ms, total_ms = time_step([params] * args.batch, logits, args.repeats)
        print(f"{name:48s} build {build_ms:8.2f} ms   build+forward {total_ms:9.2f} ms")


if __name__ == "__main__":
    main()
