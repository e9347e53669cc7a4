"""W-CPU, interleaved: infercore, HF transformers and vLLM-CPU on the same requests, quiet and beside a
busy neighbour (a process that keeps one core busy), one JSON line per run and a summary.

Each round runs infercore (``bench throughput --workload w-cpu --compare-hf``: infercore, then HF, in one
process) and then vLLM-CPU (``vllm.LLM`` in its own virtual environment, same model shape, same token
ids, greedy, ignore_eos, only ``generate`` timed), so the engines see the same machine load in turn.
Every line carries ``/proc/loadavg`` before and after the run: on a shared machine "quiet" is only as
quiet as the other users allow.

    python benchmarks/w_cpu_interleaved.py --vllm-python /work/venv-vllm/bin/python --rounds 2
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path
from typing import Any

from infercore.benchmarks.workloads import WORKLOADS

#: The vLLM-CPU run: reads the model folder and the requests, prints one JSON line.
_VLLM_SCRIPT = r"""
import json, sys, time
from vllm import LLM, SamplingParams
folder, requests_file, threads = sys.argv[1], sys.argv[2], int(sys.argv[3])
import torch
torch.set_num_threads(threads)
prompts, max_tokens = json.load(open(requests_file))
llm = LLM(model=folder, load_format="dummy", dtype="float32", max_model_len=1024, skip_tokenizer_init=True)
params = [SamplingParams(temperature=0.0, max_tokens=m, ignore_eos=True, detokenize=False) for m in max_tokens]
inputs = [{"prompt_token_ids": p} for p in prompts]
llm.generate(inputs[:4], params[:4], use_tqdm=False)
start = time.perf_counter()
outputs = llm.generate(inputs, params, use_tqdm=False)
wall = time.perf_counter() - start
tokens = sum(len(o.outputs[0].token_ids) for o in outputs)
import vllm
print(json.dumps({"engine": "vllm-cpu", "version": vllm.__version__, "output_tokens": tokens,
                  "wall_s": round(wall, 3), "output_tok_s": round(tokens / wall, 1)}), flush=True)
"""


def loadavg() -> str:
    return Path("/proc/loadavg").read_text().strip()


def _json_lines(text: str) -> list[dict[str, Any]]:
    return [json.loads(line) for line in text.splitlines() if line.startswith("{")]


def run_infercore_and_hf(threads: int, timeout_s: float) -> list[dict[str, Any]]:
    """One ``bench throughput`` process: infercore's line, then HF's."""
    cmd = [sys.executable, "-m", "infercore.entrypoints.cli", "bench", "throughput", "--workload", "w-cpu",
           "--threads", str(threads), "--compare-hf", "--no-progress"]
    done = subprocess.run(cmd, capture_output=True, text=True, timeout=timeout_s)
    if done.returncode != 0:
        return [{"engine": "infercore", "error": done.stderr[-2000:]}]
    return _json_lines(done.stdout)


def run_vllm(python: str, folder: Path, requests_file: Path, threads: int, timeout_s: float) -> dict[str, Any]:
    env = {**os.environ, "VLLM_CPU_KVCACHE_SPACE": os.environ.get("VLLM_CPU_KVCACHE_SPACE", "2")}
    env.pop("PYTHONPATH", None)  # vLLM's own environment, not infercore's
    try:
        done = subprocess.run([python, "-c", _VLLM_SCRIPT, str(folder), str(requests_file), str(threads)],
                              capture_output=True, text=True, timeout=timeout_s, env=env)
    except subprocess.TimeoutExpired:
        return {"engine": "vllm-cpu", "error": f"timed out after {timeout_s:g} s"}
    lines = _json_lines(done.stdout)
    return lines[-1] if lines else {"engine": "vllm-cpu", "error": done.stderr[-2000:]}


def neighbour() -> subprocess.Popen[bytes]:
    """A process that keeps one core busy until it is killed."""
    return subprocess.Popen([sys.executable, "-c", "while True: pass"])


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--vllm-python", default=None, help="python of a venv with vllm-cpu (skip vLLM if absent)")
    parser.add_argument("--rounds", type=int, default=2, help="rounds per condition")
    parser.add_argument("--threads", type=int, default=2)
    parser.add_argument("--conditions", default="quiet,busy", help="quiet, busy (one busy neighbour), or both")
    parser.add_argument("--timeout", type=float, default=1800, help="seconds per engine run")
    args = parser.parse_args()
    workload = WORKLOADS["w-cpu"]
    results: dict[str, dict[str, list[float]]] = {}
    with tempfile.TemporaryDirectory(prefix="w-cpu-") as tmp:
        folder = workload.write_model_folder(Path(tmp) / "w-cpu")
        requests_file = Path(tmp) / "requests.json"
        requests_file.write_text(json.dumps(workload.requests(0)))
        for condition in args.conditions.split(","):
            busy = neighbour() if condition == "busy" else None
            try:
                for round_index in range(args.rounds):
                    before = loadavg()
                    lines = run_infercore_and_hf(args.threads, args.timeout)
                    if args.vllm_python:
                        lines.append(run_vllm(args.vllm_python, folder, requests_file, args.threads, args.timeout))
                    for line in lines:
                        line.update(condition=condition, round=round_index, loadavg_before=before,
                                    loadavg_after=loadavg())
                        print(json.dumps(line), flush=True)
                        if "output_tok_s" in line:
                            results.setdefault(condition, {}).setdefault(line["engine"], []).append(
                                line["output_tok_s"])
            finally:
                if busy is not None:
                    busy.kill()
                    busy.wait()
    print(json.dumps({"summary": _summary(results)}), flush=True)
    return 0


def _summary(results: dict[str, dict[str, list[float]]]) -> dict[str, Any]:
    """Median tok/s per condition and engine, infercore's ratios to the peers, busy over quiet."""
    out: dict[str, Any] = {}
    for condition, engines in results.items():
        medians = {engine: statistics.median(values) for engine, values in engines.items()}
        entry: dict[str, Any] = {"median_output_tok_s": medians}
        ours = medians.get("infercore")
        for peer in ("hf-transformers", "vllm-cpu"):
            if ours and medians.get(peer):
                entry[f"infercore_over_{peer}"] = round(ours / medians[peer], 2)
        out[condition] = entry
    quiet, busy = (out.get(c, {}).get("median_output_tok_s", {}).get("infercore") for c in ("quiet", "busy"))
    if quiet and busy:
        out["infercore_busy_over_quiet"] = round(busy / quiet, 2)
    return out


if __name__ == "__main__":
    sys.exit(main())
