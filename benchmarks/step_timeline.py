"""Where one engine step's time goes: host phases per step, and device busy time in sampled windows.

Runs a named workload (default W-GPU) through ``LLM.generate`` with the engine's host phases
wrapped in timers, and prints JSON lines: one per batch-size bucket (mean milliseconds per step of
each phase, and the context tokens its decodes read), one summary, and, on a GPU, one per profiled
window (kernel time, device busy fraction, the kernels that take longest, and the TB/s the decode
attention kernels read the KV cache at). On a GPU it also prints one ``device_gaps`` line from CUDA
events recorded around every step's launches (no profiler, so nothing is slowed): the device's time per
step and its idle time between steps, by batch bucket. ``--tiny`` swaps in a very small model of the same
request set so the host cost can be studied on a CPU.

    python benchmarks/step_timeline.py --workload w-gpu --windows 300,800
"""

from __future__ import annotations

import argparse
import contextlib
import dataclasses
import json
import tempfile
import time
import traceback
import warnings
from collections import Counter, defaultdict
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import torch

from infercore import LLM, SamplingParams
from infercore.benchmarks.allocator_events import allocator_counters, increase
from infercore.benchmarks.workloads import WORKLOADS, Workload
from infercore.engine.core import EngineCore
from infercore.frontend.llm_engine import LLMEngine
from infercore.frontend.output_processor import OutputProcessor
from infercore.layers.vocab_embedding import ParallelLMHead
from infercore.sample.row_state import SamplingRowState
from infercore.sample.sampler import Sampler
from infercore.scheduler.scheduler import Scheduler
from infercore.worker import model_runner as model_runner_module
from infercore.worker.input_batch import InputBatch
from infercore.worker.model_runner import ModelRunner

PHASES = (
    ("LLMEngine.step", LLMEngine, "step"),
    ("EngineCore.step", EngineCore, "step"),
    ("schedule", Scheduler, "schedule"),
    ("update_from_output", Scheduler, "update_from_output"),
    ("runner.update_states", InputBatch, "update"),
    ("runner.prepare", ModelRunner, "_prepare"),
    ("runner.patch_inflight", model_runner_module, "patch_inflight_tokens"),
    ("runner.forward_launch", ModelRunner, "_forward"),
    ("runner.sample_launch", ModelRunner, "_sample"),
    ("runner.collect", ModelRunner, "_collect"),
    ("output_processor", OutputProcessor, "process_outputs"),
    ("sample.logits", ParallelLMHead, "compute_logits"),
    ("sample.sampler", Sampler, "forward"),
)


