"""LLaVA-1.5-7B shape (CLIP ViT-L/14-336 + Llama-2-7B, dummy weights) on one GPU: offline throughput of N
requests each with one 336x336 image and 256 output tokens, against HF transformers' batched ``generate`` on
the same requests in the same run, then TTFT of one such request at concurrency 1. Prints JSON lines.

    python scripts/gpu_vision.py                       # 256 requests, HF on all of them in batches of 64
    python scripts/gpu_vision.py --hf-requests 64      # HF on a subset (its rate is per request)

Needs a GPU, pillow, and transformers' LLaVA (no torchvision: the image processors run on PIL).
"""

from __future__ import annotations

import argparse
import gc
import json
import statistics
import tempfile
import time

from infercore.benchmarks.vision_inputs import expanded_prompt_ids, random_images


def emit(**fields) -> None:
    print(json.dumps(fields), flush=True)


def images(n: int, seed: int) -> list:
    """``n`` random 336x336 images (LLaVA-1.5's input size)."""
    return random_images(n, 336, seed)


PROMPT = "USER: <image>\nDescribe the picture in detail. ASSISTANT:"


def run_engine(folder: str, args: argparse.Namespace) -> tuple[list[int], float]:
    import torch

    from infercore import LLM, SamplingParams

    llm = LLM(folder, load_format="dummy", dtype=args.dtype, max_model_len=2048, max_num_seqs=args.max_num_seqs,
              max_num_batched_tokens=args.max_num_batched_tokens, gpu_memory_utilization=0.85)
    params = SamplingParams(temperature=0, max_tokens=args.output_len, ignore_eos=True, detokenize=False)
    # Warm-up: one request through the tower and a decode.
    llm.generate({"prompt": PROMPT, "multi_modal_data": {"image": images(1, 999)[0]}},
                 SamplingParams(max_tokens=4, ignore_eos=True, detokenize=False), use_tqdm=False)
    prompts = [{"prompt": PROMPT, "multi_modal_data": {"image": im}} for im in images(args.num_requests, 0)]
    llm.reset_prefix_cache()
    start = time.perf_counter()
    outs = llm.generate(prompts, params, use_tqdm=False)
    elapsed = time.perf_counter() - start
    out_tokens = sum(len(o.outputs[0].token_ids) for o in outs)
    emit(event="engine_throughput", model=args.model_name, requests=len(outs), output_tokens=out_tokens,
         prompt_tokens=len(outs[0].prompt_token_ids), elapsed_s=round(elapsed, 3),
         output_tok_s=round(out_tokens / elapsed, 1), req_s=round(len(outs) / elapsed, 3),
         images_encoded=llm.llm_engine.engine_core.executor.worker.runner.mm.num_encoded)
    # TTFT at concurrency 1: fresh images (no processed-input or prefix-cache hit), one output token.
    ttfts, processing = [], []
    mm = llm.llm_engine.input_processor.mm
    one = SamplingParams(max_tokens=1, detokenize=False)
    for image in images(args.ttft_samples, 1):
        llm.reset_prefix_cache()
        t0 = time.perf_counter()
        llm.generate({"prompt": PROMPT, "multi_modal_data": {"image": image}}, one, use_tqdm=False)
        ttfts.append((time.perf_counter() - t0) * 1000)
    for image in images(8, 2):
        t0 = time.perf_counter()
        mm.process(list(range(3)) + [mm.processor.placeholder_token_id], [image])
        processing.append((time.perf_counter() - t0) * 1000)
    emit(event="ttft_c1", model=args.model_name, samples=len(ttfts), median_ms=round(statistics.median(ttfts), 2),
         min_ms=round(min(ttfts), 2), max_ms=round(max(ttfts), 2),
         front_end_processing_median_ms=round(statistics.median(processing), 2))
    ids = list(outs[0].prompt_token_ids)
    llm.shutdown()
    del llm
    gc.collect()
    if torch.cuda.is_available():
        torch.cuda.empty_cache()
    return ids, out_tokens / elapsed


def prompt_ids_of(folder: str) -> list[int]:
    """The prompt's token ids with its image placeholder expanded, as the engine's front end makes them."""
    from infercore.models.llava_processor import LlavaProcessor

    return expanded_prompt_ids(LlavaProcessor, folder, PROMPT, images(1, 0)[0])


def run_hf(folder: str, prompt_ids: list[int], args: argparse.Namespace) -> float:
    import torch
    from transformers import AutoConfig, AutoImageProcessor, LlavaForConditionalGeneration

    config = AutoConfig.from_pretrained(folder)
    device = "cuda" if torch.cuda.is_available() else "cpu"
    dtype = getattr(torch, args.dtype)
    with torch.device(device):
        model = LlavaForConditionalGeneration._from_config(config, dtype=dtype).eval()
    processor = AutoImageProcessor.from_pretrained(folder)
    n = args.hf_requests
    pictures = images(n, 0)
    ids = torch.tensor([prompt_ids], device=device)

    def pixels(batch: list) -> torch.Tensor:
        return torch.from_numpy(processor(images=batch, return_tensors="np")["pixel_values"]).to(device, dtype)

    with torch.no_grad():  # warm-up
        model.generate(input_ids=ids, pixel_values=pixels(pictures[:1]), max_new_tokens=4, do_sample=False)
    sync = torch.cuda.synchronize if device == "cuda" else (lambda: None)
    sync()
    # Timed as the engine is: the image processor's work is inside the measured time.
    start = time.perf_counter()
    out_tokens = 0
    for lo in range(0, n, args.hf_batch):
        batch = pixels(pictures[lo:lo + args.hf_batch])
        b = batch.shape[0]
        with torch.no_grad():
            gen = model.generate(input_ids=ids.expand(b, -1), attention_mask=torch.ones_like(ids).expand(b, -1),
                                 pixel_values=batch, max_new_tokens=args.output_len, min_new_tokens=args.output_len,
                                 do_sample=False)
        out_tokens += (gen.shape[1] - ids.shape[1]) * b
    sync()
    elapsed = time.perf_counter() - start
    emit(event="hf_throughput", model=args.model_name, requests=n, batch=args.hf_batch,
         output_tokens=out_tokens, elapsed_s=round(elapsed, 3), output_tok_s=round(out_tokens / elapsed, 1),
         req_s=round(n / elapsed, 3))
    del model, batch, gen
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
    parser.add_argument("--hf-requests", type=int, default=256)
    parser.add_argument("--hf-batch", type=int, default=64)
    parser.add_argument("--ttft-samples", type=int, default=10)
    parser.add_argument("--skip-hf", action="store_true")
    parser.add_argument("--dtype", default="bfloat16")
    parser.add_argument("--smoke", action="store_true", help="a tiny LLaVA instead (checks the script on a CPU)")
    args = parser.parse_args()
    args.model_name = "tiny-llava" if args.smoke else "llava-1.5-7b-shape"

    from infercore.tiny_vision_models import build_llava_folder, llava_config_folder

    with tempfile.TemporaryDirectory() as tmp:
        folder = str(build_llava_folder(tmp, image_size=336, patch_size=84) if args.smoke else llava_config_folder(tmp))
        # HF first: its memory is easy to hand back before the engine sizes its KV cache.
        theirs = None if args.skip_hf else run_hf(folder, prompt_ids_of(folder), args)
        prompt_ids, ours = run_engine(folder, args)
        if theirs is not None:
            assert prompt_ids == prompt_ids_of(folder), "HF ran another prompt than the engine"
            emit(event="speedup_vs_hf", output_tok_s_ratio=round(ours / theirs, 2))


if __name__ == "__main__":
    main()
