"""`infercore bench serve`: load an OpenAI-compatible server through /v1/completions and measure latency.

Random prompts (token ids, or text made of random words) are sent streaming, either as a Poisson
process of ``--request-rate`` requests per second or with at most ``--max-concurrency`` in flight.
Prints TTFT / TPOT / ITL percentiles, request throughput and output tokens per second as one JSON line.
"""

from __future__ import annotations

import argparse
import asyncio
import functools
import json
import multiprocessing
import random
import statistics
import sys
import time
from collections.abc import Coroutine
from concurrent.futures import ProcessPoolExecutor
from dataclasses import dataclass, field
from typing import Any
from urllib.parse import urlsplit

import httpx

from infercore.benchmarks.serve_client import Event, LeanClient, StreamedResponse
from infercore.engine.latency_trace import TraceWriter, now_ns, open_writer
from infercore.gc_heap import freeze_startup_heap

#: Above this share of one core, a client process may be slowing the load it measures.
CLIENT_BUSY = 0.8
#: Added to --seed once per rate of a sweep after the first, so each rate sends prompts of its own.
RATE_SEED_STEP = 104729
#: Added to --seed for the offline prefill probes' prompts, so they differ from the run's.
PROBE_SEED_OFFSET = 7919
_WORDS = ["the", "model", "engine", "token", "cache", "block", "request", "server", "stream", "batch", "prompt", "output", "latency", "kernel", "device", "memory", "schedule", "decode", "prefill", "sample"]


@dataclass
class RequestResult:
    """Timings of one request (seconds); ``error`` is set when it failed."""

    ttft: float = 0.0
    latency: float = 0.0
    itl: list[float] = field(default_factory=list)
    output_tokens: int = 0
    error: str | None = None


def make_prompts(num: int, input_len: int, token_ids: bool, vocab_size: int, seed: int,
                 tokenizer: Any = None) -> list[Any]:
    """``num`` random prompts of ``input_len`` tokens: token-id lists, or text of random words (as many words
    as tokens; with a ``tokenizer``, the text of the first ``input_len`` tokens of enough words)."""
    rng = random.Random(seed)
    if token_ids:
        return [[rng.randrange(vocab_size) for _ in range(input_len)] for _ in range(num)]
    texts = [" ".join(rng.choice(_WORDS) for _ in range(input_len)) for _ in range(num)]
    if tokenizer is None:
        return texts
    fitted = []
    for text in texts:
        ids = tokenizer.encode(text, add_special_tokens=False)
        while len(ids) < input_len:  # words of less than a token each: add more
            text += " " + " ".join(rng.choice(_WORDS) for _ in range(input_len - len(ids)))
            ids = tokenizer.encode(text, add_special_tokens=False)
        fitted.append(tokenizer.decode(ids[:input_len]))
    return fitted


@functools.cache
def load_tokenizer(path: str | None) -> Any:
    """The tokenizer text prompts are cut to length with (``--tokenizer``), or None; loaded once per path
    (a sweep and its offline run share it)."""
    if path is None:
        return None
    from transformers import AutoTokenizer

    return AutoTokenizer.from_pretrained(path)


def _result_of(start_ns: int, end_ns: int, events: list[Event], record: dict[str, Any] | None) -> RequestResult:
    """A request's timings from its events (each timed as it arrived), parsed after the response ended."""
    result = RequestResult()
    last = start_ns
    for arrival, data in events:
        if data == b"[DONE]":
            continue
        chunk = json.loads(data)
        if record is not None:
            record["events"].append(arrival)
            record["id"] = chunk.get("id", record["id"])
        if "error" in chunk:
            result.error = str(chunk["error"].get("message"))[:200]
            return result
        if not chunk.get("choices"):
            usage = chunk.get("usage") or {}
            result.output_tokens = usage.get("completion_tokens", result.output_tokens)
            continue
        if result.ttft == 0.0:
            result.ttft = (arrival - start_ns) / 1e9
        else:
            result.itl.append((arrival - last) / 1e9)
        last = arrival
    result.latency = (end_ns - start_ns) / 1e9
    return result


async def _httpx_events(client: httpx.AsyncClient, url: str, body: dict[str, Any], headers: dict[str, str]
                        ) -> StreamedResponse:
    async with client.stream("POST", url, json=body, headers=headers) as response:
        if response.status_code != 200:
            return StreamedResponse(response.status_code, body=await response.aread())
        events = [(now_ns(), line[5:].lstrip(" ").encode()) async for line in response.aiter_lines()
                  if line.startswith("data:")]
        return StreamedResponse(200, events)


