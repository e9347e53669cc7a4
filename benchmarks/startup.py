"""Start-up, measured from the outside: ``LLM(...)`` from a fresh process, and ``infercore serve`` from the
command to an answered /health and an answered completion. Each run is a new process (so imports count),
prints one JSON line, and the engine's start-up timeline (INFO lines of ``infercore.startup``) goes to the
run's log and into the line as ``timeline``. Run it twice in a row to see a fresh machine, then warm caches.

    python benchmarks/startup.py --workload w-gpu-8b --serve-workload w-gpu --runs 2          # the H200
    python benchmarks/startup.py --workload w-cpu --serve-workload w-cpu --runs 1 \\
        --engine-args '{"cpu_threads": 1}' --serve-args "--cpu-threads 1"                       # CPU dry run

``--preimport`` imports modules before infercore in the ``LLM(...)`` runs (e.g. transformers' model registry,
``transformers.models.auto.modeling_auto``, to see the start-up as it was when reading a config imported it);
each line says which of the heavy optional modules (``HEAVY``) the process held once ``LLM(...)`` was ready;
``--import-profile`` adds the import seconds of each top-level package (``-X importtime``, which slows imports);
``--engine-imports`` first times what ``infercore serve``'s engine process imports, alone in a quiet process;
``--empty-kernel-cache`` gives each run an empty Triton cache (kernel builds as on a fresh machine: on CUDA they
build side by side by default; ``INFERCORE_KERNEL_BUILDS_AHEAD=0`` around the command builds them one by one).
"""

from __future__ import annotations

import argparse
import json
import os
import re
import shlex
import socket
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import httpx

from infercore.benchmarks.workloads import WORKLOADS

#: The ``LLM(...)`` run: imports timed apart from construction, the timeline logged at INFO.
#: Modules that reading a config used to bring along on some transformers releases.
HEAVY = ["transformers.models.auto.modeling_auto", "transformers.generation.utils", "sklearn", "torch._dynamo",
         "torch.distributed.tensor", "accelerate"]

_LLM_SCRIPT = r"""
import importlib, json, logging, sys, time
started = time.perf_counter()
logging.basicConfig(level=logging.INFO, format="%(levelname)s %(name)s: %(message)s")
for name in json.loads(sys.argv[2]):
    importlib.import_module(name)
from infercore import LLM
LLM  # the lazy attribute imports the engine
import infercore.entrypoints.llm
imported = time.perf_counter()
llm = LLM(**json.loads(sys.argv[1]))
ready = time.perf_counter()
print(json.dumps({"imports_s": round(imported - started, 2), "llm_init_s": round(ready - imported, 2),
                  "heavy_modules": [m for m in json.loads(sys.argv[3]) if m in sys.modules]}), flush=True)
"""


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


_TIMELINE_LINE = re.compile(r"infercore\.startup( \[api \d+\])?: (.*)")


def _timeline(log: str) -> list[str]:
    """The start-up lines of every process of the run (an API server's carry its ``[api N]`` tag)."""
    found = (_TIMELINE_LINE.search(line) for line in log.splitlines())
    return [f"{(m.group(1) or '').strip()} {m.group(2)}".strip() for m in found if m]


def import_seconds_by_package(log: str, top: int = 15) -> dict[str, float]:
    """``-X importtime`` lines summed per top-level package (each module's own time), the largest first."""
    totals: dict[str, float] = {}
    for line in log.splitlines():
        fields = line.split("|")
        if not line.startswith("import time:") or len(fields) != 3 or not fields[0].split(":")[1].strip().isdigit():
            continue
        package = fields[2].strip().split(".")[0]
        totals[package] = totals.get(package, 0.0) + int(fields[0].split(":")[1]) / 1e6
    return {name: round(s, 2) for name, s in sorted(totals.items(), key=lambda kv: -kv[1])[:top]}


#: What the serve command's engine process imports before its start-up begins: the spawned child's main module (the
#: CLI), the spawn target's module, the engine class, the GPU plugins' hooks and kernels.
_ENGINE_IMPORTS = """
import importlib, json, sys, time
start = time.perf_counter()
for name in ("infercore.entrypoints.cli", "infercore.entrypoints.api_server_procs", "infercore.engine.core",
             "infercore_cuda.hooks", "infercore_triton.hooks", "infercore_triton.backend",
             "infercore_triton.decode_attention", "infercore_triton.fp8_block_gemm"):
    try:
        importlib.import_module(name)
    except ImportError:
        pass
print(json.dumps({"engine_imports_s": round(time.perf_counter() - start, 2)}))
"""


def engine_import_profile() -> dict[str, Any]:
    """The engine process's imports in one quiet process under ``-X importtime``: their seconds, the seconds of each
    top-level package, and the modules of largest cumulative time."""
    done = subprocess.run([sys.executable, "-X", "importtime", "-c", _ENGINE_IMPORTS], capture_output=True,
                          text=True, timeout=300)
    cumulative = []
    for line in done.stderr.splitlines():
        fields = line.split("|")
        if line.startswith("import time:") and len(fields) == 3 and fields[1].strip().isdigit():
            cumulative.append((round(int(fields[1]) / 1e6, 2), fields[2].strip()))
    lines = [json.loads(line) for line in done.stdout.splitlines() if line.startswith("{")]
    return {"run": "engine imports", **(lines[-1] if lines else {"error": done.stderr[-1500:]}),
            "import_s_by_package": import_seconds_by_package(done.stderr),
            "heaviest_cumulative": sorted(cumulative, reverse=True)[:20]}


