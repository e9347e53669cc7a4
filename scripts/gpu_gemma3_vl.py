"""Gemma 3 with images on one GPU: the CI tests of ``tests/gemma3_vl`` on the device (Triton kernels, graphs),
then Gemma-3-4B shape (dummy weights) against HF transformers in the same run. Prints JSON lines.

Every request is one 896x896 image (256 image tokens) and a short question, and generates exactly
``--output-len`` tokens: infercore's throughput over ``--num-requests``, its TTFT for one request at
concurrency 1 (median of ``--ttft-runs``), HF's throughput over ``--hf-requests`` requests in batches of
``--hf-batch`` (``generate`` with pixel values and the image ``token_type_ids``), and the ratio.

    python scripts/gpu_gemma3_vl.py [--num-requests 256] [--output-len 256] [--hf-requests 64] [--skip-tests]
    python scripts/gpu_gemma3_vl.py --smoke    # a tiny Gemma 3 on the CPU: checks the script itself
"""

from __future__ import annotations

import argparse
import gc
import json
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

from infercore.benchmarks.vision_inputs import expanded_prompt_ids, random_images

PROMPT = "<start_of_turn>user\n<start_of_image>Describe this image.<end_of_turn>\n<start_of_turn>model\n"


def emit(**fields: Any) -> None:
    print(json.dumps(fields), flush=True)


def run_tests() -> None:
    started = time.perf_counter()
    # Not tests/triton (its conftest turns the interpreter on for the whole process), not the server test (the
    # device image has no openai SDK).
    proc = subprocess.run([sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", "tests/gemma3_vl",
                           "--ignore", "tests/gemma3_vl/test_gemma3_vl_server.py", "-k", "not tensor_parallel"],
                          capture_output=True, text=True, timeout=240)
    emit(event="tests", rc=proc.returncode, summary=proc.stdout.strip().splitlines()[-1:],
         seconds=round(time.perf_counter() - started, 1), tail=proc.stdout[-1500:] if proc.returncode else "")


def run_engine(folder: str, args: argparse.Namespace) -> tuple[list[int], float]:
    import torch

    from infercore import LLM, SamplingParams

    llm = LLM(folder, load_format="dummy", dtype=args.dtype, max_model_len=2048, max_num_seqs=args.max_num_seqs,
              max_num_batched_tokens=args.max_num_batched_tokens,
              **({"gpu_memory_utilization": 0.85} if torch.cuda.is_available() else {"cpu_threads": 2}))
    params = SamplingParams(temperature=0, max_tokens=args.output_len, ignore_eos=True, detokenize=False)
    llm.generate({"prompt": PROMPT, "multi_modal_data": {"image": random_images(1, args.size, 999)[0]}},
                 SamplingParams(max_tokens=4, ignore_eos=True, detokenize=False), use_tqdm=False)
    prompts = [{"prompt": PROMPT, "multi_modal_data": {"image": im}} for im in random_images(args.num_requests, args.size, 0)]
    llm.reset_prefix_cache()
    start = time.perf_counter()
    outs = llm.generate(prompts, params, use_tqdm=False)
    elapsed = time.perf_counter() - start
    out_tokens = sum(len(o.outputs[0].token_ids) for o in outs)
    core = llm.llm_engine.engine_core
    emit(event="engine_throughput", model=args.model_name, requests=len(outs), output_tokens=out_tokens,
         prompt_tokens=len(outs[0].prompt_token_ids), elapsed_s=round(elapsed, 3),
         output_tok_s=round(out_tokens / elapsed, 1), req_s=round(len(outs) / elapsed, 3),
         preemptions=core.scheduler.num_preemptions, attention_backend=core.executor.worker.runner.backend.name)
    ttfts = []
    one = SamplingParams(max_tokens=1, detokenize=False)
    for image in random_images(args.ttft_runs, args.size, 1):
        llm.reset_prefix_cache()
        t0 = time.perf_counter()
        llm.generate({"prompt": PROMPT, "multi_modal_data": {"image": image}}, one, use_tqdm=False)
        ttfts.append((time.perf_counter() - t0) * 1000)
    emit(event="ttft_c1", model=args.model_name, samples=len(ttfts), median_ms=round(statistics.median(ttfts), 2),
         min_ms=round(min(ttfts), 2), max_ms=round(max(ttfts), 2))
    ids = list(outs[0].prompt_token_ids)
    llm.shutdown()
    del llm
    gc.collect()
    if torch.cuda.is_available():
        torch.cuda.empty_cache()
    return ids, out_tokens / elapsed