async def _lean_events(client: LeanClient, path: str, payload: bytes, headers: dict[str, str],
                       timeout: float) -> StreamedResponse:
    """``client.post_events`` within ``timeout`` seconds (a timer on this task: no extra task or hop)."""
    task = asyncio.current_task()
    assert task is not None
    timer = asyncio.get_running_loop().call_later(timeout, task.cancel)
    try:
        return await client.post_events(path, payload, headers)
    except asyncio.CancelledError:
        if timer.when() <= asyncio.get_running_loop().time():
            raise TimeoutError(f"no complete response within {timeout:g} s") from None
        raise
    finally:
        timer.cancel()


async def _one(client: httpx.AsyncClient | LeanClient, url: str, body: dict[str, Any], headers: dict[str, str],
               trace: TraceWriter | None = None, label: str | None = None, timeout: float = 600.0
               ) -> RequestResult:
    record: dict[str, Any] | None = {"label": label, "id": None, "send": 0, "events": []} if trace else None
    start = now_ns()
    try:
        if isinstance(client, LeanClient):
            payload = json.dumps(body).encode()
            start = now_ns()
            response = await _lean_events(client, urlsplit(url).path, payload, headers, timeout)
        else:
            response = await _httpx_events(client, url, body, headers)
        end = now_ns()
        if response.status != 200:
            return RequestResult(error=f"HTTP {response.status}: {response.body[:200]!r}")
        if record is not None:
            record["send"] = start
        result = _result_of(start, end, response.events, record)
    except (httpx.HTTPError, OSError, asyncio.IncompleteReadError, ValueError) as exc:
        return RequestResult(error=f"{type(exc).__name__}: {exc}"[:200])
    if trace is not None and record is not None and result.error is None:
        trace.write(record)
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


@dataclass
class ShareResult:
    """What one client process measured: its requests, its CPU seconds and its wall-clock span."""

    results: list[RequestResult]
    cpu_s: float
    start: float
    end: float


def _shares(items: list[Any], concurrency: int | None, num_workers: int) -> list[tuple[list[Any], int | None]]:
    """Each client process's requests and concurrency. With a concurrency, a process's requests are in
    proportion to its slots (largest remainder), so every process runs as many requests per slot as
    the whole client would: no process is left with a last, nearly empty round of requests while the
    others have finished (what an even split of requests over uneven slots does)."""
    if concurrency is None:
        return [(items[w::num_workers], None) for w in range(num_workers)]
    slots = [_split(concurrency, w, num_workers) or 0 for w in range(num_workers)]
    exact = [len(items) * s / concurrency for s in slots]
    counts = [int(x) for x in exact]
    by_remainder = sorted(range(num_workers), key=lambda w: (counts[w] - exact[w], w))
    for w in by_remainder[:len(items) - sum(counts)]:
        counts[w] += 1
    starts = [sum(counts[:w]) for w in range(num_workers)]
    return [(items[start:start + count], s) for start, count, s in zip(starts, counts, slots)]


def _split(total: int | None, worker: int, num_workers: int) -> int | None:
    """Worker ``worker``'s part of ``total`` (None stays None); parts differ by at most one."""
    if total is None:
        return None
    return total // num_workers + (1 if worker < total % num_workers else 0)


