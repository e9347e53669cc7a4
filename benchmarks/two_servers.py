"""An embedding model and a generating model, each served by its own `infercore serve` on one GPU.

Starts two servers (BERT-large-shaped embedder on one port, the W-GPU Qwen3-0.6B shape generating on another,
each with a share of the device's memory), then drives both, first one at a time and then at once:
``/v1/embeddings`` with batches of token-id inputs and ``/v1/completions`` with token-id prompts
(``ignore_eos``). Prints one JSON line per phase: embedding inputs/s and generated tokens/s.

    python benchmarks/two_servers.py --embed-inputs 4096 --completions 256
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import os
import random
import signal
import subprocess
import sys
import tempfile
import threading
import time
import urllib.request
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

from infercore.benchmarks.embed import EMBED_WORKLOADS, write_folder
from infercore.benchmarks.workloads import WORKLOADS


def post(url: str, body: dict[str, Any]) -> dict[str, Any]:
    request = urllib.request.Request(url, data=json.dumps(body).encode(), headers={"Content-Type": "application/json"})
    with urllib.request.urlopen(request, timeout=600) as response:
        return json.loads(response.read())


def start(folder: Path, port: int, log: Path, *extra: str) -> subprocess.Popen[bytes]:
    cmd = ["infercore", "serve", str(folder), "--port", str(port), "--gpu-memory-utilization", "0.4", *extra]
    return subprocess.Popen(cmd, stdout=log.open("w"), stderr=subprocess.STDOUT, start_new_session=True)


def wait_healthy(port: int, server: subprocess.Popen[bytes], limit_s: float) -> None:
    deadline = time.monotonic() + limit_s
    while time.monotonic() < deadline:
        if server.poll() is not None:
            raise RuntimeError(f"the server on port {port} exited with {server.returncode}")
        try:
            urllib.request.urlopen(f"http://127.0.0.1:{port}/health", timeout=2)
            return
        except OSError:
            time.sleep(1)
    raise TimeoutError(f"the server on port {port} was not healthy within {limit_s:.0f} s")


def embed_phase(port: int, inputs: list[list[int]], batch: int, concurrency: int) -> dict[str, Any]:
    url = f"http://127.0.0.1:{port}/v1/embeddings"
    batches = [inputs[i:i + batch] for i in range(0, len(inputs), batch)]
    start_t = time.perf_counter()
    with ThreadPoolExecutor(concurrency) as pool:
        results = list(pool.map(lambda b: post(url, {"model": "embed", "input": b}), batches))
    wall = time.perf_counter() - start_t
    vectors = sum(len(r["data"]) for r in results)
    return {"embed_inputs": vectors, "embed_wall_s": round(wall, 3), "embed_inputs_per_s": round(vectors / wall, 1)}


def generate_phase(port: int, prompts: list[list[int]], max_tokens: int, concurrency: int) -> dict[str, Any]:
    url = f"http://127.0.0.1:{port}/v1/completions"
    start_t = time.perf_counter()
    with ThreadPoolExecutor(concurrency) as pool:
        results = list(pool.map(lambda p: post(url, {"model": "gen", "prompt": p, "max_tokens": max_tokens,
                                                      "temperature": 0.0, "ignore_eos": True}), prompts))
    wall = time.perf_counter() - start_t
    tokens = sum(r["usage"]["completion_tokens"] for r in results)
    return {"completions": len(prompts), "gen_wall_s": round(wall, 3), "gen_output_tok_s": round(tokens / wall, 1)}


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--embed-inputs", type=int, default=4096)
    parser.add_argument("--embed-batch", type=int, default=16, help="inputs per /v1/embeddings request")
    parser.add_argument("--completions", type=int, default=256)
    parser.add_argument("--prompt-len", type=int, default=256)
    parser.add_argument("--max-tokens", type=int, default=256)
    parser.add_argument("--concurrency", type=int, default=64)
    parser.add_argument("--startup-s", type=float, default=240)
    parser.add_argument("--log-dir", default=os.environ.get("OUT", "."))
    parser.add_argument("--tiny", action="store_true", help="2-layer, 64-wide models of both shapes (a CPU check)")
    args = parser.parse_args()

    workload = EMBED_WORKLOADS["w-gpu-embed"]
    shape = workload.shapes[0]
    gen = WORKLOADS["w-gpu"]
    if args.tiny:
        small = {"hidden_size": 64, "intermediate_size": 128, "num_hidden_layers": 2, "num_attention_heads": 4}
        shape = dataclasses.replace(shape, model_config={**shape.model_config, **small})
        gen = gen.tiny()
    rng = random.Random(0)
    inputs = workload.inputs(0, args.embed_inputs)
    prompts = [[rng.randint(0, gen.token_id_max) for _ in range(args.prompt_len)] for _ in range(args.completions)]
    servers: list[subprocess.Popen[bytes]] = []
    with tempfile.TemporaryDirectory() as tmp:
        embed_folder = write_folder(shape, "bfloat16", Path(tmp) / "embed")
        gen_folder = gen.write_model_folder(Path(tmp) / "gen")
        subprocess.run([sys.executable, str(Path(__file__).parent.parent / "scripts" / "make_bench_tokenizer.py"),
                        str(gen_folder), "--vocab-size", str(gen.model_config["vocab_size"])], check=True)
        logs = Path(args.log_dir)
        try:
            started = time.perf_counter()
            servers.append(start(embed_folder, 8101, logs / "server_embed.log", "--served-model-name", "embed",
                                 "--max-model-len", str(shape.max_model_len)))
            servers.append(start(gen_folder, 8102, logs / "server_gen.log", "--served-model-name", "gen",
                                 "--load-format", "dummy", "--max-model-len", "4096"))
            for port, server in zip((8101, 8102), servers, strict=True):
                wait_healthy(port, server, args.startup_s)
            print(json.dumps({"phase": "startup", "both_healthy_s": round(time.perf_counter() - started, 1)}), flush=True)
            embed_phase(8101, inputs[:64], args.embed_batch, 4)  # warm both before timing
            generate_phase(8102, prompts[:8], 8, 8)
            alone = {**embed_phase(8101, inputs, args.embed_batch, args.concurrency // 4),
                     **generate_phase(8102, prompts, args.max_tokens, args.concurrency)}
            print(json.dumps({"phase": "one at a time", **alone}), flush=True)
            together: dict[str, Any] = {}
            embed_thread = threading.Thread(target=lambda: together.update(
                embed_phase(8101, inputs, args.embed_batch, args.concurrency // 4)))
            embed_thread.start()
            together.update(generate_phase(8102, prompts, args.max_tokens, args.concurrency))
            embed_thread.join()
            print(json.dumps({"phase": "both at once", **together}), flush=True)
        finally:
            for server in servers:
                if server.poll() is None:
                    os.killpg(server.pid, signal.SIGINT)
            for server in servers:
                try:
                    server.wait(timeout=30)
                except subprocess.TimeoutExpired:
                    os.killpg(server.pid, signal.SIGKILL)
    return 0


if __name__ == "__main__":
    sys.exit(main())