def run_llm(folder: Path, dtype: str, max_model_len: int, extra: dict[str, Any], log_dir: Path,
            index: int, preimport: list[str] | None = None, import_profile: bool = False) -> dict[str, Any]:
    kwargs = {"model": str(folder), "load_format": "dummy", "dtype": dtype, "max_model_len": max_model_len,
              "skip_tokenizer_init": True, **extra}
    env = {**os.environ, **({"PYTHONPROFILEIMPORTTIME": "1"} if import_profile else {})}
    start = time.perf_counter()
    done = subprocess.run([sys.executable, "-c", _LLM_SCRIPT, json.dumps(kwargs), json.dumps(preimport or []),
                           json.dumps(HEAVY)], capture_output=True, text=True, timeout=900, env=env)
    wall = time.perf_counter() - start
    (log_dir / f"llm-{index}.log").write_text(done.stdout + done.stderr)
    lines = [json.loads(line) for line in done.stdout.splitlines() if line.startswith("{")]
    result = {"run": "llm", "index": index, "preimport": preimport or [], "process_wall_s": round(wall, 2),
              **(lines[-1] if lines else {})}
    if done.returncode != 0:
        result["error"] = done.stderr[-1500:]
    if import_profile:
        result["import_s_by_package"] = import_seconds_by_package(done.stderr)
    return {**result, "timeline": _timeline(done.stderr)}


def run_serve(folder: Path, dtype: str, max_model_len: int, extra: list[str], log_dir: Path,
              index: int) -> dict[str, Any]:
    port = _free_port()
    log_path = log_dir / f"serve-{index}.log"
    cmd = [sys.executable, "-m", "infercore.entrypoints.cli", "serve", str(folder), "--port", str(port),
           "--load-format", "dummy", "--dtype", dtype, "--max-model-len", str(max_model_len),
           "--skip-tokenizer-init", "--served-model-name", "m", *extra]
    url = f"http://127.0.0.1:{port}"
    result: dict[str, Any] = {"run": "serve", "index": index}
    with open(log_path, "w") as log:
        start = time.perf_counter()
        proc = subprocess.Popen(cmd, stdout=log, stderr=subprocess.STDOUT, env={**os.environ, "PYTHONUNBUFFERED": "1"})
        try:
            result["health_s"] = _wait(lambda: httpx.get(url + "/health", timeout=1).status_code == 200, proc, start)
            body = {"model": "m", "prompt": [1, 2, 3], "max_tokens": 1}
            result["first_completion_s"] = _wait(
                lambda: httpx.post(url + "/v1/completions", json=body, timeout=60).status_code == 200, proc, start)
        finally:
            proc.terminate()
            try:
                proc.wait(30)
            except subprocess.TimeoutExpired:
                proc.kill()
    result["timeline"] = _timeline(log_path.read_text())
    return result


def _wait(ready: Any, proc: subprocess.Popen[bytes], start: float, limit_s: float = 600) -> float | None:
    while time.perf_counter() - start < limit_s and proc.poll() is None:
        try:
            if ready():
                return round(time.perf_counter() - start, 2)
        except httpx.HTTPError:
            pass
        time.sleep(0.05)
    return None


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--workload", default="w-gpu-8b", help="the model shape of the LLM(...) runs")
    parser.add_argument("--serve-workload", default="w-gpu", help="the model shape of the serve runs")
    parser.add_argument("--runs", type=int, default=2, help="runs of each (the first may find cold caches)")
    parser.add_argument("--engine-args", default="{}", help="more LLM(...) arguments, JSON")
    parser.add_argument("--serve-args", default="", help="more serve flags")
    parser.add_argument("--log-dir", default=None, help="where the runs' logs go (default: a temporary folder)")
    parser.add_argument("--preimport", default="", help="comma-separated modules the LLM(...) runs import first")
    parser.add_argument("--skip-serve", action="store_true", help="only the LLM(...) runs")
    parser.add_argument("--skip-llm", action="store_true", help="only the serve runs")
    parser.add_argument("--import-profile", action="store_true",
                        help="run LLM(...) under -X importtime and add the seconds of each top-level package")
    parser.add_argument("--empty-kernel-cache", action="store_true",
                        help="each run starts with an empty Triton cache of its own (a fresh machine's kernel builds)")
    parser.add_argument("--engine-imports", action="store_true",
                        help="first, one line: the serve engine process's imports timed alone (-X importtime)")
    args = parser.parse_args()
    log_dir = Path(args.log_dir or tempfile.mkdtemp(prefix="infercore-startup-"))
    log_dir.mkdir(parents=True, exist_ok=True)
    if args.engine_imports:
        print(json.dumps(engine_import_profile()), flush=True)
    with tempfile.TemporaryDirectory(prefix="startup-models-") as tmp:
        llm_w, serve_w = WORKLOADS[args.workload], WORKLOADS[args.serve_workload]
        llm_folder = llm_w.write_model_folder(Path(tmp) / llm_w.name)
        serve_folder = serve_w.write_model_folder(Path(tmp) / f"serve-{serve_w.name}")
        for index in range(args.runs):
            if args.empty_kernel_cache:
                os.environ["TRITON_CACHE_DIR"] = tempfile.mkdtemp(prefix=f"triton-cache-{index}-", dir=log_dir)
            if not args.skip_llm:
                line = run_llm(llm_folder, llm_w.dtype, llm_w.max_model_len, json.loads(args.engine_args), log_dir, index,
                              [name for name in args.preimport.split(",") if name], args.import_profile)
                print(json.dumps({"workload": llm_w.name, **line}), flush=True)
            if args.skip_serve:
                continue
            line = run_serve(serve_folder, serve_w.dtype, serve_w.max_model_len, shlex.split(args.serve_args),
                             log_dir, index)
            print(json.dumps({"workload": serve_w.name, **line}), flush=True)
    print(f"logs in {log_dir}", file=sys.stderr)
    return 0


if __name__ == "__main__":
    sys.exit(main())