async def _run_share(args: argparse.Namespace, model: str, prompts: list[Any], concurrency: int | None,
                     rate: float, seed: int, show_progress: bool, barrier: Any = None) -> ShareResult:
    """Send ``prompts`` with at most ``concurrency`` in flight at ``rate`` requests/s; time each. With a
    ``barrier`` (one per client process), no process starts its load before every one is ready."""
    from tqdm import tqdm

    base_url = args.base_url.rstrip("/")
    headers = {"Authorization": f"Bearer {args.api_key}"} if args.api_key else {}
    limits = httpx.Limits(max_connections=None, max_keepalive_connections=None)
    trace = open_writer("client")
    lean = LeanClient(base_url) if _use_lean_client(args) else None
    # The prompts and every import live through the load: a full collection walking them would pause
    # this client's streams, and the gaps it measures would be its own.
    freeze_startup_heap()
    if barrier is not None:
        barrier.wait()
    cpu_start, wall_start = time.process_time(), time.time()
    async with httpx.AsyncClient(timeout=httpx.Timeout(args.timeout), limits=limits) as http:
        client = lean or http
        semaphore = asyncio.Semaphore(concurrency) if concurrency else None
        progress = tqdm(total=len(prompts), disable=not show_progress, file=sys.stderr, desc="requests")
        rng = random.Random(seed)

        async def send(prompt: Any) -> RequestResult:
            body = {"model": model, "prompt": prompt, "max_tokens": args.output_len, "temperature": 0.0,
                    "ignore_eos": True, "stream": True, "stream_options": {"include_usage": True}}
            url = f"{base_url}/v1/completions"
            if semaphore is None:
                result = await _one(client, url, body, headers, trace, args.label, args.timeout)
            else:
                async with semaphore:
                    result = await _one(client, url, body, headers, trace, args.label, args.timeout)
            progress.update(1)
            return result

        tasks = []
        for prompt in prompts:
            tasks.append(asyncio.create_task(send(prompt)))
            if rate != float("inf"):
                await asyncio.sleep(rng.expovariate(rate))
        results = await asyncio.gather(*tasks)
        progress.close()
    if lean is not None:
        await lean.close()
    if trace is not None:
        trace.close()
    return ShareResult(list(results), time.process_time() - cpu_start, wall_start, time.time())


def _worker(args: argparse.Namespace, model: str, prompts: list[Any], concurrency: int | None, rate: float,
            seed: int, barrier: Any) -> ShareResult:
    """A client process's entry (importable for the spawn context)."""
    return _run_loop(_run_share(args, model, prompts, concurrency, rate, seed, show_progress=False,
                                barrier=barrier))


def _use_lean_client(args: argparse.Namespace) -> bool:
    """Whether to load the server with :class:`LeanClient` (``--http-client``; auto: for http:// URLs)."""
    return args.http_client == "lean" or (args.http_client == "auto" and args.base_url.startswith("http://"))


def _run_loop(coro: Coroutine[Any, Any, ShareResult]) -> ShareResult:
    """Run a client process's load on uvloop where it is installed (less of the client's own time)."""
    try:
        import uvloop
    except ImportError:
        return asyncio.run(coro)
    return uvloop.run(coro)


def _run_shares(args: argparse.Namespace, model: str, prompts: list[Any], rate: float) -> list[ShareResult]:
    """Run the load in ``--num-workers`` client processes (in this one when it is 1)."""
    n = args.num_workers
    if n == 1:
        return [_run_loop(_run_share(args, model, prompts, args.max_concurrency, rate, args.seed,
                                       show_progress=not args.no_progress))]
    shares = [(share, concurrency, rate / n, args.seed + w)
              for w, (share, concurrency) in enumerate(_shares(prompts, args.max_concurrency, n)) if share]
    picklable = argparse.Namespace(**{k: v for k, v in vars(args).items() if k != "func"})
    context = multiprocessing.get_context("spawn")
    # Processes start (spawn, imports, connections) at different times; the barrier starts their loads
    # together, so the measured window never holds one process's load without the others'.
    with context.Manager() as manager, ProcessPoolExecutor(max_workers=len(shares), mp_context=context) as pool:
        barrier = manager.Barrier(len(shares))
        futures = [pool.submit(_worker, picklable, model, share, concurrency, share_rate, seed, barrier)
                   for share, concurrency, share_rate, seed in shares]
        return [future.result() for future in futures]


def _client_cpu(shares: list[ShareResult], duration: float) -> dict[str, Any]:
    """The client's own CPU use: total seconds and the busiest process's share of one core."""
    busiest = max((s.cpu_s / max(s.end - s.start, 1e-9) for s in shares), default=0.0)
    return {"num_workers": len(shares), "client_cpu_s": sum(s.cpu_s for s in shares),
            "client_cpu_busiest_worker": round(busiest, 3),
            "client_start_spread_s": round(max(s.start for s in shares) - min(s.start for s in shares), 4),
            "client_end_spread_s": round(max(s.end for s in shares) - min(s.end for s in shares), 4),
            "client_cpu_util": sum(s.cpu_s for s in shares) / duration / len(shares) if duration else 0.0}