class Timeline:
    """Per-step timers and the profiler windows."""

    def __init__(self, windows: list[int], window_len: int, kv_bytes_per_token: int = 0) -> None:
        self.steps: list[dict[str, float]] = []
        #: KV cache bytes one context token holds over all layers (K and V): what decode attention reads.
        self.kv_bytes_per_token = kv_bytes_per_token
        self.current: dict[str, float] = defaultdict(float)
        self.windows = windows
        self.window_len = window_len
        self.profiler: Any = None
        self.window_results: list[dict[str, Any]] = []

    def wrap(self, key: str, cls: Any, name: str) -> None:
        original = getattr(cls, name)
        timeline = self

        def timed(*args: Any, **kwargs: Any) -> Any:
            started = time.perf_counter()
            try:
                return original(*args, **kwargs)
            finally:
                timeline.current[key] += (time.perf_counter() - started) * 1e3

        setattr(cls, name, timed)

    def wrap_schedule(self) -> None:
        original = Scheduler.schedule
        timeline = self

        def schedule(sched: Scheduler) -> Any:
            out = original(sched)
            timeline.current["num_reqs"] = len(out.num_scheduled_tokens)
            timeline.current["num_tokens"] = out.total_num_scheduled_tokens
            timeline.current["decode_context_tokens"] = decode_context_tokens(out)
            return out

        Scheduler.schedule = schedule  # type: ignore[method-assign]

    def wrap_wait(self) -> None:
        original = ModelRunner._collect
        timeline = self

        def collect(runner: ModelRunner, pending: Any) -> Any:
            if pending.event is not None:
                started = time.perf_counter()
                pending.event.synchronize()
                timeline.current["wait_for_device"] += (time.perf_counter() - started) * 1e3
            return original(runner, pending)

        ModelRunner._collect = collect  # type: ignore[method-assign]

    def wrap_step_boundary(self) -> None:
        original = LLMEngine.step
        timeline = self

        def step(engine: LLMEngine) -> Any:
            index = len(timeline.steps)
            if torch.cuda.is_available():
                if index in timeline.windows:
                    timeline.start_window(index)
                elif timeline.profiler is not None and index == timeline.profiler_start + timeline.window_len:
                    timeline.stop_window()
            out = original(engine)
            timeline.steps.append(dict(timeline.current))
            timeline.current = defaultdict(float)
            return out

        LLMEngine.step = step  # type: ignore[method-assign]

    def start_window(self, index: int) -> None:
        from torch.profiler import ProfilerActivity, profile

        self.profiler = profile(activities=[ProfilerActivity.CUDA, ProfilerActivity.CPU])
        self.profiler.__enter__()
        self.profiler_start = index
        self.window_started = time.perf_counter()

    def stop_window(self) -> None:
        torch.cuda.synchronize()
        wall_ms = (time.perf_counter() - self.window_started) * 1e3
        prof, self.profiler = self.profiler, None
        prof.__exit__(None, None, None)
        kernels = [e for e in prof.events() if e.device_type == torch.autograd.DeviceType.CUDA]
        spans = sorted((e.time_range.start, e.time_range.end) for e in kernels)
        busy, cur_s, cur_e = 0.0, None, None
        for s, e in spans:
            if cur_e is None or s > cur_e:
                if cur_e is not None:
                    busy += cur_e - cur_s
                cur_s, cur_e = s, e
            else:
                cur_e = max(cur_e, e)
        if cur_e is not None:
            busy += cur_e - cur_s
        span = (spans[-1][1] - spans[0][0]) if spans else 0.0
        by_name: dict[str, list[float]] = defaultdict(lambda: [0.0, 0])
        for e in kernels:
            entry = by_name[e.name[:80]]
            entry[0] += e.time_range.end - e.time_range.start
            entry[1] += 1
        runtime: dict[str, list[float]] = defaultdict(lambda: [0.0, 0])
        for e in prof.events():
            if e.device_type == torch.autograd.DeviceType.CPU and e.name.startswith("cuda"):
                entry = runtime[e.name]
                entry[0] += e.time_range.end - e.time_range.start
                entry[1] += 1
        steps = self.steps[self.profiler_start:]
        top = sorted(by_name.items(), key=lambda kv: -kv[1][0])[:20]
        decode_us = sum(t for name, (t, _) in by_name.items() if name.startswith("_decode_")) / self.window_len
        context = sum(s.get("decode_context_tokens", 0) for s in steps) / max(len(steps), 1)
        kv_bytes = context * self.kv_bytes_per_token
        self.window_results.append({
            "window_first_step": self.profiler_start, "steps": self.window_len,
            "mean_num_reqs": round(sum(s.get("num_reqs", 0) for s in steps) / max(len(steps), 1), 1),
            "wall_ms_per_step": round(wall_ms / self.window_len, 3),
            "device_busy_ms_per_step": round(busy / 1e3 / self.window_len, 3),
            "device_span_ms_per_step": round(span / 1e3 / self.window_len, 3),
            "kernels_per_step": round(len(kernels) / self.window_len, 1),
            # What the decode kernels read (each decode's context, every layer's K and V) over their time.
            "decode_context_tokens_per_step": round(context, 1),
            "decode_attention_us_per_step": round(decode_us, 1),
            "decode_attention_tb_s": round(kv_bytes / decode_us / 1e6, 3) if decode_us else None,
            "top_kernels_us_per_step": {name: [round(t / self.window_len, 1), round(n / self.window_len, 1)]
                                        for name, (t, n) in top},
            "runtime_calls_us_per_step": {name: [round(t / self.window_len, 1), round(n / self.window_len, 1)]
                                          for name, (t, n) in sorted(runtime.items(), key=lambda kv: -kv[1][0])[:8]},
        })


class DeviceGaps:
    """CUDA events on the stream around each step: one before the runner's inputs are copied in, one after
    its sample is launched. A step's device time runs from the first to the second (so it includes any wait
    inside the step for the host's sample launch); the device idles between steps when the host had not yet
    launched the next one when the last finished."""

    def __init__(self) -> None:
        self.records: list[tuple[Any, Any, int, int]] = []
        self._start: tuple[Any, int, int] | None = None

    def install(self) -> None:
        launch, sample = ModelRunner._launch_forward, ModelRunner._sample
        gaps = self

        def launch_forward(runner: ModelRunner, so: Any, *args: Any, **kwargs: Any) -> Any:
            start = torch.cuda.Event(enable_timing=True)
            start.record()
            gaps._start = (start, so.total_num_scheduled_tokens, len(so.num_scheduled_tokens))
            return launch(runner, so, *args, **kwargs)

        def sample_launch(runner: ModelRunner, *args: Any, **kwargs: Any) -> Any:
            pending = sample(runner, *args, **kwargs)
            if gaps._start is not None:
                end = torch.cuda.Event(enable_timing=True)
                end.record()
                start, tokens, reqs = gaps._start
                gaps.records.append((start, end, tokens, reqs))
                gaps._start = None
            return pending

        ModelRunner._launch_forward = launch_forward  # type: ignore[method-assign]
        ModelRunner._sample = sample_launch  # type: ignore[method-assign]

    def summary(self) -> dict[str, Any]:
        torch.cuda.synchronize()
        steps = [(s.elapsed_time(e), n, r) for s, e, n, r in self.records]
        gaps = [self.records[i][1].elapsed_time(self.records[i + 1][0]) for i in range(len(self.records) - 1)]
        return summarize_gaps(steps, gaps)