def prompt_ids_of(folder: str) -> list[int]:
    """The prompt's token ids with its image expanded, as the engine's front end makes them."""
    from infercore.models.gemma3_vl_processor import Gemma3Processor

    return expanded_prompt_ids(Gemma3Processor, folder, PROMPT, random_images(1, 64, 0)[0])


def run_hf(folder: str, prompt_ids: list[int], args: argparse.Namespace) -> float:
    import torch
    from transformers import AutoConfig, AutoImageProcessor, Gemma3ForConditionalGeneration

    config = AutoConfig.from_pretrained(folder)
    device = "cuda" if torch.cuda.is_available() else "cpu"
    dtype = getattr(torch, args.dtype)
    with torch.device(device):
        model = Gemma3ForConditionalGeneration._from_config(config, dtype=dtype).eval()
    processor = AutoImageProcessor.from_pretrained(folder)
    pictures = random_images(args.hf_requests, args.size, 0)
    ids = torch.tensor([prompt_ids], device=device)
    types = (ids == config.image_token_id).long()

    def pixels(batch: list) -> torch.Tensor:
        return torch.from_numpy(processor(images=batch, return_tensors="np")["pixel_values"]).to(device, dtype)

    def generate(batch: list, new_tokens: int) -> int:
        b = len(batch)
        with torch.no_grad():
            gen = model.generate(input_ids=ids.expand(b, -1), attention_mask=torch.ones_like(ids).expand(b, -1),
                                 token_type_ids=types.expand(b, -1), pixel_values=pixels(batch),
                                 max_new_tokens=new_tokens, min_new_tokens=new_tokens, do_sample=False)
        return (gen.shape[1] - ids.shape[1]) * b

    generate(pictures[:1], 4)
    sync = torch.cuda.synchronize if device == "cuda" else (lambda: None)
    sync()
    start = time.perf_counter()
    out_tokens = sum(generate(pictures[lo:lo + args.hf_batch], args.output_len)
                     for lo in range(0, len(pictures), args.hf_batch))
    sync()
    elapsed = time.perf_counter() - start
    emit(event="hf_throughput", model=args.model_name, requests=len(pictures), batch=args.hf_batch,
         output_tokens=out_tokens, elapsed_s=round(elapsed, 3), output_tok_s=round(out_tokens / elapsed, 1),
         req_s=round(len(pictures) / elapsed, 3))
    gc.collect()
    if device == "cuda":
        torch.cuda.empty_cache()
    return out_tokens / elapsed


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--num-requests", type=int, default=256)
    parser.add_argument("--output-len", type=int, default=256)
    parser.add_argument("--max-num-seqs", type=int, default=256)
    parser.add_argument("--max-num-batched-tokens", type=int, default=8192)
    parser.add_argument("--hf-requests", type=int, default=64)
    parser.add_argument("--hf-batch", type=int, default=64)
    parser.add_argument("--ttft-runs", type=int, default=10)
    parser.add_argument("--skip-hf", action="store_true")
    parser.add_argument("--skip-tests", action="store_true")
    parser.add_argument("--dtype", default="bfloat16")
    parser.add_argument("--smoke", action="store_true", help="a tiny Gemma 3 on the CPU (checks the script)")
    args = parser.parse_args()
    args.model_name = "tiny-gemma3-vl" if args.smoke else "gemma-3-4b-shape"
    if args.smoke:
        args.num_requests, args.output_len, args.hf_requests, args.hf_batch, args.ttft_runs = 4, 4, 2, 2, 2
        args.dtype, args.size = "float32", 64
    else:
        args.size = 896
    if not args.skip_tests:
        run_tests()

    from infercore.tiny_vision_models import build_gemma3_vl_folder, gemma3_vl_config_folder

    with tempfile.TemporaryDirectory() as tmp:
        folder = str(build_gemma3_vl_folder(tmp) if args.smoke else gemma3_vl_config_folder(Path(tmp)))
        theirs = None if args.skip_hf else run_hf(folder, prompt_ids_of(folder), args)
        prompt_ids, ours = run_engine(folder, args)
        if theirs is not None:
            assert prompt_ids == prompt_ids_of(folder), "HF ran another prompt than the engine"
            emit(event="speedup_vs_hf", output_tok_s_ratio=round(ours / theirs, 2))


if __name__ == "__main__":
    main()