def _model_name_sync(base_url: str, api_key: str | None, timeout: float) -> str:
    headers = {"Authorization": f"Bearer {api_key}"} if api_key else {}
    response = httpx.get(f"{base_url.rstrip('/')}/v1/models", headers=headers, timeout=timeout)
    response.raise_for_status()
    return response.json()["data"][0]["id"]


def run_benchmark(args: argparse.Namespace, rate: float | None = None, seed: int | None = None) -> dict[str, Any]:
    """Run the benchmark described by ``args`` (at ``rate``, default its first ``--request-rate``; prompts of
    ``seed``, default ``--seed``) and return its summary."""
    rate = args.request_rate[0] if rate is None else rate
    seed = args.seed if seed is None else seed
    prompts = make_prompts(args.num_prompts, args.input_len, args.prompt_type == "token-ids", args.vocab_size,
                           seed, load_tokenizer(args.tokenizer))
    model = args.model or _model_name_sync(args.base_url, args.api_key, args.timeout)
    shares = _run_shares(args, model, prompts, rate)
    duration = max(s.end for s in shares) - min(s.start for s in shares)
    summary = summarize([r for s in shares for r in s.results], duration)
    summary |= _client_cpu(shares, duration)
    if summary["client_cpu_busiest_worker"] > CLIENT_BUSY:
        print(f"infercore bench serve: a client process was {summary['client_cpu_busiest_worker']:.0%} busy; "
              "the client may be the bottleneck, raise --num-workers", file=sys.stderr)
    summary.update(base_url=args.base_url.rstrip("/"), model=model, num_prompts=args.num_prompts,
                   request_rate=rate if rate != float("inf") else "inf",  # JSON has no Infinity
                   max_concurrency=args.max_concurrency, input_len=args.input_len, output_len=args.output_len,
                   prompt_type=args.prompt_type)
    if args.label is not None:
        summary["label"] = args.label
    return summary


def sweep_table(summaries: list[dict[str, Any]]) -> str:
    """A markdown table of a request-rate sweep: throughput and TTFT / TPOT p50 / p99 per rate."""
    rows = ["| req/s | completed | output tok/s | TTFT p50 / p99 ms | TPOT p50 / p99 ms |", "|---|---|---|---|---|"]
    for s in summaries:
        rows.append(f"| {s['request_rate']} | {s['completed']} | {s['output_throughput_tok_s']:,.0f} | "
                    f"{s['ttft_p50_ms']:.1f} / {s['ttft_p99_ms']:.1f} | {s['tpot_p50_ms']:.2f} / {s['tpot_p99_ms']:.2f} |")
    return "\n".join(rows)


def add_bench_serve_parser(subparsers: Any) -> argparse.ArgumentParser:
    """Register ``bench serve``."""
    parser = subparsers.add_parser("serve", help="latency and throughput of a running OpenAI-compatible server",
                                   description=__doc__)
    parser.add_argument("--base-url", default="http://127.0.0.1:8000", help="server address")
    parser.add_argument("--model", default=None, help="model name to send (default: the server's first model)")
    parser.add_argument("--api-key", default=None, help="bearer key, if the server needs one")
    parser.add_argument("--num-prompts", type=int, default=100, help="requests to send")
    parser.add_argument("--request-rate", type=float, nargs="+", default=[float("inf")], metavar="RATE",
                        help="mean requests per second (Poisson arrivals); inf sends all at once; several "
                             "rates run a sweep (one JSON line each, and a table on stderr)")
    parser.add_argument("--max-concurrency", type=int, default=None, help="most requests in flight at once")
    parser.add_argument("--num-workers", type=int, default=1,
                        help="client processes sharing the load (and the concurrency), so the client is "
                             "never the bottleneck it measures")
    parser.add_argument("--input-len", type=int, default=32, help="prompt length in tokens (or words)")
    parser.add_argument("--output-len", type=int, default=32, help="tokens to generate per request")
    parser.add_argument("--prompt-type", choices=["token-ids", "text"], default="token-ids",
                        help="random token-id prompts or random-word text prompts")
    parser.add_argument("--tokenizer", default=None,
                        help="with --prompt-type text: cut each prompt to --input-len tokens of this tokenizer "
                             "(the server's), rather than as many words")
    parser.add_argument("--vocab-size", type=int, default=256, help="token ids are drawn below this")
    parser.add_argument("--seed", type=int, default=0,
                        help="seed of the prompts and arrival times (each later rate of a sweep adds its own "
                             "offset: a server's prefix cache never holds a rate's prompts from the last one)")
    parser.add_argument("--timeout", type=float, default=600.0, help="seconds before one request fails")
    parser.add_argument("--http-client", choices=["auto", "lean", "httpx"], default="auto",
                        help="the lean built-in HTTP/1.1 client (plain http:// only; about a millisecond less "
                             "of client time per request) or httpx; auto picks lean for http:// URLs")
    parser.add_argument("--offline-model", default=None,
                        help="also run the same requests offline through LLM.generate on this model (after the "
                             "online run, in this process) and report online tok/s as a fraction of offline")
    parser.add_argument("--offline-engine-args", default=None, metavar="JSON",
                        help='engine arguments of the offline run, e.g. \'{"load_format": "dummy"}\'')
    parser.add_argument("--offline-prefill-probes", type=int, default=0, metavar="N",
                        help="with --offline-model, also time N prompts of --input-len prefilled alone (one "
                             "output token each, prompts unlike the run's so no cached prefix helps): the "
                             "offline batch-1 prefill time that TTFT at concurrency 1 is judged against")
    parser.add_argument("--label", default=None, help="a name for this run, copied into its JSON line")
    parser.add_argument("--no-progress", action="store_true", help="no progress bar")
    parser.set_defaults(func=run_bench_serve)
    return parser