def summarize_gaps(steps: list[tuple[float, int, int]], gaps: list[float]) -> dict[str, Any]:
    """Totals (ms) of per-step device time and of the idle time after each step, overall and by batch bucket;
    ``steps`` holds (device ms, scheduled tokens, requests) per step, ``gaps[i]`` the idle ms after step i."""
    buckets: dict[str, list[float]] = defaultdict(lambda: [0, 0.0, 0.0])
    for i, (device_ms, tokens, reqs) in enumerate(steps):
        row = buckets[bucket(reqs, tokens)]
        row[0] += 1
        row[1] += device_ms
        row[2] += max(gaps[i], 0.0) if i < len(gaps) else 0.0
    step_ms = sum(ms for ms, _, _ in steps)
    idle_ms = sum(max(g, 0.0) for g in gaps)
    return {"device_gaps": True, "steps": len(steps), "step_ms": round(step_ms, 1), "idle_between_steps_ms": round(idle_ms, 2),
            "idle_fraction": round(idle_ms / (step_ms + idle_ms), 4) if step_ms + idle_ms else 0.0,
            "by_bucket": {name: {"steps": int(n), "step_ms": round(ms, 1), "idle_after_ms": round(idle, 2)}
                          for name, (n, ms, idle) in sorted(buckets.items())}}


def decode_context_tokens(out: Any) -> int:
    """Context tokens a step's decodes attend to: each request computing one token after
    ``num_computed_tokens`` reads that many keys plus its own."""
    cached = out.scheduled_cached_reqs
    return sum(computed + 1 for computed, num in zip(cached.num_computed_tokens, out.num_scheduled_tokens, strict=False)
               if num == 1)


def kv_bytes_per_token(workload: Workload) -> int:
    """KV cache bytes of one context token over all layers: K and V of every KV head, in the cache's dtype."""
    config = workload.model_config
    head_dim = config.get("head_dim") or config["hidden_size"] // config["num_attention_heads"]
    kv_heads = config.get("num_key_value_heads") or config["num_attention_heads"]
    fp8 = str(workload.engine_kwargs.get("kv_cache_dtype", "auto")).startswith("fp8")
    element = 1 if fp8 else torch.empty((), dtype=getattr(torch, workload.dtype)).element_size()
    return config["num_hidden_layers"] * kv_heads * head_dim * 2 * element


