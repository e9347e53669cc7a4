"""Qwen2.5-VL-7B shape (dummy weights) on one GPU: infercore against HF transformers in one run.

Every request is one 448x448 image (256 image tokens) and a short question in Qwen2.5-VL's chat layout, and
generates exactly ``--output-len`` tokens. Prints JSON lines: infercore's throughput over ``--num-requests``
requests, its time to first token for one request at concurrency 1 (median of ``--ttft-runs``), HF's
throughput over ``--hf-num-requests`` requests in static batches of ``--hf-batch-size`` (``generate`` with the
images' pixel values), and the ratio.

    python scripts/gpu_qwen2_5_vl.py [--num-requests 256] [--output-len 256] [--hf-num-requests 64]

``--profile`` also says where infercore's run goes: the vision tower's device time (CUDA events around it),
engine steps timed and bucketed as steps with prompt tokens and pure decode steps, and the kernels of a
window of each under the torch profiler.
"""

from __future__ import annotations

import argparse
import gc
import inspect
import json
import statistics
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import numpy as np


def emit(record: dict[str, Any]) -> None:
    print(json.dumps(record), flush=True)


def images(n: int, size: int, seed: int) -> list[np.ndarray]:
    """``n`` different RGB images (smooth gradients plus noise, so none share a content hash)."""
    rng = np.random.default_rng(seed)
    yy, xx = np.mgrid[0:size, 0:size]
    out = []
    for i in range(n):
        base = (np.stack([xx, yy, (xx + yy) // 2], axis=-1) * (1 + i % 7)) % 256
        out.append(np.clip(base + rng.integers(0, 32, size=(size, size, 3)), 0, 255).astype(np.uint8))
    return out


def as_pil(array: np.ndarray) -> Any:
    from PIL import Image

    return Image.fromarray(array)


def prompt_text(tokenizer: Any) -> str:
    messages = [{"role": "user", "content": [{"type": "image"}, {"type": "text", "text": "Describe this image."}]}]
    return tokenizer.apply_chat_template(messages, tokenize=False, add_generation_prompt=True)


class RunProbe:
    """Times the engine steps of one ``generate`` (bucketed: steps with prompt tokens, decode-only steps), the
    vision tower's device time, and profiles ``window`` steps from the start and from the middle of the run."""

    def __init__(self, llm: Any, window: int) -> None:
        import torch

        self.torch, self.cuda = torch, torch.cuda.is_available()
        core = llm.llm_engine.engine_core
        self.buckets: dict[str, list[float]] = {}
        self.kernels: dict[str, dict[str, list[float]]] = {}
        self.tower: list[list[Any]] = []
        self.window, self.n, self.prof, self.prof_end = window, 0, None, 0
        self.starts = {0: "first_steps", 2 * window + 60: "middle_steps"}
        self.label, self.kind = "", "empty"
        visual = core.executor.worker.runner.model.visual
        visual.register_forward_pre_hook(lambda *_: self.tower.append([self._mark()]))
        visual.register_forward_hook(lambda *_: self.tower[-1].append(self._mark()))
        schedule, step = core.scheduler.schedule, core.step

        def scheduled() -> Any:
            out = schedule()
            tokens, reqs = out.total_num_scheduled_tokens, len(out.num_scheduled_tokens)
            self.kind = "prompt" if tokens > reqs else "decode" if tokens else "empty"
            return out

        def timed() -> Any:
            self._edges()
            begin = time.perf_counter()
            out = step()
            bucket = self.buckets.setdefault(self.kind, [0, 0.0])
            bucket[0] += 1
            bucket[1] += time.perf_counter() - begin
            self.n += 1
            return out

        core.scheduler.schedule, core.step = scheduled, timed  # type: ignore[method-assign]

    def _mark(self) -> Any:
        if not self.cuda:
            return time.perf_counter()
        event = self.torch.cuda.Event(enable_timing=True)
        event.record()
        return event

    def _close(self) -> None:
        from infercore.benchmarks.kernel_timing import kernel_totals

        if self.cuda:
            self.torch.cuda.synchronize()
        self.prof.__exit__(None, None, None)
        self.kernels[self.label] = kernel_totals(self.prof.events(), width=80)
        self.prof = None

    def _edges(self) -> None:
        from torch.profiler import ProfilerActivity, profile

        if self.prof is not None and self.n == self.prof_end:
            self._close()
        if self.prof is None and self.n in self.starts:
            if self.cuda:
                self.torch.cuda.synchronize()
            self.label, self.prof_end = self.starts[self.n], self.n + self.window
            activities = [ProfilerActivity.CPU] + ([ProfilerActivity.CUDA] if self.cuda else [])
            self.prof = profile(activities=activities)
            self.prof.__enter__()

    def report(self) -> None:
        from infercore.benchmarks.kernel_timing import heaviest

        if self.prof is not None:
            self._close()
        elif self.cuda:
            self.torch.cuda.synchronize()
        spans = [(a, b) for a, *rest in self.tower for b in rest[:1]]
        tower_ms = sum(a.elapsed_time(b) if self.cuda else 1000 * (b - a) for a, b in spans)
        emit({"profile": "steps", "steps": {k: [n, round(t, 3)] for k, (n, t) in self.buckets.items()},
              "tower_calls": len(spans), "tower_ms": round(tower_ms, 1)})
        for label, kernels in self.kernels.items():
            total = sum(us for _, us in kernels.values())
            emit({"profile": label, "window_steps": self.window, "device_ms": round(total / 1000, 2)})
            for name, n, ms in heaviest(kernels, 20):
                emit({"profile": label, "kernel": name, "count": n, "ms": ms})


def run_infercore(folder: Path, args: argparse.Namespace, pictures: list[np.ndarray]) -> dict[str, Any]:
    import torch

    from infercore import LLM, SamplingParams

    engine: dict[str, Any] = {"gpu_memory_utilization": 0.85} if args.device == "cuda" else {"cpu_threads": 2}
    llm = LLM(model=str(folder), load_format="dummy", dtype=args.dtype, max_model_len=args.max_model_len,
              max_num_seqs=args.max_num_seqs, seed=0, **engine)
    text = prompt_text(llm.get_tokenizer())
    params = SamplingParams(max_tokens=args.output_len, ignore_eos=True, temperature=0.0)
    warm = [{"prompt": text, "multi_modal_data": {"image": as_pil(p)}} for p in pictures[:4]]
    llm.generate(warm, params, use_tqdm=False)
    llm.reset_prefix_cache()
    requests = [{"prompt": text, "multi_modal_data": {"image": as_pil(p)}}
                for p in pictures[: args.num_requests]]
    probe = RunProbe(llm, args.window) if args.profile else None
    start = time.perf_counter()
    outputs = llm.generate(requests, params, use_tqdm=False)
    elapsed = time.perf_counter() - start
    if probe is not None:
        probe.report()
    tokens = sum(len(o.outputs[0].token_ids) for o in outputs)
    result = {"engine": "infercore", "bench": "throughput", "requests": len(requests), "output_tokens": tokens,
              "prompt_tokens": len(outputs[0].prompt_token_ids), "wall_s": round(elapsed, 3),
              "output_tok_s": round(tokens / elapsed, 1), "req_s": round(len(requests) / elapsed, 2),
              "device": torch.cuda.get_device_name(0) if args.device == "cuda" else "cpu"}
    emit(result)
    # TTFT at concurrency 1: one request, one output token, a different image each time (no prefix hit).
    first = SamplingParams(max_tokens=1, temperature=0.0)
    ttfts = []
    for i in range(args.ttft_runs):
        image = as_pil(pictures[-1 - i])
        start = time.perf_counter()
        llm.generate([{"prompt": text, "multi_modal_data": {"image": image}}], first, use_tqdm=False)
        ttfts.append(time.perf_counter() - start)
    emit({"engine": "infercore", "bench": "ttft_c1", "runs": len(ttfts), "ttft_ms_median": round(
        1000 * statistics.median(ttfts), 1), "ttft_ms_min": round(1000 * min(ttfts), 1)})
    llm.shutdown()
    del llm
    gc.collect()
    if args.device == "cuda":
        torch.cuda.empty_cache()
    return result


def run_hf(folder: Path, args: argparse.Namespace, pictures: list[np.ndarray]) -> dict[str, Any]:
    import torch
    import transformers
    from transformers import AutoConfig, AutoTokenizer, Qwen2_5_VLForConditionalGeneration

    from infercore.models.qwen2_5_vl_image import Qwen2_5_VLImageProcessor

    config = AutoConfig.from_pretrained(str(folder))
    tokenizer = AutoTokenizer.from_pretrained(str(folder))
    processor = Qwen2_5_VLImageProcessor.from_model_folder(folder)
    torch.manual_seed(0)
    device, dtype = args.device, getattr(torch, args.dtype)
    with torch.device(device):
        model = Qwen2_5_VLForConditionalGeneration._from_config(config, dtype=dtype,
                                                                 attn_implementation="sdpa").eval()
    text = prompt_text(tokenizer)
    pad = config.image_token_id
    takes_token_types = "mm_token_type_ids" in inspect.signature(model.forward).parameters

    def batch(pics: list[np.ndarray]) -> dict[str, torch.Tensor]:
        processed = processor(pics)
        tokens = processor.num_image_tokens(*pics[0].shape[:2])
        ids = tokenizer.encode(text, add_special_tokens=False)
        at = ids.index(pad)
        ids = ids[:at] + [pad] * tokens + ids[at + 1:]
        input_ids = torch.tensor([ids] * len(pics), device=device)
        inputs = {"input_ids": input_ids, "attention_mask": torch.ones_like(input_ids),
                  "pixel_values": processed["pixel_values"].to(device, dtype),
                  "image_grid_thw": processed["image_grid_thw"].to(device)}
        if takes_token_types:  # newer transformers place images by token type, older ones by <|vision_start|>
            inputs["mm_token_type_ids"] = (input_ids == pad).int()
        return inputs

    def generate(pics: list[np.ndarray]) -> int:
        inputs = batch(pics)
        with torch.no_grad():
            out = model.generate(**inputs, max_new_tokens=args.output_len, min_new_tokens=args.output_len,
                                 do_sample=False, pad_token_id=0, eos_token_id=None)
        return int(out.shape[0] * (out.shape[1] - inputs["input_ids"].shape[1]))

    generate(pictures[:2])
    sync = torch.cuda.synchronize if device == "cuda" else (lambda: None)
    sync()
    chosen = pictures[: args.hf_num_requests]
    start = time.perf_counter()
    tokens = sum(generate(chosen[i:i + args.hf_batch_size]) for i in range(0, len(chosen), args.hf_batch_size))
    sync()
    elapsed = time.perf_counter() - start
    result = {"engine": "hf-transformers", "version": transformers.__version__, "bench": "throughput",
              "mode": f"generate, static batches of {args.hf_batch_size}, sdpa", "requests": len(chosen),
              "output_tokens": tokens, "wall_s": round(elapsed, 3), "output_tok_s": round(tokens / elapsed, 1)}
    emit(result)
    return result


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--num-requests", type=int, default=256)
    parser.add_argument("--output-len", type=int, default=256)
    parser.add_argument("--image-size", type=int, default=448)
    parser.add_argument("--max-model-len", type=int, default=2048)
    parser.add_argument("--max-num-seqs", type=int, default=256)
    parser.add_argument("--ttft-runs", type=int, default=5)
    parser.add_argument("--hf-num-requests", type=int, default=64)
    parser.add_argument("--hf-batch-size", type=int, default=64)
    parser.add_argument("--skip-hf", action="store_true")
    parser.add_argument("--profile", action="store_true", help="where the infercore run's time goes (see above)")
    parser.add_argument("--window", type=int, default=8, help="engine steps per profiled window")
    parser.add_argument("--tiny", action="store_true", help="a tiny model on the CPU: checks the script runs")
    args = parser.parse_args()
    args.device, args.dtype = ("cpu", "float32") if args.tiny else ("cuda", "bfloat16")

    from infercore.models.qwen2_5_vl_folder import (
        SHAPES_7B_TEXT,
        SHAPES_7B_VISION,
        TINY_TEXT,
        TINY_VISION,
        build_qwen2_5_vl_folder,
    )
    from infercore.models.qwen2_5_vl_image import QwenVLImageSettings

    pictures = images(args.num_requests + args.ttft_runs + 4, args.image_size, seed=0)
    with tempfile.TemporaryDirectory() as tmp:
        text, vision = (TINY_TEXT, TINY_VISION) if args.tiny else (SHAPES_7B_TEXT, SHAPES_7B_VISION)
        folder = build_qwen2_5_vl_folder(Path(tmp) / "qwen2_5_vl", text=text, vision=vision,
                                         image=QwenVLImageSettings(), weights=False, dtype=args.dtype)
        ours = run_infercore(folder, args, pictures)
        if args.skip_hf:
            return 0
        hf = run_hf(folder, args, pictures)
        ratio = ours["output_tok_s"] / hf["output_tok_s"]
        emit({"bench": "summary", "infercore_output_tok_s": ours["output_tok_s"],
              "hf_output_tok_s": hf["output_tok_s"], "speedup_vs_hf": round(ratio, 2), "target": 20.0,
              "meets_target": ratio >= 20.0})
    return 0


if __name__ == "__main__":
    sys.exit(main())
