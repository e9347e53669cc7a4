"""Teacher-forced logprobs of quantized weights against the unquantized model they were made from.

One random checkpoint at a workload's shape (HF's initialisation, saved with real weights), then, from it,
checkpoints in each format: FP8 e4m3 with 128x128 block scales (activations quantized per token and group,
as the ``-FP8`` releases), FP8 per channel and per tensor (compressed-tensors), AWQ and GPTQ (4 bits, group
128), written with each format's own packing by the test suite's writers. The unquantized engine generates
greedy completions of random prompts; every engine then scores the same prompt + completion sequences
(``prompt_logprobs``). One JSON line per format: how far its logprobs of those tokens are from the
unquantized ones (mean, 99th percentile, max) and how often it would have picked the same greedy token.
Random weights make the figures a measure of each format's rounding on that shape, not of a trained model.

    python benchmarks/quant_logprobs.py                                   # W-GPU's shape (Qwen3-0.6B), GPU
    python benchmarks/quant_logprobs.py --workload w-cpu --num-prompts 2 --prompt-len 32 --output-len 8
"""

from __future__ import annotations

import argparse
import json
import random
import shutil
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import torch

from infercore import LLM, SamplingParams
from infercore.benchmarks.teacher_forced import close, score
from infercore.benchmarks.workloads import WORKLOADS, Workload

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "tests" / "quantization"))

import fp8_checkpoints  # noqa: E402  (the test suite's writers: each format's own packing)
from int4_checkpoints import Int4Scheme, write_int4_pair  # noqa: E402

FORMATS = ("fp8-block", "fp8-channel", "fp8-tensor", "awq", "gptq")
#: The releases' block and group sizes.
FP8_BLOCK, INT4_GROUP = 128, 128


def write_checkpoint(workload: Workload, folder: Path, seed: int) -> Path:
    """The workload's shape with HF's random initialisation, as one ``model.safetensors``."""
    from transformers import AutoConfig, AutoModelForCausalLM

    workload.write_model_folder(folder)
    config = AutoConfig.from_pretrained(str(folder))
    torch.manual_seed(seed)
    model = AutoModelForCausalLM.from_config(config, dtype=getattr(torch, workload.dtype))
    model.save_pretrained(str(folder), safe_serialization=True, max_shard_size="100GB")
    return folder


def write_format(source: Path, out: Path, name: str) -> Path:
    """``source`` in format ``name`` (the writers' dequantized twins are removed at once)."""
    if name.startswith("fp8-"):
        fp8_checkpoints.BLOCK = FP8_BLOCK
        quantized, twin = fp8_checkpoints.write_fp8_pair(source, out, name.removeprefix("fp8-"))
    else:
        scheme = Int4Scheme("awq", INT4_GROUP) if name == "awq" else Int4Scheme("gptq", INT4_GROUP, sym=True)
        quantized, twin = write_int4_pair(source, out, scheme)
    shutil.rmtree(twin)
    return quantized


def _engine(folder: Path, workload: Workload, args: argparse.Namespace) -> LLM:
    return LLM(model=str(folder), dtype=workload.dtype, max_model_len=workload.max_model_len,
               skip_tokenizer_init=True, seed=args.seed, enforce_eager=args.enforce_eager,
               **({"cpu_threads": args.cpu_threads} if args.cpu_threads else {}))


def compare(workload: Workload, formats: list[str], args: argparse.Namespace) -> list[dict[str, Any]]:
    """The unquantized engine's sequences and logprobs, then each format's figures against them."""
    rng = random.Random(args.seed)
    prompts = [[rng.randint(0, workload.token_id_max) for _ in range(args.prompt_len)]
               for _ in range(args.num_prompts)]
    records = []
    with tempfile.TemporaryDirectory(dir=args.tmp_dir) as tmp:
        source = write_checkpoint(workload, Path(tmp) / "source", args.seed)
        llm = _engine(source, workload, args)
        greedy = SamplingParams(temperature=0, max_tokens=args.output_len, ignore_eos=True, detokenize=False)
        outs = llm.generate([{"prompt_token_ids": p} for p in prompts], greedy, use_tqdm=False)
        sequences = [p + list(o.outputs[0].token_ids) for p, o in zip(prompts, outs, strict=True)]
        reference, _ = score(llm, sequences, args.output_len)
        close(llm)
        for name in formats:
            start = time.perf_counter()
            folder = write_format(source, Path(tmp) / "formats", name)
            llm = _engine(folder, workload, args)
            logprobs, ranks = score(llm, sequences, args.output_len)
            close(llm)
            shutil.rmtree(folder)
            gaps = (torch.tensor(logprobs, dtype=torch.float64) - torch.tensor(reference, dtype=torch.float64)).abs()
            records.append({
                "benchmark": "quant_logprobs", "workload": workload.name, "format": name,
                "tokens_scored": len(gaps), "abs_logprob_diff_mean": round(float(gaps.mean()), 5),
                "abs_logprob_diff_p99": round(float(gaps.quantile(0.99)), 5),
                "abs_logprob_diff_max": round(float(gaps.max()), 5),
                "mean_reference_logprob": round(sum(reference) / len(reference), 4),
                "greedy_agreement": round(sum(r == 1 for r in ranks) / len(ranks), 4),
                "wall_s": round(time.perf_counter() - start, 1),
                "device": torch.cuda.get_device_name(0) if torch.cuda.is_available() else "cpu"})
            print(json.dumps(records[-1]), flush=True)
    return records


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--workload", choices=sorted(WORKLOADS), default="w-gpu", help="model shape to run")
    parser.add_argument("--formats", default=",".join(FORMATS), help=f"comma-separated, of {', '.join(FORMATS)}")
    parser.add_argument("--num-prompts", type=int, default=16)
    parser.add_argument("--prompt-len", type=int, default=256)
    parser.add_argument("--output-len", type=int, default=64)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--enforce-eager", action="store_true")
    parser.add_argument("--cpu-threads", type=int, default=None, help="torch threads of a CPU engine")
    parser.add_argument("--tmp-dir", default=None, help="where the checkpoints are written (default: the system's)")
    args = parser.parse_args(argv)
    workload = WORKLOADS[args.workload]
    formats = [f.strip() for f in args.formats.split(",") if f.strip()]
    unknown = sorted(set(formats) - set(FORMATS))
    if unknown:
        parser.error(f"unknown formats {unknown}; choose from {', '.join(FORMATS)}")
    if args.prompt_len + args.output_len > workload.max_model_len:
        parser.error(f"--prompt-len + --output-len is over {workload.max_model_len}, the workload's max_model_len")
    compare(workload, formats, args)
    return 0


if __name__ == "__main__":
    sys.exit(main())