def bucket(num_reqs: int, num_tokens: int) -> str:
    if num_tokens > num_reqs:
        return "prefill/mixed"
    for low in (224, 160, 96, 32, 8, 1):
        if num_reqs >= low:
            return f"decode>={low}"
    return "empty"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--workload", default="w-gpu", choices=sorted(WORKLOADS))
    parser.add_argument("--tiny", action="store_true", help="a 2-layer, 64-wide model of the same request set")
    parser.add_argument("--num-requests", type=int, default=None)
    parser.add_argument("--async-scheduling", choices=["auto", "on", "off"], default="auto")
    parser.add_argument("--windows", default="", help="comma-separated first steps of profiled windows (GPU)")
    parser.add_argument("--window-len", type=int, default=10)
    parser.add_argument("--seed", type=int, default=0, help="the request set's seed, as in `infercore bench`")
    parser.add_argument("--sync-debug", action="store_true",
                        help="(GPU) count the timed run's synchronizing CUDA calls by where they are made")
    args = parser.parse_args()

    workload = WORKLOADS[args.workload]
    if args.num_requests:
        workload = dataclasses.replace(workload, num_requests=args.num_requests)
    if args.tiny:
        workload = workload.tiny()
    timeline = Timeline([int(w) for w in args.windows.split(",") if w], args.window_len, kv_bytes_per_token(workload))
    kwargs: dict[str, Any] = dict(workload.engine_kwargs)  # e.g. w-gpu-fp8kv's cache dtype
    if args.async_scheduling != "auto":
        kwargs["async_scheduling"] = args.async_scheduling == "on"
    with tempfile.TemporaryDirectory() as tmp:
        folder = workload.write_model_folder(Path(tmp) / workload.name)
        llm = LLM(model=str(folder), load_format="dummy", dtype=workload.dtype, max_model_len=workload.max_model_len,
                  skip_tokenizer_init=True, **kwargs)
        prompts, params = workload_requests(workload, args.seed)
        llm.generate([{"prompt_token_ids": p} for p in prompts[:4]], params[:4], use_tqdm=False)
        for key, cls, name in PHASES:
            timeline.wrap(key, cls, name)
        timeline.wrap_schedule()
        timeline.wrap_wait()
        timeline.wrap_step_boundary()
        # The runner gathers each step's metadata from its per-row state (SamplingMetadata.build does too).
        SamplingRowState.gather = _timed_gather(SamplingRowState.gather, timeline)  # type: ignore[method-assign]
        device_gaps = DeviceGaps() if torch.cuda.is_available() else None
        if device_gaps is not None:
            device_gaps.install()
        syncs: Counter[str] = Counter()
        allocator_before = allocator_counters()
        with _sync_debug(syncs, args.sync_debug and torch.cuda.is_available()):
            started = time.perf_counter()
            outputs = llm.generate([{"prompt_token_ids": p} for p in prompts], params, use_tqdm=False)
            elapsed = time.perf_counter() - started
        allocator = increase(allocator_before, allocator_counters())
    tokens = sum(len(o.outputs[0].token_ids) for o in outputs)
    buckets: dict[str, list[dict[str, float]]] = defaultdict(list)
    for step in timeline.steps:
        buckets[bucket(int(step.get("num_reqs", 0)), int(step.get("num_tokens", 0)))].append(step)
    keys = [k for k, _, _ in PHASES] + ["sampling_metadata", "wait_for_device"]
    for name, steps in sorted(buckets.items()):
        row = {"bucket": name, "steps": len(steps),
               "mean_reqs": round(sum(s.get("num_reqs", 0) for s in steps) / len(steps), 1)}
        row.update({k: round(sum(s.get(k, 0.0) for s in steps) / len(steps), 3)
                    for k in [*keys, "decode_context_tokens"]})
        print(json.dumps(row))
    totals = {k: round(sum(s.get(k, 0.0) for s in timeline.steps) / 1e3, 3) for k in keys}
    print(json.dumps({"summary": True, "workload": workload.name, "tiny": args.tiny, "steps": len(timeline.steps),
                      "wall_s": round(elapsed, 3), "output_tokens": tokens,
                      "output_tok_s": round(tokens / elapsed, 1), "phase_totals_s": totals,
                      "allocator_events_during_run": allocator}))
    if device_gaps is not None:
        print(json.dumps({"workload": workload.name, **device_gaps.summary()}))
    for window in timeline.window_results:
        print(json.dumps(window))
    if args.sync_debug:
        print(json.dumps({"synchronizing_calls": dict(syncs.most_common(20))}))


def workload_requests(workload: Workload, seed: int = 0) -> tuple[list[list[int]], list[SamplingParams]]:
    """The workload's prompts and their sampling parameters, options and per-request seeds included,
    as ``infercore bench throughput`` sends them: ``--workload w-gpu-sampling`` times the sampling path."""
    prompts, max_tokens = workload.requests(seed)
    return prompts, workload.sampling_params(max_tokens, seed)


@contextlib.contextmanager
def _sync_debug(counts: Counter[str], enabled: bool) -> Iterator[None]:
    """With ``enabled``, count each synchronizing CUDA call (torch's sync debug mode) by the innermost
    frame of this project that made it; the engine's own wait for a step's tokens is an event
    synchronize, which torch does not count."""
    if not enabled:
        yield
        return

    def record(message: warnings.WarningMessage) -> None:
        frames = [f for f in traceback.extract_stack() if "infercore" in f.filename and "step_timeline" not in f.filename]
        where = f"{Path(frames[-1].filename).name}:{frames[-1].lineno} {frames[-1].name}" if frames else "?"
        counts[f"{where}: {str(message.message)[:60]}"] += 1

    torch.cuda.set_sync_debug_mode("warn")
    try:
        with warnings.catch_warnings():  # restores showwarning too
            warnings.simplefilter("always")
            warnings.showwarning = lambda message, category, *rest, **kw: record(  # type: ignore[assignment]
                warnings.WarningMessage(message, category, *rest[:2]))
            yield
    finally:
        torch.cuda.set_sync_debug_mode("default")


def _timed_gather(original: Callable[..., Any], timeline: Timeline) -> Callable[..., Any]:
    """``SamplingRowState.gather`` with its time added to the step's ``sampling_metadata``."""

    def timed(*args: Any, **kwargs: Any) -> Any:
        started = time.perf_counter()
        try:
            return original(*args, **kwargs)
        finally:
            timeline.current["sampling_metadata"] += (time.perf_counter() - started) * 1e3

    return timed


if __name__ == "__main__":
    main()
