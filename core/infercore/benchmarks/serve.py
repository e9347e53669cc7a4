"""`infercore bench serve`: load an OpenAI-compatible server through /v1/completions and measure latency.

Random prompts (token ids, or text made of random words) are sent streaming, either as a Poisson
process of ``--request-rate`` requests per second or with at most ``--max-concurrency`` in flight.
Prints TTFT / TPOT / ITL percentiles, request throughput and output tokens per second as one JSON line.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import random
import statistics
import sys
import time
from dataclasses import dataclass, field
from typing import Any

import httpx

_WORDS = ["the", "model", "engine", "token", "cache", "block", "request", "server", "stream", "batch", "prompt", "output", "latency", "kernel", "device", "memory", "schedule", "decode", "prefill", "sample"]


@dataclass
class RequestResult:
    """Timings of one request (seconds); ``error`` is set when it failed."""

    ttft: float = 0.0
    latency: float = 0.0
    itl: list[float] = field(default_factory=list)
    output_tokens: int = 0
    error: str | None = None


def make_prompts(num: int, input_len: int, token_ids: bool, vocab_size: int, seed: int) -> list[Any]:
    """``num`` random prompts of about ``input_len`` tokens (token-id lists, or text of random words)."""
    rng = random.Random(seed)
    if token_ids:
        return [[rng.randrange(vocab_size) for _ in range(input_len)] for _ in range(num)]
    return [" ".join(rng.choice(_WORDS) for _ in range(input_len)) for _ in range(num)]


async def _one(client: httpx.AsyncClient, url: str, body: dict[str, Any], headers: dict[str, str]) -> RequestResult:
    result = RequestResult()
    start = last = time.perf_counter()
    try:
        async with client.stream("POST", url, json=body, headers=headers) as response:
            if response.status_code != 200:
                result.error = f"HTTP {response.status_code}: {(await response.aread())[:200]!r}"
                return result
            async for line in response.aiter_lines():
                if not line.startswith("data: ") or line == "data: [DONE]":
                    continue
                chunk = json.loads(line[6:])
                if "error" in chunk:
                    result.error = str(chunk["error"].get("message"))[:200]
                    return result
                if not chunk.get("choices"):
                    usage = chunk.get("usage") or {}
                    result.output_tokens = usage.get("completion_tokens", result.output_tokens)
                    continue
                now = time.perf_counter()
                if result.ttft == 0.0:
                    result.ttft = now - start
                else:
                    result.itl.append(now - last)
                last = now
    except (httpx.HTTPError, ValueError) as exc:
        result.error = f"{type(exc).__name__}: {exc}"[:200]
        return result
    result.latency = time.perf_counter() - start
    return result


def _percentiles(values: list[float], prefix: str) -> dict[str, float]:
    if not values:
        return {f"{prefix}_{p}_ms": 0.0 for p in ("mean", "p50", "p90", "p99")}
    ordered = sorted(values)

    def pct(q: float) -> float:
        return ordered[min(len(ordered) - 1, int(q * len(ordered)))] * 1000

    return {f"{prefix}_mean_ms": statistics.fmean(ordered) * 1000, f"{prefix}_p50_ms": pct(0.5),
            f"{prefix}_p90_ms": pct(0.9), f"{prefix}_p99_ms": pct(0.99)}


def summarize(results: list[RequestResult], duration: float) -> dict[str, Any]:
    """Aggregate figures of a run."""
    ok = [r for r in results if r.error is None]
    tpot = [(r.latency - r.ttft) / (r.output_tokens - 1) for r in ok if r.output_tokens > 1]
    total_out = sum(r.output_tokens for r in ok)
    summary: dict[str, Any] = {
        "completed": len(ok), "failed": len(results) - len(ok), "duration_s": duration,
        "request_throughput": len(ok) / duration if duration else 0.0,
        "output_throughput_tok_s": total_out / duration if duration else 0.0, "total_output_tokens": total_out,
    }
    summary |= _percentiles([r.ttft for r in ok], "ttft")
    summary |= _percentiles(tpot, "tpot")
    summary |= _percentiles([x for r in ok for x in r.itl], "itl")
    summary |= _percentiles([r.latency for r in ok], "e2el")
    errors = [r.error for r in results if r.error is not None]
    if errors:
        summary["first_error"] = errors[0]
    return summary


async def _model_name(client: httpx.AsyncClient, base_url: str, headers: dict[str, str]) -> str:
    response = await client.get(f"{base_url}/v1/models", headers=headers)
    response.raise_for_status()
    return response.json()["data"][0]["id"]


async def run_benchmark(args: argparse.Namespace) -> dict[str, Any]:
    """Run the benchmark described by ``args`` and return its summary."""
    from tqdm import tqdm

    base_url = args.base_url.rstrip("/")
    headers = {"Authorization": f"Bearer {args.api_key}"} if args.api_key else {}
    prompts = make_prompts(args.num_prompts, args.input_len, args.prompt_type == "token-ids", args.vocab_size,
                           args.seed)
    limits = httpx.Limits(max_connections=None, max_keepalive_connections=None)
    async with httpx.AsyncClient(timeout=httpx.Timeout(args.timeout), limits=limits) as client:
        model = args.model or await _model_name(client, base_url, headers)
        semaphore = asyncio.Semaphore(args.max_concurrency) if args.max_concurrency else None
        progress = tqdm(total=len(prompts), disable=args.no_progress, file=sys.stderr, desc="requests")
        rng = random.Random(args.seed)

        async def send(prompt: Any) -> RequestResult:
            body = {"model": model, "prompt": prompt, "max_tokens": args.output_len, "temperature": 0.0,
                    "ignore_eos": True, "stream": True, "stream_options": {"include_usage": True}}
            if semaphore is None:
                result = await _one(client, f"{base_url}/v1/completions", body, headers)
            else:
                async with semaphore:
                    result = await _one(client, f"{base_url}/v1/completions", body, headers)
            progress.update(1)
            return result

        start = time.perf_counter()
        tasks = []
        for prompt in prompts:
            tasks.append(asyncio.create_task(send(prompt)))
            if args.request_rate != float("inf"):
                await asyncio.sleep(rng.expovariate(args.request_rate))
        results = await asyncio.gather(*tasks)
        duration = time.perf_counter() - start
        progress.close()
    summary = summarize(list(results), duration)
    rate = args.request_rate if args.request_rate != float("inf") else "inf"  # JSON has no Infinity
    summary.update(base_url=base_url, model=model, num_prompts=args.num_prompts, request_rate=rate,
                   max_concurrency=args.max_concurrency, input_len=args.input_len, output_len=args.output_len,
                   prompt_type=args.prompt_type)
    return summary


def add_bench_serve_parser(subparsers: Any) -> argparse.ArgumentParser:
    """Register ``bench serve``."""
    parser = subparsers.add_parser("serve", help="latency and throughput of a running OpenAI-compatible server",
                                   description=__doc__)
    parser.add_argument("--base-url", default="http://127.0.0.1:8000", help="server address")
    parser.add_argument("--model", default=None, help="model name to send (default: the server's first model)")
    parser.add_argument("--api-key", default=None, help="bearer key, if the server needs one")
    parser.add_argument("--num-prompts", type=int, default=100, help="requests to send")
    parser.add_argument("--request-rate", type=float, default=float("inf"),
                        help="mean requests per second (Poisson arrivals); inf sends all at once")
    parser.add_argument("--max-concurrency", type=int, default=None, help="most requests in flight at once")
    parser.add_argument("--input-len", type=int, default=32, help="prompt length in tokens (or words)")
    parser.add_argument("--output-len", type=int, default=32, help="tokens to generate per request")
    parser.add_argument("--prompt-type", choices=["token-ids", "text"], default="token-ids",
                        help="random token-id prompts or random-word text prompts")
    parser.add_argument("--vocab-size", type=int, default=256, help="token ids are drawn below this")
    parser.add_argument("--seed", type=int, default=0, help="seed of the prompts and arrival times")
    parser.add_argument("--timeout", type=float, default=600.0, help="seconds before one request fails")
    parser.add_argument("--no-progress", action="store_true", help="no progress bar")
    parser.set_defaults(func=run_bench_serve)
    return parser


def run_bench_serve(args: argparse.Namespace) -> int:
    """Entry of ``infercore bench serve``: print the summary as one JSON line; non-zero if all failed."""
    if args.num_prompts < 1 or (args.max_concurrency is not None and args.max_concurrency < 1):
        print("infercore bench serve: --num-prompts and --max-concurrency must be at least 1", file=sys.stderr)
        return 2
    if args.request_rate <= 0:
        print("infercore bench serve: --request-rate must be positive (or inf)", file=sys.stderr)
        return 2
    try:
        summary = asyncio.run(run_benchmark(args))
    except httpx.HTTPError as exc:
        print(f"infercore bench serve: could not reach {args.base_url} ({exc}); start a server with "
              "`infercore serve` or point --base-url at one", file=sys.stderr)
        return 1
    print(json.dumps(summary))
    return 0 if summary["completed"] else 1