def _check_args(args: argparse.Namespace) -> str | None:
    """What is wrong with the arguments, as a sentence; None if nothing."""
    if args.num_prompts < 1 or (args.max_concurrency is not None and args.max_concurrency < 1):
        return "--num-prompts and --max-concurrency must be at least 1"
    if any(rate <= 0 for rate in args.request_rate):
        return "--request-rate must be positive (or inf)"
    if args.num_workers < 1:
        return "--num-workers must be at least 1"
    if args.max_concurrency is not None and args.max_concurrency < args.num_workers:
        return "--max-concurrency must be at least --num-workers (each client process gets a share)"
    if args.offline_prefill_probes < 0 or (args.offline_prefill_probes and args.offline_model is None):
        return "--offline-prefill-probes needs --offline-model and a count of at least 0"
    if args.http_client == "lean" and not args.base_url.startswith("http://"):
        return "--http-client lean speaks plain http:// only; use --http-client httpx for this --base-url"
    return None


def run_bench_serve(args: argparse.Namespace) -> int:
    """Entry of ``infercore bench serve``: print each run's summary as one JSON line; non-zero if all failed."""
    problem = _check_args(args)
    if problem:
        print(f"infercore bench serve: {problem}", file=sys.stderr)
        return 2
    summaries = []
    try:
        # Each rate of a sweep sends prompts of its own seed: none finds the last rate's prompts in the
        # server's prefix cache, which would flatter its TTFT.
        for i, rate in enumerate(args.request_rate):
            summaries.append(run_benchmark(args, rate, args.seed + i * RATE_SEED_STEP))
            if args.offline_model is None:
                print(json.dumps(summaries[-1]), flush=True)
    except httpx.HTTPError as exc:
        print(f"infercore bench serve: could not reach {args.base_url} ({exc}); start a server with "
              "`infercore serve` or point --base-url at one", file=sys.stderr)
        return 1
    if len(summaries) > 1:
        print(sweep_table(summaries), file=sys.stderr)
    if args.offline_model is not None:
        from infercore.benchmarks.serve_offline import run_offline

        token_ids = args.prompt_type == "token-ids"
        tokenizer = load_tokenizer(args.tokenizer)
        prompts = make_prompts(args.num_prompts, args.input_len, token_ids, args.vocab_size, args.seed, tokenizer)
        # Another seed's prompts: of the same length, sharing no cached block with the run's.
        probes = make_prompts(args.offline_prefill_probes, args.input_len, token_ids, args.vocab_size,
                              args.seed + PROBE_SEED_OFFSET, tokenizer)
        offline = run_offline(args.offline_model, args.offline_engine_args, prompts, args.output_len, probes)
        for summary in summaries:
            summary |= offline
            summary["online_over_offline"] = (summary["output_throughput_tok_s"]
                                              / max(offline["offline_output_throughput_tok_s"], 1e-9))
            print(json.dumps(summary), flush=True)
    return 0 if all(s["completed"] for s in summaries) else 1
